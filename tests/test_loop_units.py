"""PhaseLoop's stages one at a time: which files each reads and writes, and which checkpoint each phase uses.

The loop runs on a real single-process CPU Fabric and a real `WebEnvironment` (the embedded sites
server, for the suites); the stages tested here start no browser, engine or model. Rollouts are
records written by hand where the rollout stage would write them. The stage order and the resume
decisions of `run` are in tests/test_loop_stages.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lightning.fabric import Fabric
from sample_records import build_trajectory

from webrl import loop as loop_module
from webrl.config import load_config
from webrl.data.atomic_io import write_json_atomic
from webrl.data.steps import read_samples
from webrl.data.trajectory import Trajectory, write_trajectories
from webrl.loop import PhaseLoop
from webrl.loop_config import WebRLConfig
from webrl.phase_record import phase_record
from webrl.phase_training import sample_by_steps
from webrl.run_state import STAGES, RunState
from webrl.web_environment import WebEnvironment

LABELS = ["reward.source=evaluator", "reward.orm_labels=false"]
"""Labels from the evaluator's reward, no ORM: the labelling stage then loads no model."""


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1)


@pytest.fixture(scope="module")
def env() -> WebEnvironment:
    with WebEnvironment(load_config(WebRLConfig, [])) as environment:
        yield environment


def _loop(tmp_path: Path, fabric: Fabric, env: WebEnvironment | None = None, *overrides: str) -> PhaseLoop:
    config = load_config(WebRLConfig, [f"output_dir={tmp_path / 'run'}", "phases=2", "env.train_tasks=4", *overrides])
    return PhaseLoop(config, fabric, env, None, sft_dir=tmp_path / "sft", orm_dir=None, demonstrations=[])


def _mark_model(path: Path) -> None:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")


def test_each_phase_rolls_out_the_last_actor_trained_before_it(tmp_path, fabric):
    loop = _loop(tmp_path, fabric)
    assert [loop.actor_dir(phase) for phase in (0, 1, 3)] == [tmp_path / "sft"] * 3
    _mark_model(loop.layout.actor_dir(1))
    loop.layout.actor_dir(2).mkdir(parents=True)  # an actor save that never finished: no config.json
    assert loop.actor_dir(1) == tmp_path / "sft", "a phase's own actor is what it trains, not what it rolls out"
    assert loop.actor_dir(2) == loop.actor_dir(3) == loop.layout.actor_dir(1)


def test_the_critic_is_the_last_one_saved_up_to_the_phase(tmp_path, fabric):
    loop = _loop(tmp_path, fabric)
    assert loop.critic_path(2) is None
    loop.layout.critic_path(0).parent.mkdir(parents=True)
    loop.layout.critic_path(0).write_bytes(b"")
    assert loop.critic_path(2) is None, "phase 0 trains no critic, so a file there is never read"
    loop.layout.critic_path(1).parent.mkdir(parents=True)
    loop.layout.critic_path(1).write_bytes(b"")
    assert [loop.critic_path(phase) for phase in (1, 2)] == [loop.layout.critic_path(1)] * 2


def _trajectories(lengths: list[int]) -> list[Trajectory]:
    return [build_trajectory(f"t{i}", num_steps=n) for i, n in enumerate(lengths)]


def test_sample_by_steps_keeps_whole_trajectories_within_the_budget():
    everything = _trajectories([3, 1, 1])
    assert sample_by_steps(everything, 0, seed=0) is everything, "0 is no limit"
    assert sample_by_steps(everything, 5, seed=0) is everything, "all fit"
    for seed in range(5):  # the 3-step trajectory never fits beside another: the two 1-step ones are the only way
        assert sorted(t.task.task_id for t in sample_by_steps(everything, 2, seed)) == ["t1", "t2"]
    pairs = {tuple(t.task.task_id for t in sample_by_steps(_trajectories([2, 2, 2]), 4, seed)) for seed in range(20)}
    assert all(len(pair) == 2 for pair in pairs) and len(pairs) > 1, "two of three, chosen by the seed"
    same = [[t.task.task_id for t in sample_by_steps(_trajectories([2, 2, 2]), 4, 7)] for _ in range(2)]
    assert same[0] == same[1]
    assert all(list(pair) == sorted(pair) for pair in pairs), "the kept ones stay in their input order"


