"""`actor.order_seed` and `critic.order_seed` reorder one stage's batches and change nothing else.

They exist to measure how far a stage's outcome moves between runs that differ only in batch order (a branch of a
finished run relaunched with another order seed), so a value must reach its own stage's batch order, leave the other
stage's order and the data itself alone, and an unset one must keep the order every earlier run had.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sample_records import build_trajectory, one_token_tokenizer
from webrl import phase_training
from webrl.config import load_config
from webrl.config_checks import ConfigError
from webrl.data.trajectory import write_trajectories
from webrl.loop_config import WebRLConfig
from webrl.run_layout import RunLayout
from webrl.stage_settings import StageSettings

PHASE = 1


def batch_order(tmp_path: Path, target: str, *overrides: str) -> list[tuple[str, ...]]:
    """The batches `target`'s stage of phase 1 would train on, as the prompts of their rows."""
    config = load_config(WebRLConfig, [f"output_dir={tmp_path}", *overrides])
    layout = RunLayout(tmp_path)
    if not layout.labelled_path(PHASE).exists():
        # Pages of six sizes, so that grouping by length has lengths to sort.
        episodes = [
            build_trajectory(f"task{i}", num_steps=4, outcome=float(i % 2), phase=PHASE, html_size=40 * (i + 1))
            for i in range(6)
        ]
        write_trajectories(layout.labelled_path(PHASE), episodes)
        layout.replay_samples_path(PHASE).write_text("")
    settings = StageSettings(batch_size=2, group_by_length=True)
    data = phase_training.replay_datamodule(config, layout, PHASE, one_token_tokenizer(), settings, target=target)
    loader = data.actor_dataloader() if target == "actor" else data.critic_dataloader()
    items = data.dataset.samples if target == "actor" else data.critic_states
    text = (lambda item: item.prompt) if target == "actor" else (lambda item: item.text)
    return [tuple(text(items[i]) for i in batch) for batch in loader.batch_sampler]


@pytest.mark.parametrize(("target", "other"), [("actor", "critic"), ("critic", "actor")])
def test_an_order_seed_reorders_its_own_stage_only(tmp_path, target, other):
    default = batch_order(tmp_path, target)
    reseeded = batch_order(tmp_path, target, f"{target}.order_seed=7")
    assert reseeded != default
    assert sorted(sum(reseeded, ())) == sorted(sum(default, ()))  # the same rows, each once
    assert batch_order(tmp_path, other, f"{target}.order_seed=7") == batch_order(tmp_path, other)


def test_an_unset_order_seed_follows_the_run_seed(tmp_path):
    assert batch_order(tmp_path, "actor", "seed=3") == batch_order(tmp_path, "actor", "actor.order_seed=3")
    assert batch_order(tmp_path, "actor", "seed=3") != batch_order(tmp_path, "actor")


def test_an_order_seed_that_is_not_an_integer_names_its_key(tmp_path):
    with pytest.raises(ConfigError, match="actor.order_seed"):
        load_config(WebRLConfig, [f"output_dir={tmp_path}", "actor.order_seed=late"])
