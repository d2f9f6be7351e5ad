"""RunBranch (`python -m recipes.branch`): a run directory branched at a stage boundary holds that stage's state.

The source run is made by the real PhaseLoop (its stage records, phase records and run_state.json) with
stages that write, through the project's writers, the files each real stage writes where it writes
them: two ranks' rollouts, screenshots, labels, the replay buffer, critic, actor, evaluation. No
browser, engine or model starts. The branch must copy exactly the files of the stages it keeps.
"""

from __future__ import annotations

import csv
import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sample_records import build_trajectory

from recipes import branch as branch_recipe
from recipes import webrl
from tests.single_process import SingleProcess
from webrl.curriculum.state import STATE_FILE
from webrl.data.atomic_io import write_bytes_atomic, write_json_atomic, write_jsonl_atomic
from webrl.data.replay import ReplayBuffer
from webrl.data.steps import write_samples
from webrl.data.trajectory import Trajectory, write_trajectories
from webrl.loop import PhaseLoop
from webrl.run_branch import RunBranch
from webrl.run_layout import RunLayout
from webrl.run_state import STAGES, RunState

PHASES = 2
"""The source run has phases 0, 1 and 2."""
LOG_STEPS = (5, 100_003, 150_001, 199_999, 200_002, 250_000, 299_999)
"""Steps of the source's launch log: before phase 1, phase 1's critic, actor and record, phase 2's likewise."""


def _with_screenshot(layout: RunLayout, trajectory: Trajectory, phase: int) -> Trajectory:
    """A recorded screenshot, as `ScreenshotRecorder` stores it beside the JSONL (and a failed capture)."""
    relative = f"screenshots/{trajectory.trajectory_id}/00.jpg"
    write_bytes_atomic(layout.phase_dir(phase) / relative, b"\xff\xd8 jpeg " + relative.encode())
    trajectory.metadata["screenshots"] = [relative, None]
    return trajectory


def _trajectory(name: str, phase: int) -> Trajectory:
    trajectory = build_trajectory(name, num_steps=2, phase=phase, eval_reward=1.0)
    trajectory.trajectory_id = name
    return trajectory


def _write_stage(layout: RunLayout, stage: str, phase: int) -> dict[str, float]:
    """What the real stage `stage` writes in `phase`, with a metric that names the stage and phase."""
    if stage == "curriculum":
        write_json_atomic(
            layout.tasks_path(phase), [_trajectory(f"p{phase}t{i}", phase).task.to_dict() for i in (0, 1)]
        )
        if phase > 0:
            write_json_atomic(layout.phase_dir(phase) / STATE_FILE, {"phase": phase})
    elif stage == "rollouts":
        write_trajectories(
            layout.rollouts_path(phase, 0), [_with_screenshot(layout, _trajectory(f"p{phase}r0", phase), phase)]
        )
        write_trajectories(layout.rollouts_path(phase, 1), [_trajectory(f"p{phase}r1", phase)])
        # An episode a crashed attempt had begun: its screenshot stays on disk, no rollouts file lists it.
        write_bytes_atomic(layout.phase_dir(phase) / "screenshots" / f"p{phase}crashed" / "00.jpg", b"\xff\xd8")
    elif stage == "labels":
        write_trajectories(layout.labelled_path(phase), layout.rollouts(phase))
    elif stage == "replay":
        write_samples(layout.replay_samples_path(phase), [])
        if phase > 0:
            write_json_atomic(layout.replay_scores_path(phase), {"scores": [0.7], "window": {"low": 0.5}})
        ReplayBuffer(layout.replay_dir).add_phase(phase, layout.labelled(phase), overwrite=True)
    elif stage == "critic" and phase > 0:
        write_bytes_atomic(layout.critic_path(phase), f"critic weights of phase {phase}".encode())
    elif stage == "actor" and phase > 0:
        write_json_atomic(layout.actor_dir(phase) / "config.json", {"model_type": "llama"})
        write_bytes_atomic(layout.actor_dir(phase) / "model.safetensors", f"actor of phase {phase}".encode())
        write_jsonl_atomic(layout.advantages_path(phase), [{"advantage": 0.25 * phase}])
        write_json_atomic(layout.critic_values_path(phase), {"key": {"critic_sha256": "c"}, "values": {"s": 0.5}})
    elif stage == "evaluate":
        layout.record_eval_tasks(phase, [f"p{phase}e"])
        write_trajectories(
            layout.eval_path(phase, 0), [_with_screenshot(layout, _trajectory(f"p{phase}e", phase), phase)]
        )
    return {f"{stage}/phase": float(phase)}


