"""The one success rule (`webrl.data.trajectory`): 0/1 labels succeed from 0.5, graded scores only at full marks,
and the ORM's P(YES) at the configured `reward.threshold`, which reaches the loop's labels."""

from __future__ import annotations

import asyncio

from tests.single_process import SingleProcess
from webrl import loop as loop_module
from webrl.config import load_config
from webrl.data.atomic_io import write_json_atomic
from webrl.data.labels import label_with_orm
from webrl.data.steps import trajectory_outcome
from webrl.data.trajectory import is_full_score, is_success, orm_accepts, write_trajectories
from webrl.env.miniwob import MiniWoBBackend
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig


def test_a_label_succeeds_from_one_half_and_a_graded_score_only_at_full_marks():
    assert is_success(0.5) and is_success(1.0) and not is_success(0.49)
    assert is_success(0.7, threshold=0.7) and not is_success(0.69, threshold=0.7)
    assert not is_full_score(0.99), "a MiniWoB raw reward of 0.99 is partial credit, not a success"
    assert is_full_score(1.0)


def test_the_orm_accepts_exactly_at_the_threshold():
    assert orm_accepts(0.5, 0.5) and not orm_accepts(0.4999, 0.5)
    assert orm_accepts(0.7, 0.7) and not orm_accepts(0.69, 0.7)


def test_a_trajectory_is_judged_on_its_outcome_then_evaluator_then_orm(make_trajectory):
    assert make_trajectory(outcome=0.5, eval_reward=0.0).succeeded
    assert not make_trajectory(outcome=None, eval_reward=0.0, orm_reward=1.0).succeeded
    assert make_trajectory(outcome=None, orm_reward=1.0).succeeded
    unlabelled = make_trajectory(outcome=None)
    assert unlabelled.success_label is None and not unlabelled.succeeded
    assert not make_trajectory(outcome=0.6).succeeded_at(0.7)
    assert trajectory_outcome(make_trajectory(outcome=None, eval_reward=0.5)) == 1.0


def test_label_with_orm_uses_the_threshold_it_is_given(make_trajectory):
    trajectories = [make_trajectory(str(i), outcome=None) for i in range(3)]
    label_with_orm(trajectories, lambda prompts: [0.69, 0.7, 0.71], threshold=0.7)
    assert [t.orm_reward for t in trajectories] == [0.0, 1.0, 1.0]
    assert [t.outcome for t in trajectories] == [0.0, 1.0, 1.0]


def test_the_loop_labels_rollouts_at_the_configured_threshold(tmp_path, make_trajectory, monkeypatch):
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", "reward.threshold=0.7"])
    loop = PhaseLoop(
        config, SingleProcess(), None, None, sft_dir=tmp_path / "sft", orm_dir=tmp_path / "orm", demonstrations=[]
    )
    rollouts = [make_trajectory(f"t{i}", outcome=None) for i in range(2)]
    write_json_atomic(loop.layout.tasks_path(1), [t.task.to_dict() for t in rollouts])  # the phase's tasks
    write_trajectories(loop.layout.rollouts_path(1, 0), rollouts)
    monkeypatch.setattr(loop_module, "orm_scorer", lambda *args, **kwargs: (lambda prompts: [0.69, 0.7], None))
    loop._labels(1)
    assert [t.outcome for t in loop.layout.labelled(1)] == [0.0, 1.0]


def test_the_loop_scores_with_the_orm_on_its_process_s_device(tmp_path, make_trajectory, monkeypatch):
    """On a GPU run the ORM must score where the process trains, not on the CPU it loads on."""
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", "reward.threshold=0.7"])
    gpu = SingleProcess(device="cuda:3")
    loop = PhaseLoop(config, gpu, None, None, sft_dir=tmp_path / "sft", orm_dir=tmp_path / "orm", demonstrations=[])
    rollouts = [make_trajectory("t0", outcome=None)]
    write_json_atomic(loop.layout.tasks_path(1), [t.task.to_dict() for t in rollouts])
    write_trajectories(loop.layout.rollouts_path(1, 0), rollouts)
    devices = []

    def scorer(path, **kwargs):
        devices.append(kwargs.get("device", "cpu"))
        return lambda prompts: [0.9] * len(prompts), None

    monkeypatch.setattr(loop_module, "orm_scorer", scorer)
    loop._labels(1)
    assert devices == ["cuda:3"]


class PartialCreditPage:
    """TEST DOUBLE of a MiniWoB page whose episode ended with a raw reward of 0.99."""

    async def evaluate(self, script: str) -> dict:
        return {"done": True, "raw": 0.99, "reward": 0.95}


def test_a_miniwob_raw_reward_below_full_marks_scores_zero():
    with MiniWoBBackend() as backend:
        result = asyncio.run(backend.evaluate(PartialCreditPage(), None, None))
    assert result.score == 0.0 and result.details["raw_reward"] == 0.99
