"""The Filtered BC recipe against its source run run again: an actor is reused only while the rollouts it cloned are
those the source run holds (`webrl.baselines.rollouts_change`)."""

from __future__ import annotations

import json
import os

from recipes.filtered_bc import INPUTS_KEY
from tests.recipes.test_filtered_bc import Recipe
from tests.sample_records import build_trajectory
from webrl.cache_builds import DONE_MARKER
from webrl.data.trajectory import write_trajectories
from webrl.run_layout import RunLayout

ROLLOUTS_KEY = "rollouts_sha256"
"""Where the actor's recorded inputs hold the digest of its rollouts (`webrl.baselines.ROLLOUTS_KEY`)."""


def run_source_again(recipe: Recipe, rollouts: int = 20) -> None:
    """The source WebRL run removed and run again in the same directory: other phase-1 rollouts, written later."""
    labelled = RunLayout(recipe.root / "source").labelled_path(1)
    trajectories = [build_trajectory(f"n{i}", orm_score=i / rollouts, eval_reward=0.0) for i in range(rollouts)]
    write_trajectories(labelled, trajectories)
    later = (recipe.root / "out" / "actor" / DONE_MARKER).stat().st_mtime + 10
    os.utime(labelled, (later, later))


def test_an_actor_cloned_from_rollouts_the_source_run_no_longer_holds_is_trained_again(tmp_path, monkeypatch, capsys):
    """The same settings on a source run run again: the actor of the old rollouts' 3 is not evaluated as the new 6's."""
    recipe = Recipe(tmp_path, monkeypatch)
    recipe.run()
    run_source_again(recipe)
    summary = recipe.run()
    assert recipe.trained == [3, 6] and summary["rollouts"] == 20.0
    out = capsys.readouterr().out
    assert f"other phase-1 rollouts of {tmp_path / 'source'} than those it holds now; training it again" in out
    recipe.run()
    assert recipe.trained == [3, 6], "the new rollouts' actor is reused"


def test_an_actor_recorded_before_the_rollouts_digest_is_reused_until_the_source_is_written_again(
    tmp_path, monkeypatch
):
    """A done marker of an older version holds the settings without `rollouts_sha256`: rollouts older than it are
    those it was trained on; rollouts written after it cannot be."""
    recipe = Recipe(tmp_path, monkeypatch)
    recipe.run()
    marker_path = tmp_path / "out" / "actor" / DONE_MARKER
    marker = json.loads(marker_path.read_text())
    marker[INPUTS_KEY].pop(ROLLOUTS_KEY, None)
    marker_path.write_text(json.dumps(marker))  # as an older version left it
    recipe.run()
    assert recipe.trained == [3]
    run_source_again(recipe)
    recipe.run()
    assert recipe.trained == [3, 6]
    assert ROLLOUTS_KEY in json.loads(marker_path.read_text())[INPUTS_KEY]
