# The two commands README.md gives, and the pieces they are made of.
PY := .venv/bin/python
export WANDB_MODE ?= offline

.PHONY: setup run test test-all lint bench

setup:
	bash scripts/setup.sh

run: setup  ## set everything up and run the main job on the embedded default
	$(PY) -m recipes.webrl

test: setup  ## set everything up and run the test suite (fast tests + vllm tests)
	$(PY) -m ruff check .
	.venv/bin/lint-imports
	$(PY) -m pytest -q

test-all: setup  ## also the slow tests (full task suites, longer training)
	$(PY) -m pytest -q -m "not gpu"

lint:
	$(PY) -m ruff check . && $(PY) -m ruff format --check . && .venv/bin/lint-imports
