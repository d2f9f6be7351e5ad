"""Stage 1 labels what a run's labels stage labels, as it labels it; ORM data carries the evaluators' verdicts;
a path that cannot be read or written is one error line naming its key, on every rank."""

from __future__ import annotations

import json

import pytest

from webrl.config import load_config
from webrl.data.labels import label_with_orm
from webrl.data.trajectory import read_trajectories, write_trajectories
from webrl.modules.orm import orm_scorer
from webrl.process.cli import _run_stages, main
from webrl.process.config import ProcessConfig


def _rollouts(make_trajectory):
    """A success, a failure, an episode the browser failed, and one whose evaluator could not run (scored 0)."""
    ok = make_trajectory("ok", num_steps=2, outcome=None, eval_reward=1.0)
    bad = make_trajectory("bad", num_steps=2, outcome=None, eval_reward=0.0)
    infra = make_trajectory("infra", num_steps=1, outcome=None)
    infra.status, infra.metadata["infra_error"] = "error", True
    unjudged = make_trajectory("evalerr", num_steps=2, outcome=None, eval_reward=0.0)
    unjudged.status, unjudged.metadata["eval_error"] = "error", "EvaluationError: no helper for func:get_order_url"
    return [ok, bad, infra, unjudged]


def _one_error_line(capsys) -> str:
    """The error line that ends stderr (a model's loading bar may come before it), whole on one line."""
    err = capsys.readouterr().err
    last = err.splitlines()[-1]
    assert last.startswith("error: ") and err.endswith(f"{last}\n"), err
    return last


def test_evaluator_labels_leave_out_infrastructure_failures_and_unjudged_episodes(tmp_path, capsys, make_trajectory):
    rollouts, out = tmp_path / "rollouts.jsonl", tmp_path / "phase1.jsonl"
    write_trajectories(rollouts, _rollouts(make_trajectory))
    assert main(["stage=[1]", f"rollouts={rollouts}", "reward_source=evaluator", f"output={out}"]) == 0
    assert [(t.task.task_id, t.outcome) for t in read_trajectories(out)] == [("ok", 1.0), ("bad", 0.0)]
    printed = capsys.readouterr().out
    assert "left 2 of 4 trajectories unlabelled, as a run does: " in printed
    assert "1 infra_error" in printed and "1 eval_error" in printed


def test_evaluator_labels_of_rollouts_without_rewards_are_refused(tmp_path, capsys, make_trajectory):
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory("a", outcome=None)])
    argv = ["stage=[1]", f"rollouts={rollouts}", "reward_source=evaluator", f"output={tmp_path / 'o.jsonl'}"]
    assert main(argv) == 2
    assert "none of the 1 trajectories can be labelled (1 no evaluator reward)" in _one_error_line(capsys)


def test_orm_labels_leave_out_infrastructure_failures(tmp_path, capsys, tiny_model_dir, make_trajectory):
    rollouts, out = tmp_path / "rollouts.jsonl", tmp_path / "phase1.jsonl"
    write_trajectories(rollouts, _rollouts(make_trajectory))
    assert main(["stage=[1]", f"rollouts={rollouts}", f"orm={tiny_model_dir}", f"output={out}"]) == 0
    labelled = read_trajectories(out)
    assert [t.task.task_id for t in labelled] == ["ok", "bad", "evalerr"]  # the ORM judges what no evaluator did
    assert all(t.orm_score is not None for t in labelled)
    assert "left 1 of 4 trajectories unlabelled, as a run does: 1 infra_error" in capsys.readouterr().out