def writing_loop(run_dir: Path, calls: list[tuple[int, str]] | None = None, *overrides: str) -> PhaseLoop:
    """The real PhaseLoop on `run_dir`, whose stages write their files (`_write_stage`) and record their calls."""
    argv = [f"output_dir={run_dir}", f"phases={PHASES}", "tracking.wandb_mode=disabled", *overrides]
    config = webrl.recipe_config(argv)
    webrl.keep_config(run_dir, config)
    loop = PhaseLoop(config, SingleProcess(), None, None, sft_dir=run_dir / "sft", orm_dir=None, demonstrations=[])
    calls = [] if calls is None else calls

    def stage(name: str):
        return lambda phase: calls.append((phase, name)) or _write_stage(loop.layout, name, phase)

    loop.stages = tuple((name, stage(name)) for name, _ in loop.stages)
    return loop


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> RunLayout:
    """A finished three-phase run, with what tracking leaves beside it and two accepted config changes."""
    run_dir = tmp_path_factory.mktemp("source") / "run"
    writing_loop(run_dir).run()
    layout = RunLayout(run_dir)
    layout.wandb_run_id_path.write_text("source123")
    (run_dir / "wandb" / "offline-run-source123").mkdir(parents=True)
    (run_dir / "wandb" / "offline-run-source123" / "run-source123.wandb").write_bytes(b"w&b")
    log = layout.launch_logs_dir / "version_0" / "metrics.csv"
    log.parent.mkdir(parents=True)
    log.write_text("critic/loss,step\n" + "".join(f"{step / 1e6},{step}\n" for step in LOG_STEPS))
    changes = [{"from_phase": phase, "changes": {"actor.train.lr": [0.0001, 0.0002]}} for phase in (1, 2)]
    write_json_atomic(layout.config_changes_path, changes)
    return layout


def _files(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}


def _phase_rows(layout: RunLayout) -> list[dict[str, str]]:
    with layout.phases_csv.open(newline="") as handle:
        return [{key: value for key, value in row.items() if value != ""} for row in csv.DictReader(handle)]


def _stage_files(phase: int, stages: tuple[str, ...] | list[str]) -> set[str]:
    """The files `_write_stage` and the loop write for `stages` of `phase`, with metrics (what a branch must copy)."""
    d = f"phase_{phase:03d}"
    by_stage = {
        "curriculum": {f"{d}/tasks.json"} | ({f"{d}/{STATE_FILE}"} if phase else set()),
        "rollouts": {f"{d}/rollouts.rank0.jsonl", f"{d}/rollouts.rank1.jsonl", f"{d}/screenshots/p{phase}r0/00.jpg"},
        "labels": {f"{d}/labelled.jsonl"},
        "replay": {f"{d}/replay_samples.jsonl"} | ({f"{d}/replay_scores.json"} if phase else set()),
        # The actor stage writes the critic's values, but a branch after the critic takes them: they are the critic's.
        "critic": {f"{d}/critic.pt", f"{d}/critic_values.json"} if phase else set(),
        "actor": {f"{d}/advantages.jsonl", f"{d}/actor/config.json", f"{d}/actor/model.safetensors"}
        if phase
        else set(),
        "sync": set(),
        "evaluate": {f"{d}/eval_tasks.json", f"{d}/eval.rank0.jsonl", f"{d}/screenshots/p{phase}e/00.jpg"},
        "checkpoint": {f"{d}/tracked.json"},  # the real loop's: the phase's record went to the trackers
    }
    metrics = {f"{d}/metrics/{stage}.json" for stage in stages if stage != "checkpoint"}
    return set().union(*(by_stage[stage] for stage in stages)) | metrics


RUN_FILES = {"config.json", "branched_from.json", "run_state.json", "phases.csv", "config_changes.json",
             "replay/manifest.json", "metrics/version_0/metrics.csv"}  # fmt: skip


