"""Pairing evaluations: hand-counted rates, gained and lost tasks, exact McNemar p and the flipped episodes' lengths."""

from __future__ import annotations

import json

import pytest

from recipes import pair as pair_recipe
from webrl.data.trajectory import Step, Task, Trajectory, write_trajectories
from webrl.evaluation.pairing import load_evaluation, pair, summarise
from webrl.run_layout import RunLayout

TASKS = [str(number) for number in range(1, 9)]


def episode(task_id: str, solved: bool, steps: int, site: str = "shopping", infra_error: bool = False) -> Trajectory:
    task = Task(task_id, f"intent {task_id}", [site], "http://x/", intent_template_id=1)
    trajectory = Trajectory(
        task,
        status="error" if infra_error else "exit",
        eval_reward=float(solved),
        metadata={"infra_error": infra_error},
    )
    trajectory.steps = [Step(index, "prompt", "<page/>", "do") for index in range(steps)]
    return trajectory


def write(path, solved: set[str], steps: dict[str, int], tasks=TASKS, **kwargs) -> str:
    write_trajectories(path, [episode(task, task in solved, steps.get(task, 3), **kwargs) for task in tasks])
    return str(path)


def test_a_pair_counts_gained_and_lost_tasks_their_p_and_how_their_episodes_changed_length(tmp_path):
    """Before solves 1-4, after solves 3-8: lost 1-2, gained 5-8; p = 2 * P(X <= 2 | 6, 1/2) = 2 * 22/64."""
    before = load_evaluation(write(tmp_path / "a.jsonl", {"1", "2", "3", "4"}, {}))
    after = load_evaluation(
        "rl=" + write(tmp_path / "b.jsonl", set(TASKS[2:]), {"1": 1, "2": 3, "5": 5, "6": 2, "7": 4, "8": 4})
    )
    result = pair(before, after)
    assert (result["before"], result["after"]) == ("a", "rl")
    assert (result["tasks"], result["gained"], result["lost"]) == (8, 4, 2)
    assert result["p_value"] == pytest.approx(44 / 64)
    assert result["lost_steps"] == {"shorter": 1, "same": 1, "longer": 0}
    assert result["gained_steps"] == {"shorter": 1, "same": 0, "longer": 3}


def test_a_summary_counts_successes_steps_and_sites(tmp_path):
    """Tasks 1-4 on gitlab (1 and 2 solved), 5-8 on the map (none solved); 2, 3, 3, ... steps."""
    path = tmp_path / "e.jsonl"
    write_trajectories(
        path,
        [
            episode(task, task in {"1", "2"}, 2 if task == "1" else 3, "gitlab" if int(task) <= 4 else "map")
            for task in TASKS
        ],
    )
    summary = summarise(load_evaluation(str(path)))
    assert (summary["tasks"], summary["successes"], summary["rate"]) == (8, 2, 0.25)
    assert summary["mean_steps"] == pytest.approx(23 / 8)
    assert summary["sites"] == {"gitlab": {"successes": 2, "tasks": 4}, "map": {"successes": 0, "tasks": 4}}
    low, high = summary["wilson_95"]
    assert low < 0.25 < high


def test_an_infrastructure_failure_is_attempted_but_not_paired(tmp_path):
    """Task 8 failed in the browser for `after`: it still ran the same tasks, and the pair is over the other 7."""
    before = load_evaluation(write(tmp_path / "a.jsonl", {"8"}, {}))
    failed = [episode(task, False, 3, infra_error=task == "8") for task in TASKS]
    write_trajectories(tmp_path / "b.jsonl", failed)
    after = load_evaluation(str(tmp_path / "b.jsonl"))
    assert summarise(after)["tasks"] == 7
    assert (pair(before, after)["tasks"], pair(before, after)["lost"]) == (7, 0)


def test_other_tasks_are_refused_naming_them(tmp_path):
    before = load_evaluation(write(tmp_path / "a.jsonl", set(), {}))
    after = load_evaluation(write(tmp_path / "b.jsonl", set(), {}, tasks=[*TASKS[:-1], "99"]))
    with pytest.raises(ValueError, match=r"only in A: 8; only in B: 99"):
        pair(before, after)


def test_a_run_directory_reads_its_last_evaluated_phase_with_every_rank(tmp_path):
    layout = RunLayout(tmp_path / "run")
    write(layout.eval_path(0, 0), set(), {})
    write(layout.eval_path(1, 0), {"1"}, {}, tasks=TASKS[:4])
    write(layout.eval_path(1, 1), {"5", "6"}, {}, tasks=TASKS[4:])
    (layout.phase_dir(2)).mkdir()
    write(layout.root / "phase_old" / "eval.rank0.jsonl", set(), {})
    evaluation = load_evaluation(str(layout.root))
    assert evaluation.name == "run"
    assert evaluation.source.endswith("phase_001")
    assert sorted(task for task, won in evaluation.outcomes.items() if won) == ["1", "5", "6"]


def test_missing_paths_and_repeated_tasks_are_errors_that_name_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        load_evaluation(str(tmp_path / "nowhere.jsonl"))
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(FileNotFoundError, match="empty_run has no phase with an evaluation"):
        load_evaluation(str(tmp_path / "empty_run"))
    twice = tmp_path / "twice.jsonl"
    write_trajectories(twice, [episode("1", True, 2), episode("1", False, 2)])
    with pytest.raises(ValueError, match="tasks 1 have more than one outcome"):
        load_evaluation(str(twice))


def test_the_command_prints_every_pair_and_writes_json(tmp_path, capsys):
    first = write(tmp_path / "sft.jsonl", {"1"}, {})
    second = write(tmp_path / "one.jsonl", {"1", "2"}, {})
    third = write(tmp_path / "two.jsonl", set(), {"1": 1})
    pair_recipe.main([first, second, f"three={third}", "--json", str(tmp_path / "pair.json")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("sft: 1/8 (12.5 %")
    assert [line.split(" (")[0] for line in lines[3:]] == ["sft -> one", "sft -> three", "one -> three"]
    assert "1 gained, 0 lost" in lines[3] and "0 gained, 2 lost" in lines[5]
    assert "lost: 1 shorter, 1 as long, 0 longer" in lines[5]
    written = json.loads((tmp_path / "pair.json").read_text())
    assert [item["successes"] for item in written["evaluations"]] == [1, 2, 0]
    assert len(written["pairs"]) == 3
    with pytest.raises(SystemExit, match="only in A"):
        pair_recipe.main([first, write(tmp_path / "other.jsonl", set(), {}, tasks=TASKS[:3])])