def test_orm_data_is_labelled_by_the_evaluators_not_by_the_orm(tmp_path, tiny_model_dir, make_trajectory):
    rollouts, orm_data = tmp_path / "rollouts.jsonl", tmp_path / "orm.json"
    write_trajectories(rollouts, [*_rollouts(make_trajectory), make_trajectory("unscored", outcome=None)])
    argv = ["stage=[1]", f"rollouts={rollouts}", f"orm={tiny_model_dir}", f"output={tmp_path / 'o.jsonl'}"]
    assert main([*argv, f"orm_data_out={orm_data}"]) == 0
    examples = json.loads(orm_data.read_text())
    assert [example["conversations"][1]["value"] for example in examples] == ["YES", "NO"]
    assert [example["conversations"][0]["value"].split("\n")[1] for example in examples] == [
        "Do thing ok",
        "Do thing bad",
    ]


def test_orm_data_without_evaluator_verdicts_is_refused_before_the_orm_loads(tmp_path, capsys, make_trajectory):
    rollouts, out = tmp_path / "rollouts.jsonl", tmp_path / "o.jsonl"
    write_trajectories(rollouts, [make_trajectory(f"t{i}", outcome=None) for i in range(2)])
    argv = ["stage=[1]", f"rollouts={rollouts}", f"orm={tmp_path / 'no_orm'}", f"output={out}"]
    assert main([*argv, f"orm_data_out={tmp_path / 'orm.json'}"]) == 2
    assert _one_error_line(capsys).startswith("error: orm_data_out: ORM data is labelled by the evaluators")
    assert not out.exists()


def test_orm_labels_score_the_prompt_the_run_scores_within_max_length(tmp_path, tiny_model_dir, make_trajectory):
    rollouts, out = tmp_path / "rollouts.jsonl", tmp_path / "o.jsonl"
    write_trajectories(rollouts, [make_trajectory(f"t{i}", outcome=None, html_size=20_000) for i in range(2)])
    argv = ["stage=[1]", f"rollouts={rollouts}", f"orm={tiny_model_dir}", f"output={out}", "max_length=300"]
    assert main(argv) == 0
    scored = [t.orm_score for t in read_trajectories(out)]
    run, whole = read_trajectories(rollouts), read_trajectories(rollouts)
    score, chat = orm_scorer(tiny_model_dir, max_length=300)  # as PhaseLoop._labels with model.max_length=300
    label_with_orm(run, score, chat_template_tokenizer=chat, threshold=0.5)
    assert scored == pytest.approx([t.orm_score for t in run], rel=1e-5)
    score, chat = orm_scorer(tiny_model_dir)
    label_with_orm(whole, score, chat_template_tokenizer=chat, threshold=0.5)
    assert scored != pytest.approx([t.orm_score for t in whole], rel=1e-5)  # the prompts are over the limit


def _phase(tmp_path, make_trajectory):
    """Stage 1's output of one trajectory, for stage 2."""
    current = tmp_path / "phase1.jsonl"
    write_trajectories(current, [make_trajectory("c0", num_steps=1, outcome=1.0)])
    return current


@pytest.mark.parametrize("key", ["output", "sft_out", "orm_data_out"])
def test_a_directory_where_stage1_writes_a_file_is_one_error_line_naming_the_key(
    tmp_path, capsys, make_trajectory, key
):
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory("a", outcome=None, eval_reward=1.0)])
    (tmp_path / "taken").mkdir()
    settings = {"output": tmp_path / "o.jsonl", "sft_out": "", "orm_data_out": "", key: tmp_path / "taken"}
    argv = ["stage=[1]", f"rollouts={rollouts}", "reward_source=evaluator"]
    assert main([*argv, *(f"{name}={value}" for name, value in settings.items())]) == 2
    assert _one_error_line(capsys).startswith(f"error: {key}: ")