def test_a_branch_after_phase_one_critic_holds_exactly_what_the_run_had_then(source, tmp_path):
    branched = RunBranch(source.root, 1, "critic").write(tmp_path / "branch")
    kept = ("curriculum", "rollouts", "labels", "replay", "critic")
    replay = {"replay/phase_000/trajectories.jsonl", "replay/phase_001/trajectories.jsonl"}
    assert _files(branched.root) == RUN_FILES | replay | _stage_files(0, STAGES) | _stage_files(1, kept)
    for name in _stage_files(0, STAGES) | _stage_files(1, kept) | replay:
        assert (branched.root / name).read_bytes() == (source.root / name).read_bytes(), name
    # config.json holds what the source ran with at phase 1: its first settings with the change accepted from it.
    settings = json.loads(branched.config_path.read_text())
    assert settings["actor"]["train"]["lr"] == 0.0002
    first = json.loads(source.config_path.read_text())
    first["actor"]["train"]["lr"] = 0.0002
    assert settings == {**first, "output_dir": str(branched.root)}
    copied, original = branched.critic_path(1), source.critic_path(1)
    assert not copied.is_symlink() and copied.stat().st_ino != original.stat().st_ino, "copied, not linked"

    state = RunState.load(branched.state_path)
    assert (state.phase, state.done) == (1, list(kept))
    assert state.history == RunState.load(source.state_path).history[:1]
    assert _phase_rows(branched) == _phase_rows(source)[:1]
    assert ReplayBuffer(branched.replay_dir).stats() == {p: ReplayBuffer(source.replay_dir).stats()[p] for p in (0, 1)}
    assert [r["from_phase"] for r in json.loads(branched.config_changes_path.read_text())] == [1]
    with next(iter(branched.launch_logs())).open() as handle:
        assert [int(row["step"]) for row in csv.DictReader(handle)] == [5, 100_003]

    provenance = json.loads(branched.branch_path.read_text())
    taken = datetime.fromisoformat(provenance.pop("time"))
    assert abs(datetime.now(timezone.utc) - taken) < timedelta(minutes=5)
    expected = {"source": str(source.root.resolve()), "phase": 1, "after": "critic", "source_wandb_run_id": "source123"}
    assert provenance == expected


def test_a_branch_before_phase_two_replay_keeps_phase_one_whole_and_the_buffer_without_phase_two(source, tmp_path):
    branched = RunBranch(source.root, 2, "labels").write(tmp_path / "branch")
    phase_one = {name for name in _files(source.root) if name.startswith("phase_001/")}
    assert {n for n in _files(branched.root) if n.startswith("phase_001/")} == phase_one - {
        "phase_001/screenshots/p1crashed/00.jpg"
    }
    assert {n for n in _files(branched.root) if n.startswith("phase_002/")} == _stage_files(
        2, ("curriculum", "rollouts", "labels")
    )
    assert ReplayBuffer(branched.replay_dir).phases() == [0, 1]
    state = RunState.load(branched.state_path)
    assert (state.phase, state.done, [r["phase"] for r in state.history]) == (
        2,
        ["curriculum", "rollouts", "labels"],
        [0, 1],
    )
    assert [row["phase"] for row in _phase_rows(branched)] == ["0", "1"]
    assert [r["from_phase"] for r in json.loads(branched.config_changes_path.read_text())] == [1, 2]
    with next(iter(branched.launch_logs())).open() as handle:
        assert [int(row["step"]) for row in csv.DictReader(handle)] == [5, 100_003, 150_001, 199_999]


def test_a_branch_after_the_last_checkpoint_copies_every_file_but_tracking_and_the_report(source, tmp_path):
    """Every file a stage writes is copied: a stage output that `RunBranch` does not know of fails here."""
    branched = RunBranch(source.root, PHASES, "checkpoint").write(tmp_path / "branch")
    tracking = {name for name in _files(source.root) if name.startswith("wandb")} | {"report.html"}
    crashed = {f"phase_{p:03d}/screenshots/p{p}crashed/00.jpg" for p in range(PHASES + 1)}
    assert _files(branched.root) == (_files(source.root) - tracking - crashed) | {"branched_from.json"}
    state = RunState.load(branched.state_path)
    assert (state.phase, state.done) == (PHASES + 1, [])
    assert state.history == RunState.load(source.state_path).history
    assert _phase_rows(branched) == _phase_rows(source)


def _stop_once_the_config_is_kept(monkeypatch) -> None:
    """`webrl.main` stops with RuntimeError where the work would start: Fabric launched (not here) and config kept."""
    keep = webrl.keep_config

    def keep_then_stop(run_dir, config, *, dry_run=False):
        changes = keep(run_dir, config, dry_run=dry_run)
        if not dry_run:
            raise RuntimeError("past the config check")
        return changes

    monkeypatch.setattr(webrl, "launch_fabric", lambda *args, **kwargs: None)
    monkeypatch.setattr(webrl, "keep_config", keep_then_stop)


