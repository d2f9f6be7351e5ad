"""Action parser on adversarial responses: the slowest parse, since every episode waits on it.

The parser runs in the rollout's process for every step, so a degenerate model output must not
stall it. Each case below is a response crafted to be expensive (deep nesting, a call start every
three characters, overlapping calls in comments, unterminated strings, a megabyte over the cap) or
a realistic one for scale; each is parsed `--repeats` times, timing the wall clock and the
process's CPU time of each parse. The worst case is the case with the slowest median CPU time, the
figure a loaded machine disturbs least (another job's time slices lengthen the wall time, not the
CPU time); its median and slowest wall times are reported beside it, with the load average.
Figures are printed and written to bench/results/parser.json.

    python bench/parser.py
    python bench/parser.py --repeats 101
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from webrl.env.actions import MAX_RESPONSE_CHARS, ActionParseError, parse_action

RESULTS = Path(__file__).resolve().parent / "results" / "parser.json"
CAP = MAX_RESPONSE_CHARS


def _fill(unit: str, budget: int = CAP) -> str:
    """`unit` repeated as often as fits in `budget` characters."""
    return unit * (budget // len(unit))


CASES: dict[str, Callable[[], str]] = {
    "realistic": lambda: '# Element: the "Add to cart" button\n# Note: price is $12\ndo(action="Click", element="37")',
    "nested_do_400": lambda: "do(" * 400 + ")" * 400,
    "nested_do_cap": lambda: _fill("do(", CAP // 2) + _fill(")", CAP // 2),
    "call_start_every_3_chars": lambda: _fill("do("),
    "exit_start_every_5_chars": lambda: _fill("exit("),
    "open_quotes": lambda: _fill('do(action="'),
    "alternating_quotes": lambda: _fill("do(a='do(b=\""),
    "unterminated_triple_quotes": lambda: _fill('exit(message="""'),
    "calls_in_comments": lambda: "do(\n" + _fill("# do(\n", CAP - 20) + 'x="1")',
    "parentheses_only": lambda: "do(" + _fill(")", CAP - 3),
    "long_valid_argument": lambda: 'do(action="Type", argument="' + "x" * (CAP - 60) + '", element="1")',
    "long_valid_after_prose": lambda: _fill("do you (want) it? ", CAP - 40) + 'do(action="Click", element="3")',
    "nul_bytes": lambda: _fill('do(action="\x00", element=\x00'),
    "megabyte_over_cap": lambda: 'do(action="Type", argument="' + "x" * (1 << 20) + '", element="1")',
}


def time_parses(text: str, repeats: int) -> tuple[list[float], list[float], str]:
    """Wall and CPU ms of each of `repeats` parses, and how the response was answered (action or error, clipped)."""
    walls, cpus = [], []
    outcome = ""
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        try:
            outcome = f"action {parse_action(text).name}"
        except ActionParseError as err:
            outcome = f"rejected: {str(err)[:100]}"
        cpus.append((time.process_time() - start_cpu) * 1000)
        walls.append((time.perf_counter() - start) * 1000)
    return walls, cpus, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=21, help="parses per case")
    args = parser.parse_args()

    cases = {}
    load_before = os.getloadavg()[0]
    for name, make in CASES.items():
        text = make()
        walls, cpus, outcome = time_parses(text, args.repeats)
        median, slowest, cpu = statistics.median(walls), max(walls), statistics.median(cpus)
        cases[name] = {
            "chars": len(text),
            "median_cpu_ms": round(cpu, 3),
            "median_ms": round(median, 3),
            "slowest_ms": round(slowest, 3),
            "outcome": outcome,
        }
        print(f"{name:28s} {len(text):>9,} chars  CPU {cpu:8.3f} ms  wall {median:8.3f} ms (slowest {slowest:9.3f})")
    load = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    worst = max(cases, key=lambda name: cases[name]["median_cpu_ms"])
    worst_case = {"case": worst, **{key: cases[worst][key] for key in ("median_cpu_ms", "median_ms", "slowest_ms")}}
    print(
        f"worst case: {worst}, median CPU {worst_case['median_cpu_ms']:.3f} ms, wall median "
        f"{worst_case['median_ms']:.3f} ms, slowest {worst_case['slowest_ms']:.3f} ms; load average (1 min) {load}"
    )
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load_average_1min": load,
        "max_response_chars": CAP,
        "repeats": args.repeats,
        "worst_case": worst_case,
        "cases": cases,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
