"""`python -m recipes.webrl --dry-run` on a half-finished run: how long it takes, and where the time goes.

The dry run is how a user checks a config and sees which stages a relaunch would redo, so it must
answer at once (issue #17: under 5 s), without a browser or a model. A run directory is made
half-finished here (config.json of the default run, phase 0 done, phase 1 stopped after its
rollouts), or `--run-dir` names a real one. The command runs `--repeats` times in a fresh
interpreter each; each run's wall time and CPU time (user + system of the child) are recorded,
the CPU time being the figure a loaded machine disturbs least. One more run with `python -X
importtime` gives the import breakdown: the slowest top-level imports of the recipe, and whether any
of the model libraries (torch, Lightning, transformers, ...) was loaded. The load average is
recorded beside the figures. Printed and written to bench/results/dry_run.json.

    python bench/dry_run.py
    python bench/dry_run.py --repeats 9 --run-dir runs/x
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "dry_run.json"
TARGET_S = 5.0
"""Issue #17's bound on a dry run of a half-finished run."""
MODEL_LIBRARIES = ("torch", "lightning", "lightning_fabric", "transformers", "peft", "openai", "vllm", "matplotlib")
"""What a run loads to train and roll out; a dry run should load none of it."""


def half_finished_run(run_dir: Path) -> Path:
    """A run directory as a run leaves it when killed in phase 1 after its rollouts."""
    sys.path.insert(0, str(REPO))
    from recipes import webrl

    webrl.keep_config(run_dir, webrl.recipe_config([f"output_dir={run_dir}"]))
    state = {"phase": 1, "done": ["curriculum", "rollouts"], "history": [{"phase": 0}]}
    (run_dir / "run_state.json").write_text(json.dumps(state), encoding="utf-8")
    return run_dir


def timed_run(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds and CPU seconds (user + system) of one run of `command` in a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return wall, cpu, result


def import_breakdown(stderr: str, top: int) -> tuple[list[dict], list[str], float]:
    """The `top` slowest top-level imports with their slowest own imports, the model libraries loaded, the total (s).

    `python -X importtime` prints each module after its own imports, indented two spaces more per
    level; under `-m` the recipe runs as __main__, so its imports are the top level (with the
    interpreter's own start-up imports beside them).
    """
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or line.count("|") != 2:
            continue
        _, cumulative, name = line.split("|")
        if cumulative.strip().isdigit():
            rows.append((len(name) - len(name.lstrip()), int(cumulative) / 1e6, name.strip()))
    slowest = []
    for index, (depth, seconds, name) in enumerate(rows):
        if depth != 1:
            continue
        children = []
        for child_depth, child_seconds, child in reversed(rows[:index]):
            if child_depth <= depth:
                break
            if child_depth == depth + 2:
                children.append({"module": child, "s": round(child_seconds, 3)})
        children.sort(key=lambda row: -row["s"])
        slowest.append({"module": name, "s": round(seconds, 3), "slowest_imports": children[:top]})
    slowest.sort(key=lambda row: -row["s"])
    loaded = sorted({name.split(".")[0] for _, _, name in rows} & set(MODEL_LIBRARIES))
    return slowest[:top], loaded, sum(row["s"] for row in slowest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="dry runs timed")
    parser.add_argument("--run-dir", type=Path, help="an existing run directory (default: a half-finished one)")
    parser.add_argument("--top", type=int, default=12, help="slowest imports listed")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = args.run_dir or half_finished_run(Path(scratch) / "run")
        command = [sys.executable, "-m", "recipes.webrl", "--dry-run", f"output_dir={run_dir}"]
        load_before = os.getloadavg()
        runs = [timed_run(command) for _ in range(args.repeats)]
        _, _, traced = timed_run([sys.executable, "-X", "importtime", *command[1:]])
        load_after = os.getloadavg()
    plan = runs[-1][2].stdout
    walls, cpus = [wall for wall, _, _ in runs], [cpu for _, cpu, _ in runs]
    slowest, loaded, import_s = import_breakdown(traced.stderr, args.top)
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_1min": {"before": round(load_before[0], 2), "after": round(load_after[0], 2)},
        "command": " ".join(command[1:]),
        "repeats": args.repeats,
        "wall_s": {"median": round(statistics.median(walls), 3), "max": round(max(walls), 3)},
        "cpu_s": {"median": round(statistics.median(cpus), 3), "max": round(max(cpus), 3)},
        "target_s": TARGET_S,
        "import_s_under_importtime": round(import_s, 3),
        "slowest_imports": slowest,
        "model_libraries_loaded": loaded,
        "plan": plan.splitlines(),
    }
    print(plan)
    print(f"load average (1 min) {load_before[0]:.1f} before, {load_after[0]:.1f} after; {args.repeats} dry runs:")
    wall, cpu = report["wall_s"], report["cpu_s"]
    print(f"  wall median {wall['median']:.2f} s (max {wall['max']:.2f}), target < {TARGET_S} s")
    print(f"  CPU  median {cpu['median']:.2f} s (max {cpu['max']:.2f})")
    print(f"imports {import_s:.2f} s under -X importtime; model libraries loaded: {loaded or 'none'}; slowest:")
    for row in slowest:
        print(f"  {row['s']:7.3f} s  {row['module']}")
        for child in row["slowest_imports"][:5]:
            print(f"  {child['s']:11.3f} s  {child['module']}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