def test_a_relaunched_branch_records_a_change_from_its_phase_and_runs_only_the_later_stages(
    source, tmp_path, monkeypatch, capsys
):
    branched = RunBranch(source.root, 1, "critic").write(tmp_path / "branch")
    _stop_once_the_config_is_kept(monkeypatch)
    argv = [f"output_dir={branched.root}", f"phases={PHASES}", "tracking.wandb_mode=disabled", "actor.train.lr=0.0003"]
    # The branch goes on with the lr its source ran with at phase 1 (0.0002, a change accepted there).
    with pytest.raises(SystemExit, match=r"actor\.train\.lr 0\.0002 → 0\.0003"):
        webrl.main(argv)
    with pytest.raises(RuntimeError, match="past the config check"):
        webrl.main([*argv, "resume.allow_changes=[actor.train.lr]"])
    changes = json.loads(branched.config_changes_path.read_text())
    assert changes[-1] == {"from_phase": 1, "from_stage": "actor", "changes": {"actor.train.lr": [0.0002, 0.0003]}}
    with pytest.raises(RuntimeError, match="past the config check"):  # its printed relaunch: --config config.json
        relaunch = ["--config", str(branched.config_path), f"output_dir={branched.root}", "actor.train.lr=0.0003"]
        webrl.main([*relaunch, "tracking.wandb_mode=disabled"])
    capsys.readouterr()
    webrl.main(["--dry-run", *argv, "resume.allow_changes=[actor.train.lr]"])
    plan = capsys.readouterr().out
    assert f"branched from {source.root.resolve()} after phase 1's critic" in plan
    assert "phase 1: done curriculum, rollouts, labels, replay, critic; next actor" in plan

    monkeypatch.undo()  # the loop below keeps its config through the real keep_config
    calls: list[tuple[int, str]] = []
    writing_loop(branched.root, calls, "actor.train.lr=0.0003").run()
    assert calls == [(1, "actor"), (1, "sync"), (1, "evaluate")] + [(2, stage) for stage in STAGES[:-1]]
    assert branched.critic_path(1).read_bytes() == source.critic_path(1).read_bytes()
    assert [row["phase"] for row in _phase_rows(branched)] == ["0", "1", "2"]


def _in_phase_one(run_dir: Path, done: tuple[str, ...]) -> RunLayout:
    """A run directory with its config and a run_state.json: phase 0 finished and `done` of phase 1 (no files)."""
    webrl.keep_config(run_dir, webrl.recipe_config([f"output_dir={run_dir}", "tracking.wandb_mode=disabled"]))
    layout = RunLayout(run_dir)
    RunState(phase=1, done=list(done), history=[{"phase": 0}]).save(layout.state_path)
    return layout


def test_a_branch_leaves_out_a_change_its_source_accepted_after_the_stages_it_keeps(tmp_path):
    source = _in_phase_one(tmp_path / "source", STAGES[: STAGES.index("sync") + 1])
    argv = [f"output_dir={source.root}", "actor.train.lr=0.0003", "resume.allow_changes=[actor.train.lr]"]
    webrl.keep_config(source.root, webrl.recipe_config(argv))
    record = {"from_phase": 1, "from_stage": "evaluate", "changes": {"actor.train.lr": [0.0001, 0.0003]}}
    assert json.loads(source.config_changes_path.read_text()) == [record]
    RunState.load(source.state_path).mark(1, "evaluate", source.state_path)
    # Phase 1's actor ran with 0.0001: only its evaluation, and what follows, ran with the change.
    for after, lr, records in (("critic", 0.0001, None), ("sync", 0.0001, None), ("evaluate", 0.0003, [record])):
        branched = RunBranch(source.root, 1, after).write(tmp_path / after)
        assert json.loads(branched.config_path.read_text())["actor"]["train"]["lr"] == lr, after
        kept = json.loads(branched.config_changes_path.read_text()) if branched.config_changes_path.exists() else None
        assert kept == records, after


