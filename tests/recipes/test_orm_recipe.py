"""End to end: `python -m recipes.orm` builds the ORM's data from every source, trains it and measures it.

Real parts throughout (sites server, Chromium, tiny Llama, Fabric). The assertions read what a user
would: `orm/orm_eval.json` and the printed counts and figures.
"""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_orm_recipe_reports_its_data_per_source_and_its_agreement(tmp_path, model_cache, recipe_command, run_recipe):
    run_dir = tmp_path / "run"
    result = run_recipe(recipe_command("recipes.orm", run_dir, model_cache))
    assert result.returncode == 0, result.stderr[-4000:]
    report = json.loads((run_dir / "orm" / "orm_eval.json").read_text())
    assert not (run_dir / "config.json").exists(), "the WebRL run's config.json is not the ORM recipe's"
    data = report["training_data"]
    assert set(data) == {"actor", "demonstrations", "solver_noise_0.3", "truncated", "wrong_answer"}
    assert data["actor"]["positives"] + data["actor"]["negatives"] + data["actor"]["unlabelled"] == 8
    assert data["truncated"]["negatives"] + data["truncated"]["positives"] == 8
    kept = [sum(row[f"kept_{side}"] for row in data.values()) for side in ("positives", "negatives")]
    assert kept[0] == kept[1] > 0
    assert report["orm/compared"] == 6 and 0.0 <= report["orm/agreement"] <= 1.0
    assert "accuracy" in result.stdout and "precision" in result.stdout and "solver_noise_0.3" in result.stdout
    # Its held-out rollouts resume by task id, so a relaunch with another actor stops, naming the setting.
    again = run_recipe(recipe_command("recipes.orm", run_dir, model_cache, "rollout.temperature=0.5"))
    assert again.returncode != 0 and "rollout.temperature" in again.stdout + again.stderr