def test_the_first_curriculum_is_a_seeded_sample_of_the_train_split(tmp_path, fabric, env):
    loop = _loop(tmp_path, fabric, env, "curriculum_enabled=false")
    metrics = loop._curriculum(0)
    tasks = loop.layout.tasks(0)
    assert metrics == {"curriculum/tasks": 4.0}
    assert [t.task_id for t in tasks] == [t.task_id for t in env.suite("train", 4, loop.config.seed)]
    loop._curriculum(1)
    assert [t.task_id for t in loop.layout.tasks(1)] == [t.task_id for t in tasks], "no curriculum: the same tasks"


def test_rollouts_run_each_phase_task_samples_per_task_times(tmp_path, fabric, env, monkeypatch):
    loop = _loop(tmp_path, fabric, env, "curriculum_enabled=false", "rollout.samples_per_task=2")
    loop._curriculum(0)
    ran: list[str] = []

    def run_episodes(engine, tasks, out, **_):
        ran.extend(task.task_id for task in tasks)
        return [], {}

    monkeypatch.setattr(loop.engine_link, "serve", lambda actor_dir: None)
    monkeypatch.setattr(env, "run_episodes", run_episodes)
    loop._rollouts(0)
    ids = [task.task_id for task in loop.layout.tasks(0)]
    assert ran == [sample for task_id in ids for sample in (task_id, f"{task_id}~1")]


def _infra_failure(task_id: str) -> Trajectory:
    failed = build_trajectory(task_id, outcome=None, eval_reward=0.0)
    failed.status, failed.metadata = "error", {"infra_error": True}
    return failed


def _phase_tasks(loop: PhaseLoop, phase: int, trajectories: list[Trajectory]) -> None:
    """The phase's tasks.json, as the curriculum stage leaves it, for the tasks of `trajectories`."""
    write_json_atomic(loop.layout.tasks_path(phase), [t.task.to_dict() for t in trajectories])


def _unjudged(task_id: str, *, evaluator_failed: bool) -> Trajectory:
    """An episode the evaluators did not judge: no score (a fuzzy task, no judge), or a 0 from a failed evaluator."""
    if not evaluator_failed:
        return build_trajectory(task_id, outcome=None)
    failed = build_trajectory(task_id, outcome=None, eval_reward=0.0)
    failed.status, failed.metadata = "error", {"eval_error": "MissingHelperError: no helper"}
    return failed


def test_labels_copy_the_evaluator_reward_and_drop_infrastructure_failures_and_unjudged_episodes(tmp_path, fabric):
    loop = _loop(tmp_path, fabric, None, *LABELS, "rollout.samples_per_task=1")
    rollouts = [
        build_trajectory("a", outcome=None, eval_reward=1.0),
        build_trajectory("b", outcome=None, eval_reward=0.0),
    ]
    dropped = [_infra_failure("c"), _unjudged("d", evaluator_failed=False), _unjudged("e", evaluator_failed=True)]
    _phase_tasks(loop, 1, [*rollouts, *dropped])
    write_trajectories(loop.layout.rollouts_path(1, 0), [*rollouts, *dropped])
    metrics = loop._labels(1)
    labelled = loop.layout.labelled(1)
    assert [(t.task.task_id, t.outcome) for t in labelled] == [("a", 1.0), ("b", 0.0)]
    assert (metrics["train/success_rate"], metrics["rollout/infra_errors"], metrics["rollout/errors"]) == (0.5, 1, 0)
    assert metrics["rollout/unlabelled"] == 3.0


def test_labels_read_the_phases_own_episodes_once_whatever_files_an_earlier_sharding_left(tmp_path, fabric):
    """A rollout stage relaunched on one process after two left rank 1's partial file, and a task set changed."""
    loop = _loop(tmp_path, fabric, None, *LABELS, "rollout.samples_per_task=1")
    rollouts = [
        build_trajectory("a", outcome=None, eval_reward=1.0),
        build_trajectory("b", outcome=None, eval_reward=0.0),
    ]
    _phase_tasks(loop, 1, rollouts)
    write_trajectories(loop.layout.rollouts_path(1, 0), rollouts)
    stale = [build_trajectory("a", outcome=None, eval_reward=0.0), build_trajectory("z", outcome=None)]
    write_trajectories(loop.layout.rollouts_path(1, 1), stale)
    loop._labels(1)
    assert [(t.task.task_id, t.outcome) for t in loop.layout.labelled(1)] == [("a", 1.0), ("b", 0.0)]