def test_a_branch_of_a_branch_before_a_change_its_config_holds_is_refused(tmp_path):
    source = _in_phase_one(tmp_path / "source", STAGES[: STAGES.index("sync") + 1])
    argv = [f"output_dir={source.root}", "actor.train.lr=0.0003", "resume.allow_changes=[actor.train.lr]"]
    webrl.keep_config(source.root, webrl.recipe_config(argv))  # the change runs from phase 1's evaluation on
    RunState.load(source.state_path).mark(1, "evaluate", source.state_path)
    first = RunBranch(source.root, 1, "evaluate").write(tmp_path / "first")
    assert json.loads(first.config_path.read_text())["actor"]["train"]["lr"] == 0.0003  # held by its config.json
    # Phase 1's critic ran with 0.0001; a branch of `first` there would start from 0.0003.
    with pytest.raises(ValueError, match=rf"holds changes of actor\.train\.lr .*branch its source {source.root}"):
        RunBranch(first.root, 1, "critic")
    assert (
        json.loads(RunBranch(source.root, 1, "critic").write(tmp_path / "direct").config_path.read_text())["actor"][
            "train"
        ]["lr"]
        == 0.0001
    )
    # at or after the change, the branch of the branch keeps what its source ran with
    again = RunBranch(first.root, 1, "evaluate").write(tmp_path / "again")
    assert json.loads(again.config_path.read_text())["actor"]["train"]["lr"] == 0.0003


def test_a_branch_of_a_branch_whose_record_lacks_its_point_names_the_file(tmp_path):
    """A hand-edited branched_from.json without `phase`, in a branch that holds an accepted change, was a bare
    KeyError out of `python -m recipes.branch`."""
    source = _in_phase_one(tmp_path / "source", STAGES[: STAGES.index("sync") + 1])
    argv = [f"output_dir={source.root}", "actor.train.lr=0.0003", "resume.allow_changes=[actor.train.lr]"]
    webrl.keep_config(source.root, webrl.recipe_config(argv))  # the change runs from phase 1's evaluation on
    RunState.load(source.state_path).mark(1, "evaluate", source.state_path)
    first = RunBranch(source.root, 1, "evaluate").write(tmp_path / "first")
    record = json.loads(first.branch_path.read_text())
    del record["phase"]
    first.branch_path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match=r"branched_from\.json: no 'phase' entry .*fix or restore the file"):
        RunBranch(first.root, 1, "critic")


def test_a_relaunch_from_the_branch_config_goes_on_in_the_branch_not_in_its_source(tmp_path, monkeypatch):
    source = _in_phase_one(tmp_path / "source", STAGES[: STAGES.index("critic") + 1])
    branched = RunBranch(source.root, 1, "critic").write(tmp_path / "branch")
    assert json.loads(branched.config_path.read_text())["output_dir"] == str(branched.root)
    _stop_once_the_config_is_kept(monkeypatch)
    changed = ["actor.train.lr=0.0003", "resume.allow_changes=[actor.train.lr]", "tracking.wandb_mode=disabled"]
    with pytest.raises(RuntimeError, match="past the config check"):  # no output_dir=: the printed relaunch
        webrl.main(["--config", str(branched.config_path), *changed])
    record = {"from_phase": 1, "from_stage": "actor", "changes": {"actor.train.lr": [0.0001, 0.0003]}}
    assert json.loads(branched.config_changes_path.read_text()) == [record]
    assert not source.config_changes_path.exists()


def test_the_errors_name_what_is_wrong_and_write_nothing(source, tmp_path, capsys):
    partial = tmp_path / "partial"
    webrl.keep_config(partial, webrl.recipe_config([f"output_dir={partial}"]))
    RunState(phase=1, done=["curriculum", "rollouts"]).save(RunLayout(partial).state_path)
    with pytest.raises(ValueError, match=r"has not completed stage labels of phase 1 \(it is in phase 1, done: "
                                         r"curriculum, rollouts\)"):  # fmt: skip
        RunBranch(partial, 1, "labels")
    with pytest.raises(ValueError, match=r"--after 'critc': not a stage \(stages: curriculum, "):
        RunBranch(source.root, 1, "critc")
    with pytest.raises(ValueError, match="not a run directory"):
        RunBranch(tmp_path, 0, "curriculum")

    taken = tmp_path / "taken"
    taken.mkdir()
    with pytest.raises(SystemExit) as exit_info:
        branch_recipe.main([str(source.root), str(taken), "--phase", "1", "--after", "critic"])
    assert str(exit_info.value.code) == f"branch error: {taken} already exists: a branch goes into a new directory"
    assert os.listdir(taken) == [] and not list(tmp_path.glob(".taken*"))

    assert branch_recipe.main([str(source.root), str(tmp_path / "new"), "--phase", "0", "--after", "evaluate"])
    assert "Relaunch with `python -m recipes.webrl --config" in capsys.readouterr().out
    assert RunState.load(RunLayout(tmp_path / "new").state_path).done == list(STAGES[:-1])
