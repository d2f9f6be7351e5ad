"""Training-step time of a model under each numeric precision on this machine's CPU (or GPU).

One SFT-shaped step (forward over prompt + action with logits for the action span only, the
action NLL, backward, AdamW) on random ids of a fixed shape, in a fresh process per precision so
that peak memory is its own:

- `32-true`: fp32 weights and compute;
- `bf16-mixed`: fp32 master weights, bf16 autocast (Lightning's `bf16-mixed`, `fabric.precision`);
- `bf16-true`: bf16 weights and compute (pure bf16 AdamW drops updates below bf16's resolution, so
  this is a speed reference, not a recommended setting).

CPUs with AVX512-BF16 (or AMX) run bf16 matrix products natively; elsewhere bf16 may be slower.
Figures: median wall seconds per step after warm-up, the process's CPU seconds per step (less
inflated by other jobs on a shared machine), and peak RSS.

    python bench/precision.py                                  # SmolLM2-135M, batch 8 x 512 tokens
    python bench/precision.py --model tiny --steps 6
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "precision.json"
PRECISIONS = ("32-true", "bf16-mixed", "bf16-true")
ACTION_TOKENS = 20


def _model_dir(name: str, work: Path) -> Path:
    from webrl.modules.model_factory import build_tiny_model, convert_smollm2

    if name == "smollm2":
        return convert_smollm2()
    corpus = ['do(action="Click", element="7")', "Task Instruction: buy the red shirt <a id=1>Home</a>"] * 50
    return build_tiny_model(work / "tiny", corpus, vocab_size=2048, hidden_size=256, num_layers=4)


def worker(args: argparse.Namespace) -> dict:
    """Time `args.steps` steps under `args.precision` in this process; return the figures."""
    import torch

    from webrl.modules.lm import action_token_logprobs, load_model_and_tokenizer

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        dtype = torch.bfloat16 if args.precision == "bf16-true" else torch.float32
        model, _ = load_model_and_tokenizer(_model_dir(args.model, Path(work)), dtype=dtype)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(10, model.config.vocab_size, (args.batch_size, args.seq_len), generator=generator)  # (B, T)
    attention = torch.ones_like(ids)
    action = torch.zeros_like(ids)
    action[:, -ACTION_TOKENS:] = 1
    walls, cpus = [], []
    for _ in range(args.warmup + args.steps):
        wall, cpu = time.perf_counter(), time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16-mixed"):
            loss = -action_token_logprobs(model, ids, attention, action).sum() / action.sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "precision": args.precision,
        "wall_s_per_step": statistics.median(walls[args.warmup :]),
        "cpu_s_per_step": statistics.median(cpus[args.warmup :]),
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "tokens_per_s": args.batch_size * args.seq_len / statistics.median(walls[args.warmup :]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=list(PRECISIONS))
    parser.add_argument("--worker", choices=PRECISIONS, dest="precision", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.precision:
        print(json.dumps(worker(args)))
        return
    rows = []
    for precision in args.precisions:
        command = [sys.executable, __file__, "--worker", precision] + _shared_flags(args)
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"{args.model} {precision:>10}: {row['wall_s_per_step']:7.2f} s/step wall, "
            f"{row['cpu_s_per_step']:7.2f} s/step CPU, {row['tokens_per_s']:7.0f} tokens/s, "
            f"peak RSS {row['peak_rss_gb']:.1f} GB"
        )
    record = {"machine": platform.processor() or platform.machine(), "settings": vars(args) | {"precision": None}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(record | {"rows": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS}")


def _shared_flags(args: argparse.Namespace) -> list[str]:
    flags = ["--model", args.model, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len)]
    return flags + ["--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]


if __name__ == "__main__":
    main()
