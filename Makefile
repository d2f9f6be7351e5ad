# The two commands README.md gives, and the pieces they are made of.
PY := .venv/bin/python
export WANDB_MODE ?= offline

.PHONY: setup run test test-all lint bench

setup:
	bash scripts/setup.sh

run: setup  ## set everything up and run the main job: SmolLM2, SFT and a WebRL phase on the embedded sites
	$(PY) -m recipes.webrl --config webrl_smollm2 --config webrl_release_loss --config webrl_learning

test: setup  ## set everything up and run the test suite (fast tests + vllm tests)
	$(PY) -m ruff check .
	.venv/bin/lint-imports
	$(PY) -m pytest -q

test-all: setup  ## also the slow tests (full task suites, longer training)
	$(PY) -m pytest -q -m "not gpu"

lint:
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && .venv/bin/lint-imports