def test_orm_labels_without_an_orm_is_an_error_that_names_the_setting(tmp_path, fabric):
    loop = _loop(tmp_path, fabric)
    _phase_tasks(loop, 1, [build_trajectory("a")])
    write_trajectories(loop.layout.rollouts_path(1, 0), [build_trajectory("a")])
    with pytest.raises(ValueError, match="reward.orm_labels needs an ORM"):
        loop._labels(1)


def test_replay_stores_the_phase_once_even_when_redone(tmp_path, fabric):
    loop = _loop(tmp_path, fabric, None, "replay.enabled=false")
    write_trajectories(loop.layout.labelled_path(0), _trajectories([1, 2]))
    write_trajectories(loop.layout.labelled_path(1), _trajectories([3]))
    assert loop._replay(0) == {"replay/kept": 0.0, "replay/buffer_trajectories": 2.0}
    assert loop._replay(1) == loop._replay(1) == {"replay/kept": 0.0, "replay/buffer_trajectories": 3.0}
    assert read_samples(loop.layout.replay_samples_path(1)) == []
    assert [len(t.steps) for t in loop.replay.trajectories(before=1)] == [1, 2]


def test_replay_scores_the_first_success_of_each_intent_and_no_failure(tmp_path, fabric, monkeypatch):
    """The scoring budget (replay.max_scored_steps) is drawn from the first success per intent, in stored order."""
    loop = _loop(tmp_path, fabric, None, "replay.max_scored_steps=4")
    demos = [build_trajectory(f"d{i}", intent=f"intent {i}", num_steps=1) for i in range(6)]
    later = [build_trajectory(f"p{i}", intent=f"intent {i}", num_steps=1) for i in range(6)]
    failures = [build_trajectory(f"f{i}", num_steps=1, outcome=0.0) for i in range(6)]
    loop.demonstrations = demos
    write_trajectories(loop.layout.labelled_path(0), [*later, *failures])
    loop._replay(0)
    write_trajectories(loop.layout.labelled_path(1), [])
    scored: list[list[str]] = []

    def filter_replay(fabric, config, experience, **_):
        scored.append([t.task.task_id for t in experience])
        return []

    monkeypatch.setattr(loop_module, "filter_replay", filter_replay)
    loop._replay(1)
    (ids,) = scored
    assert len(ids) == 4 and all(i.startswith("d") for i in ids) and ids == sorted(ids), ids


def test_phase_zero_trains_nothing(tmp_path, fabric):
    loop = _loop(tmp_path, fabric)
    assert loop._critic(0) == loop._actor(0) == {}
    assert not loop.layout.critic_path(0).exists() and not loop.layout.actor_dir(0).exists()


def test_a_finished_stage_is_recorded_then_marked_and_the_phase_record_merges_them(tmp_path, fabric):
    loop = _loop(tmp_path, fabric)
    loop._finish_stage(0, "curriculum", {"curriculum/tasks": 4.0, "time/curriculum_s": 1.5})
    loop._finish_stage(0, "rollouts", {"rollout/episodes": 4.0, "time/rollouts_s": 2.0})
    assert RunState.load(loop.layout.state_path).done == ["curriculum", "rollouts"]
    assert loop.state.is_done(0, "rollouts") and not loop.state.is_done(0, "labels")
    assert phase_record(loop.layout, 0) == {
        "phase": 0,
        "curriculum/tasks": 4.0,
        "time/curriculum_s": 1.5,
        "rollout/episodes": 4.0,
        "time/rollouts_s": 2.0,
    }


def test_a_finished_run_runs_no_stage_and_returns_its_history(tmp_path, fabric):
    history = [{"phase": 0}, {"phase": 1}, {"phase": 2}]
    RunState(phase=3, history=history).save(tmp_path / "run" / "run_state.json")
    loop = _loop(tmp_path, fabric)
    loop.stages = tuple((name, pytest.fail) for name in STAGES[:-1])
    assert loop.run() == history
