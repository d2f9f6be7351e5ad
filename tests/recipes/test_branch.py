"""End to end: branch a finished quick run after phase 1's critic, relaunch it with another actor setting.

`python -m recipes.branch` then `python -m recipes.webrl` on the branch with a changed `actor.train.lr`
and `resume.allow_changes`: only phase 1's actor, sync, evaluation and checkpoint run, on the copied
critic, and the change is recorded from phase 1's actor. Real parts throughout (see test_webrl_recipe.py).
"""

from __future__ import annotations

import json
import sys

import pytest

from webrl.run_layout import RunLayout


@pytest.mark.slow
def test_a_branch_after_the_critic_reruns_only_the_actor_onwards(tmp_path, model_cache, recipe_command, run_recipe):
    source, branch = RunLayout(tmp_path / "source"), RunLayout(tmp_path / "branch")
    first = run_recipe(recipe_command("recipes.webrl", source.root, model_cache))
    assert first.returncode == 0, first.stderr[-4000:]
    command = [sys.executable, "-m", "recipes.branch", str(source.root), str(branch.root), "--phase", "1"]
    made = run_recipe([*command, "--after", "critic"], timeout=300)
    assert made.returncode == 0, made.stderr[-4000:]
    critic = source.critic_path(1).read_bytes()

    changed = ("actor.train.lr=0.0003", "resume.allow_changes=[actor.train.lr]")
    again = run_recipe(recipe_command("recipes.webrl", branch.root, model_cache, *changed))
    assert again.returncode == 0, again.stderr[-4000:]
    ran = [line.strip() for line in again.stdout.splitlines() if line.startswith("[phase ")]
    assert ran == ["[phase 1] actor", "[phase 1] sync", "[phase 1] evaluate"], again.stdout[-2000:]
    assert branch.critic_path(1).read_bytes() == critic
    assert branch.rollouts_path(1, 0).read_bytes() == source.rollouts_path(1, 0).read_bytes()
    assert (branch.actor_dir(1) / "config.json").is_file()
    changes = json.loads(branch.config_changes_path.read_text())
    assert changes == [{"from_phase": 1, "from_stage": "actor", "changes": {"actor.train.lr": [0.0001, 0.0003]}}]
    state = json.loads(branch.state_path.read_text())
    assert (state["phase"], [record["phase"] for record in state["history"]]) == (2, [0, 1])
    assert branch.wandb_run_id_path.read_text() != source.wandb_run_id_path.read_text()
    assert json.loads(branch.branch_path.read_text())["source"] == str(source.root.resolve())
