"""The demo entry point runs real MiniWoB++ episodes and writes loadable trajectories."""

from __future__ import annotations

import pytest

from webrl.data.trajectory import read_trajectories
from webrl.env import demo

pytestmark = pytest.mark.timeout(180)


def test_demo_runs_episodes_and_writes_trajectories(tmp_path, capsys):
    demo.main(["--tasks", "enter-text", "click-button", "--seeds", "0", "--out", str(tmp_path), "--concurrency", "2"])
    out = capsys.readouterr().out
    assert "2/2 episodes succeeded" in out
    trajectories = read_trajectories(tmp_path / "trajectories.jsonl")
    assert [t.task.task_id for t in trajectories] == ["miniwob.enter-text.0", "miniwob.click-button.0"]
    enter_text = trajectories[0]
    assert enter_text.task.intent == 'Enter "Agustina" into the text field and press Submit.'
    assert [s.action["name"] for s in enter_text.steps] == ["type", "click"]
    assert enter_text.steps[0].prompt.startswith("Task Instruction: " + enter_text.task.intent)
    assert enter_text.eval_reward == 1.0 and enter_text.status == "site_done"


def test_demo_rejects_tasks_it_has_no_script_for(capsys):
    with pytest.raises(SystemExit):
        demo.main(["--tasks", "book-flight"])
    assert "no scripted policy for ['book-flight']" in capsys.readouterr().err
