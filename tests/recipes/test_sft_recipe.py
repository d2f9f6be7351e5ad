"""The SFT recipe's run logic (recipes.sft.main) with training, evaluation and the browser stubbed: which rank
evaluates."""

from __future__ import annotations

import pytest
from test_filtered_bc import NoBrowser, StubFabric

import webrl.starting_models
from recipes import sft as sft_recipe


@pytest.mark.parametrize(("rank", "evaluates"), [(0, True), (1, False)])
def test_with_several_ranks_rank_0_alone_evaluates(tmp_path, monkeypatch, rank, evaluates):
    """`evaluate_checkpoint` runs every held-out task in one process: on every rank, each task was written once per
    rank into the same files, and the comparison counted the copies in n."""
    evaluated: list[int] = []
    fabric = StubFabric(rank=rank, world_size=2)
    monkeypatch.setattr(sft_recipe, "launch_fabric", lambda config, loggers=None: fabric)
    monkeypatch.setattr(sft_recipe, "WebEnvironment", NoBrowser)
    monkeypatch.setattr(webrl.starting_models, "ensure_sft", lambda config, fabric, env: (tmp_path / "sft", []))

    def evaluate_checkpoint(config, env, target, name):
        evaluated.append(fabric.global_rank)
        return {"success_rate": 0.25}

    monkeypatch.setattr(sft_recipe, "evaluate_checkpoint", evaluate_checkpoint)
    result = sft_recipe.main([f"output_dir={tmp_path / 'out'}", "fabric.devices=2"])
    assert evaluated == ([rank] if evaluates else [])
    assert result == ({"success_rate": 0.25} if evaluates else {})
