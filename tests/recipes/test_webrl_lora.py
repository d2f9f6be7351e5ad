"""A phase with LoRA on the actor and the critic: adapters train, the saved actor is a plain model directory."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_one_phase_with_lora(tmp_path, model_cache, recipe_command, run_recipe):
    run_dir = tmp_path / "run"
    lora = ("actor.lora.enabled=true", "actor.lora.r=4", "critic.lora.enabled=true", "critic.lora.r=4")
    result = run_recipe(recipe_command("recipes.webrl", run_dir, model_cache, *lora))
    assert result.returncode == 0, result.stderr[-4000:]
    assert [record["phase"] for record in json.loads((run_dir / "run_state.json").read_text())["history"]] == [0, 1]
    actor = run_dir / "phase_001" / "actor"
    assert (actor / "config.json").exists() and not (actor / "adapter_config.json").exists()
