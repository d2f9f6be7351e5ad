"""Import of VisualAgentBench result dirs (release format) and ShareGPT exports."""

from __future__ import annotations

import json

import pytest
from sample_records import PAGES, RESPONSES, write_result_dir

from webrl.data.critic_states import critic_states
from webrl.data.prompts import ORM_SYSTEM_PROMPT, build_actor_prompt
from webrl.data.steps import trajectory_to_samples
from webrl.data.traces import import_trace_dir, orm_examples, sft_examples, write_sharegpt
from webrl.data.trajectory import Task, TrajectoryFileError
from webrl.env.actions import action_record


def test_trace_dir_imports_into_trajectories(tmp_path):
    write_result_dir(tmp_path, {"10": ("How much was order 12?", 1.0, 2), "2": ("Open orders", 0.0, 3)})
    trajectories = import_trace_dir(tmp_path, read_action=action_record)
    assert [t.task.task_id for t in trajectories] == ["2", "10"]  # numeric task order
    second, first = trajectories
    assert first.task.intent == "How much was order 12?"
    assert first.eval_reward == 1.0 and second.eval_reward == 0.0 and first.outcome is None
    assert [s.observation for s in first.steps] == PAGES and [s.response for s in first.steps] == RESPONSES
    assert first.status == "exit" and first.answer == "$30.00" and second.status == "stopped"
    assert first.steps[0].action == {
        "name": "click",
        "element": "1",
        "argument": None,
        "message": None,
        "raw": RESPONSES[0],
    }
    assert first.final_observation == PAGES[1]
    # The rebuilt prompt is the release's completion-form prompt for the same rounds.
    assert first.steps[1].prompt == build_actor_prompt(first.task.intent, [RESPONSES[0]], PAGES[1])
    assert "Round 0\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\nHow much" in first.steps[1].prompt


def test_the_same_task_from_two_result_dirs_gets_two_ids_each_stable_on_re_import(tmp_path):
    write_result_dir(tmp_path / "phase1", {"3": ("Show order 12", 1.0, 2)})
    write_result_dir(tmp_path / "phase2", {"3": ("Show order 12", 0.0, 2)})
    (solved,) = import_trace_dir(tmp_path / "phase1", read_action=action_record)
    (failed,) = import_trace_dir(tmp_path / "phase2", read_action=action_record)
    assert solved.trajectory_id != failed.trajectory_id
    assert solved.trajectory_id.startswith("trace-") and solved.trajectory_id.endswith("-3")
    (again,) = import_trace_dir(tmp_path / "phase1" / ".." / "phase1", read_action=action_record)
    assert again.trajectory_id == solved.trajectory_id
    replayed, current = trajectory_to_samples(solved), trajectory_to_samples(failed)
    # Each two-step trajectory has three distinct states (s_0, s_1 and the last s'), all sharing text.
    assert [s.text for s in critic_states(replayed)] == [s.text for s in critic_states(current)]
    states = critic_states(current + replayed)
    assert len(states) == 3 + 3
    assert [state.outcome for state in states] == [0.0] * 3 + [1.0] * 3


def test_known_task_configs_are_used(tmp_path):
    write_result_dir(tmp_path, {"3": ("Open orders", 1.0, 2)})
    task = Task(task_id="3", intent="Open orders", sites=["shopping_admin"], start_url="http://admin/")
    (trajectory,) = import_trace_dir(tmp_path, configs={"3": task}, read_action=action_record)
    assert trajectory.task.sites == ["shopping_admin"]


def test_unfinished_tasks_are_skipped_with_a_warning(tmp_path):
    write_result_dir(tmp_path, {"1": ("a", -0.1, 2), "2": ("b", 1.0, 2)})
    with pytest.warns(UserWarning, match="skipped 1 unfinished tasks: 1"):
        assert [t.task.task_id for t in import_trace_dir(tmp_path, read_action=action_record)] == ["2"]


def test_missing_pieces_are_errors_naming_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_trace_dir(tmp_path / "nope", read_action=action_record)
    (tmp_path / "traces").mkdir()
    with pytest.raises(FileNotFoundError, match="actions/ is missing"):
        import_trace_dir(tmp_path, read_action=action_record)
    (tmp_path / "actions").mkdir()
    (tmp_path / "traces" / "4.jsonl").write_text("{}\n")
    with pytest.raises(FileNotFoundError, match=r"actions/4\.json is missing"):
        import_trace_dir(tmp_path, read_action=action_record)


def test_bad_trace_line_names_file_and_line(tmp_path):
    write_result_dir(tmp_path, {"5": ("a", 1.0, 2)})
    path = tmp_path / "traces" / "5.jsonl"
    path.write_text(path.read_text() + '{"index": 2, "html": ""}\n')
    with pytest.raises(TrajectoryFileError, match=r"5\.jsonl:3: trace step is missing \['response', 'target'\]"):
        import_trace_dir(tmp_path, read_action=action_record)
    path.write_text("not json\n")
    with pytest.raises(TrajectoryFileError, match=r"5\.jsonl:1: not valid JSON"):
        import_trace_dir(tmp_path, read_action=action_record)


def test_sharegpt_exports(tmp_path):
    write_result_dir(tmp_path / "run", {"1": ("Find the total", 1.0, 2), "2": ("Open orders", 0.0, 2)})
    trajectories = import_trace_dir(tmp_path / "run", read_action=action_record)
    sft = sft_examples(trajectories)
    assert len(sft) == 2  # the successful trajectory's two steps
    assert sft[1]["conversations"] == [
        {"from": "human", "value": trajectories[0].steps[1].prompt},
        {"from": "gpt", "value": RESPONSES[1]},
    ]
    assert len(sft_examples(trajectories, successful_only=False)) == 4
    orm = orm_examples(trajectories)
    assert [e["conversations"][1]["value"] for e in orm] == ["YES", "NO"]
    assert orm[0]["system"] == ORM_SYSTEM_PROMPT
    human = orm[0]["conversations"][0]["value"]
    assert human.startswith("The User Intent:\nFind the total\n\nAction History:\n# Element: the Orders link; do(")
    assert human.endswith(f"The Current Screenshot:\n{PAGES[1]}")
    path = write_sharegpt(tmp_path / "orm.json", orm)
    assert json.loads(path.read_text()) == orm
