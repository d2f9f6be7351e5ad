"""`python -m webrl.process`: typed config, stage 1 labelling, stage 2 filtering with a real tiny model, errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sample_records import write_result_dir

from webrl.data.steps import read_samples
from webrl.data.trajectory import read_trajectories, write_trajectories
from webrl.modules.lm import action_logprobs, load_model_and_tokenizer
from webrl.process.cli import main


def test_stage1_from_a_trace_dir_with_evaluator_rewards(tmp_path, capsys):
    write_result_dir(tmp_path / "run", {"1": ("a", 1.0, 2), "2": ("b", 0.0, 2), "3": ("c", 1.0, 2)})
    out = tmp_path / "phase1.jsonl"
    code = main(
        ["stage=[1]", f"rollouts={tmp_path / 'run'}", "reward_source=evaluator"]
        + [f"output={out}", f"sft_out={tmp_path / 'sft.json'}"]
    )
    assert code == 0
    assert [t.outcome for t in read_trajectories(out)] == [1.0, 0.0, 1.0]
    assert "3 trajectories, 2 successful" in capsys.readouterr().out
    assert (tmp_path / "sft.json").is_file()


def test_stage1_with_orm_then_stage2_with_the_actor(tmp_path, tiny_model_dir, make_trajectory):
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory(f"c{i}", num_steps=2, outcome=None) for i in range(2)])
    experience = tmp_path / "phase0.jsonl"
    history = [make_trajectory(f"h{i}", num_steps=3, outcome=1.0) for i in range(3)]
    history.append(make_trajectory("h0-again", intent=history[0].task.intent, outcome=1.0))
    write_trajectories(experience, history)
    out = tmp_path / "phase1.jsonl"
    code = main(
        ["stage=[1,2]", f"rollouts={rollouts}", f"orm={tiny_model_dir}"]
        + [f"output={out}", f"actor={tiny_model_dir}", f"experience=[{experience}]"]
        + ["filter.low=0.0", "filter.high=1.0", "filter.cap_ratio=1.5", "gamma=0.5"]
    )
    assert code == 0
    labelled = read_trajectories(out)
    assert all(t.orm_score is not None and t.outcome == (t.orm_score >= 0.5) for t in labelled)
    samples = read_samples(tmp_path / "phase1_filter.jsonl")
    replayed = [s for s in samples if s.score is not None]
    assert len(samples) - len(replayed) == 4  # every current step
    current = [s for s in samples if s.score is None]
    assert all(s.mc_return == s.trajectory_reward * (1.5 if s.step_index == 0 else 1.0) for s in current)  # γ = 0.5
    assert len(replayed) == 6  # 9 first-success steps in (0, 1], capped at 1.5 x 4
    assert {s.task_id for s in replayed} <= {"h0", "h1", "h2"}
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    direct = action_logprobs(model, tokenizer, [s.prompt for s in replayed], [s.action for s in replayed])
    assert [s.score for s in replayed] == pytest.approx(direct.geo_mean_prob.tolist(), rel=1e-4)


def test_stage2_with_max_length_scores_the_prompt_the_actor_trains_on(tmp_path, tiny_model_dir, make_trajectory):
    from webrl.data.collate import StepTokenizer
    from webrl.data.steps import trajectory_to_samples

    current = tmp_path / "phase1.jsonl"
    write_trajectories(current, [make_trajectory("c0", num_steps=1, outcome=0.0)])
    long_page = make_trajectory("h0", num_steps=1, outcome=1.0, html_size=20_000)
    write_trajectories(tmp_path / "phase0.jsonl", [long_page])
    settings = [f"output={current}", f"actor={tiny_model_dir}", f"experience=[{tmp_path / 'phase0.jsonl'}]"]
    window = ["filter.low=0.0", "filter.high=1.0", "batch_size=1"]
    assert main(["stage=[2]", *settings, *window, "max_length=300"]) == 0
    [replayed] = [s for s in read_samples(tmp_path / "phase1_filter.jsonl") if s.score is not None]
    model, tokenizer = load_model_and_tokenizer(tiny_model_dir)
    [sample] = trajectory_to_samples(long_page)
    fitted = StepTokenizer(tokenizer, 300).actor_prompt(sample)
    assert len(tokenizer(sample.prompt)["input_ids"]) > 300 and sample.prompt.startswith(fitted[:200])
    expected = action_logprobs(model, tokenizer, [fitted], [sample.action]).geo_mean_prob.tolist()
    assert replayed.score == pytest.approx(expected[0], rel=1e-4)
    whole = action_logprobs(model, tokenizer, [sample.prompt], [sample.action], max_length=300)
    assert replayed.score != pytest.approx(whole.geo_mean_prob.tolist()[0], rel=1e-4)  # not the left-cut prompt


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["stage=[1]", "rollouts=r.jsonl", "output=o.jsonl"], "reward_source=orm needs orm=PATH"),
        (["stage=[3]", "output=o.jsonl"], "stage must list stages to run"),
        (["stage=1", "output=o.jsonl"], "key 'stage'"),
        (["stage=[2]", "actor=a", "output=o.jsonl", "filter.lowest=0.1"], "filter.lowest"),
        (["stage=[1]", "rollouts=r", "orm=m", "output=o", "orm_answers=[YES,NO]"], "two quoted words"),
        (["--stage", "1"], "unknown option '--stage'"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err, err


def test_input_errors_are_one_line_naming_the_culprit(tmp_path, capsys):
    evaluator = "reward_source=evaluator"
    code = main(["stage=[1]", f"rollouts={tmp_path / 'missing'}", "output=o.jsonl", evaluator])
    assert code == 2
    assert f"error: rollouts: {tmp_path / 'missing'} does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": 1}\n{oops\n{"schema": 1}\n')
    code = main(["stage=[1]", f"rollouts={bad}", f"output={tmp_path / 'o.jsonl'}", evaluator])
    assert code == 2
    assert "bad.jsonl:2: not valid JSON" in capsys.readouterr().err
    bad.write_text('{"schema": 1}\n')
    code = main(["stage=[1]", f"rollouts={bad}", f"output={tmp_path / 'o.jsonl'}", evaluator])
    assert code == 2
    assert "bad.jsonl:1: not a trajectory record" in capsys.readouterr().err
    code = main(["stage=[2]", f"output={tmp_path / 'none.jsonl'}", "actor=x"])
    assert code == 2
    assert "none.jsonl, which does not exist: run stage 1" in capsys.readouterr().err


def test_settings_come_from_a_yaml_file_then_overrides(tmp_path, capsys):
    write_result_dir(tmp_path / "run", {"1": ("a", 1.0, 2), "2": ("b", 0.0, 2)})
    settings = tmp_path / "process.yaml"
    settings.write_text(f"stage: [1]\nrollouts: {tmp_path / 'run'}\nreward_source: evaluator\noutput: unused.jsonl\n")
    out = tmp_path / "phase1.jsonl"
    assert main(["--config", str(settings), f"output={out}"]) == 0
    assert [t.outcome for t in read_trajectories(out)] == [1.0, 0.0]
    assert f"2 trajectories, 1 successful -> {out}" in capsys.readouterr().out


def test_help_lists_every_key_with_its_docstring(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "gamma = 0.9  -- Discount of each step's mc_return" in text
    assert "filter.cap_ratio = 2.0  -- At most cap_ratio" in text
    assert "reward_source = 'orm'  -- " in text


def test_module_entry_point_runs(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "webrl.process", "stage=[2]", f"output={tmp_path / 'o.jsonl'}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "stage 2 needs actor=PATH" in result.stderr


def test_stage2_on_two_processes_matches_one(tmp_path, tiny_model_dir, make_trajectory):
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory(f"c{i}", num_steps=2, outcome=None, eval_reward=1.0) for i in (0, 1)])
    experience = tmp_path / "phase0.jsonl"
    write_trajectories(experience, [make_trajectory(f"h{i}", num_steps=i + 1, outcome=1.0) for i in range(4)])
    common = ["stage=[1,2]", f"rollouts={rollouts}", "reward_source=evaluator"]
    common += [f"actor={tiny_model_dir}", f"experience=[{experience}]", "filter.low=0", "filter.high=1"]
    assert main([*common, f"output={tmp_path / 'one.jsonl'}"]) == 0
    result = subprocess.run(
        [sys.executable, "-m", "webrl.process", *common, f"output={tmp_path / 'two.jsonl'}", "devices=2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    one = read_samples(tmp_path / "one_filter.jsonl")
    two = read_samples(tmp_path / "two_filter.jsonl")
    assert len(one) == 4 + 8  # 4 current steps + 10 replayed steps capped at 2 x 4
    assert [(s.trajectory_id, s.step_index) for s in two] == [(s.trajectory_id, s.step_index) for s in one]
    replayed_one, replayed_two = ([s.score for s in run if s.score is not None] for run in (one, two))
    assert len(replayed_one) == 8
    assert replayed_two == pytest.approx(replayed_one, rel=1e-5)


def test_stage2_on_two_processes_stops_every_rank_when_one_shard_fails(tmp_path, tiny_model_dir, make_trajectory):
    """One replayed action is longer than max_length: only the rank that scores it fails. Before, the other rank
    waited in the gather of the scores (here: until the test's timeout); now both end at once with one line each."""
    current = tmp_path / "phase1.jsonl"
    write_trajectories(current, [make_trajectory("c0", num_steps=1, outcome=0.0)])
    long_action = make_trajectory("h1", num_steps=1, outcome=1.0)
    long_action.steps[0].response = "exit(message=" + "many words " * 300 + ")"
    write_trajectories(tmp_path / "phase0.jsonl", [make_trajectory("h0", num_steps=1, outcome=1.0), long_action])
    settings = [f"output={current}", f"actor={tiny_model_dir}", f"experience=[{tmp_path / 'phase0.jsonl'}]"]
    result = subprocess.run(
        [sys.executable, "-m", "webrl.process", "stage=[2]", *settings, "max_length=300", "devices=2"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2, result.stderr[-3000:]
    assert sum("the action alone is" in line and "task h1" in line for line in errors) == 1
    assert sum("replay scoring failed on rank" in line for line in errors) == 1
    assert "Traceback" not in result.stderr


class _PlacedModel:
    """Stands in for a loaded ORM or actor: stops the stage where the model is moved, naming the device."""

    def to(self, device):
        raise ValueError(f"scores on {device}")


def test_one_process_scores_on_the_gpu_of_a_gpu_machine(tmp_path, monkeypatch, capsys, make_trajectory):
    """With devices=1 no Fabric is built; the ORM and the actor must not stay on the CPU they load on."""
    import torch

    import webrl.modules.lm
    import webrl.modules.orm

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(webrl.modules.orm, "OutcomeRewardModule", lambda *args, **kwargs: _PlacedModel())
    monkeypatch.setattr(webrl.modules.lm, "load_model_and_tokenizer", lambda path: (_PlacedModel(), None))
    rollouts = tmp_path / "rollouts.jsonl"
    write_trajectories(rollouts, [make_trajectory("c0", num_steps=2, outcome=None)])
    out = tmp_path / "phase1.jsonl"
    assert main(["stage=[1]", f"rollouts={rollouts}", "orm=orm_dir", f"output={out}"]) == 2
    assert "scores on cuda" in capsys.readouterr().err
    write_trajectories(out, [make_trajectory("c0", num_steps=2, outcome=1.0)])
    assert main(["stage=[2]", f"output={out}", "actor=actor_dir"]) == 2
    assert "error: scores on cuda" in capsys.readouterr().err
