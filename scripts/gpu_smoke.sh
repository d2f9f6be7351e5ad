#!/usr/bin/env bash
# GPU smoke test: the checks a CPU machine cannot make, in one command on a machine with an NVIDIA GPU.
#   bash scripts/gpu_smoke.sh                 # figures under runs/gpu_smoke
#   OUT=/scratch/smoke bash scripts/gpu_smoke.sh
# It installs the GPU stack (vllm with its own CUDA torch), runs the `gpu` tests (vLLM sleep/wake, weights
# pushed in memory), then one WebRL phase of the embedded default on the GPU (vLLM rollouts, Lightning
# training on cuda) while it samples the GPU's memory, and prints the test counts, the phase's time per stage,
# the peak GPU memory and the memory plan's estimates for the tiny, SmolLM2 and 8B configs to compare with it.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_smoke: no NVIDIA GPU found (nvidia-smi lists none); run it on a GPU machine" >&2
  exit 2
fi

out="${OUT:-runs/gpu_smoke}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.csv"

WEBRL_STACK=gpu bash scripts/setup.sh
export WANDB_MODE=offline
py=.venv/bin/python

"$py" -m pytest -q -m gpu tests 2>&1 | tee "$out/gpu_tests.txt"

# Memory in use on every GPU, every 500 ms, for the whole phase: the peak is what the memory plan estimates.
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$out/gpu_memory.csv" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT
started=$(date +%s)
"$py" -m recipes.webrl output_dir="$out/run" phases=1 rollout.engine=vllm \
  fabric.accelerator=cuda fabric.devices=1 fabric.precision=bf16-mixed 2>&1 | tee "$out/run.log"
echo "phase run: $(( $(date +%s) - started )) s" | tee -a "$out/summary.txt"
kill "$sampler" 2>/dev/null || true

"$py" - "$out" <<'PY' | tee -a "$out/summary.txt"
import csv
import sys
from pathlib import Path

out = Path(sys.argv[1])
peak = max((int(row[1]) for row in csv.reader(out.joinpath("gpu_memory.csv").open()) if len(row) == 2), default=0)
print(f"peak GPU memory in use: {peak / 1024:.1f} GiB")
rows = list(csv.DictReader(out.joinpath("run", "phases.csv").open()))
for row in rows:
    stages = {key[5:-2]: float(value) for key, value in row.items() if key.startswith("time/") and value}
    times = ", ".join(f"{stage} {seconds:.1f} s" for stage, seconds in stages.items())
    print(f"phase {row['phase']}: held-out success {row.get('test/success_rate', '?')}; {times}")
PY

# The memory plan's estimates (a peak that does not fit exits 1: a figure to report, not a reason to stop).
plan() {
  local name=$1
  shift
  "$py" bench/memory_plan.py "$@" --json "$out/memory_$name.json" > "$out/memory_$name.txt" 2>&1 || true
  sed -n '1,13p' "$out/memory_$name.txt" | tee -a "$out/summary.txt"
}
plan tiny --config webrl_tiny fabric.accelerator=cuda
plan smollm2 --config webrl_smollm2 --model smollm2 fabric.accelerator=cuda
plan llama8b --config webrl_llama8b_webarena --model meta-llama/Llama-3.1-8B
echo "gpu_smoke: figures in $out/summary.txt"