@pytest.mark.parametrize("key", ["orm", "experience", "actor"])
def test_a_missing_input_is_one_error_line_naming_its_key(tmp_path, capsys, make_trajectory, key):
    missing = tmp_path / "missing"
    if key == "orm":
        rollouts = tmp_path / "rollouts.jsonl"
        write_trajectories(rollouts, [make_trajectory("a", outcome=None)])
        argv = ["stage=[1]", f"rollouts={rollouts}", f"orm={missing}", f"output={tmp_path / 'o.jsonl'}"]
    else:
        experience = f"[{missing}]" if key == "experience" else "[]"
        actor = missing if key == "actor" else tmp_path
        argv = [
            "stage=[2]",
            f"output={_phase(tmp_path, make_trajectory)}",
            f"experience={experience}",
            f"actor={actor}",
        ]
    assert main(argv) == 2
    err = _one_error_line(capsys)
    assert err.startswith(f"error: {key}: ") and str(missing) in err


def test_a_directory_where_stage2_writes_its_steps_is_one_error_line_naming_output(
    tmp_path, capsys, tiny_model_dir, make_trajectory
):
    current = _phase(tmp_path, make_trajectory)
    (tmp_path / "phase1_filter.jsonl").mkdir()
    assert main(["stage=[2]", f"output={current}", f"actor={tiny_model_dir}"]) == 2
    assert _one_error_line(capsys).startswith("error: output: ")


class _RankZero:
    """Rank 0's Fabric under devices=2: records what it broadcasts to the other ranks, which wait for it."""

    global_rank = 0

    def __init__(self):
        self.sent = []

    def broadcast(self, obj):
        self.sent.append(obj)
        return obj


def test_rank_zero_tells_the_other_ranks_its_output_cannot_be_written(tmp_path, make_trajectory):
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory("a", outcome=None, eval_reward=1.0)])
    (tmp_path / "taken").mkdir()
    argv = ["stage=[1]", f"rollouts={rollouts}", "reward_source=evaluator", f"output={tmp_path / 'taken'}"]
    fabric = _RankZero()
    error = _run_stages(load_config(ProcessConfig, argv), fabric)
    assert error is not None and error.startswith("output: ")
    assert fabric.sent == [error]


def test_rank_zero_tells_the_other_ranks_of_a_stage1_crash(tmp_path, capsys, monkeypatch, make_trajectory):
    # Not bad input but a failure inside stage 1 (here the labelling itself): raised on rank 0, it would leave the
    # other ranks in the broadcast until the process group's timeout.
    import webrl.process.cli

    def broken(trajectories):
        raise KeyError("eval_reward")

    monkeypatch.setattr(webrl.process.cli, "label_with_evaluator", broken)
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory("a", outcome=None, eval_reward=1.0)])
    argv = ["stage=[1]", f"rollouts={rollouts}", "reward_source=evaluator", f"output={tmp_path / 'out.jsonl'}"]
    fabric = _RankZero()
    error = _run_stages(load_config(ProcessConfig, argv), fabric)
    assert error == "stage 1 failed on rank 0: KeyError: 'eval_reward'"
    assert fabric.sent == [error]
    assert "Traceback" in capsys.readouterr().err  # rank 0 keeps the traceback of what was not bad input


def _corrupt(model_dir, target, how: str):
    """A copy of `model_dir` whose weights do not fit its config.json, or whose weights file is cut in half."""
    import shutil

    shutil.copytree(model_dir, target)
    if how == "config":
        config = json.loads((target / "config.json").read_text())
        config["intermediate_size"] *= 2
        (target / "config.json").write_text(json.dumps(config))
    else:
        weights = (target / "model.safetensors").read_bytes()
        (target / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    return target


@pytest.mark.parametrize("how", ["config", "weights"])
def test_a_model_directory_that_does_not_load_is_one_error_line_naming_its_key(
    tmp_path, capsys, tiny_model_dir, make_trajectory, how
):
    orm = _corrupt(tiny_model_dir, tmp_path / "orm", how)
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory("a", outcome=None)])
    assert main(["stage=[1]", f"rollouts={rollouts}", f"orm={orm}", f"output={tmp_path / 'out.jsonl'}"]) == 2
    assert _one_error_line(capsys).startswith(f"error: orm: model directory {orm} does not load: ")
