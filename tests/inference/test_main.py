"""`python -m webrl.inference demos`: the reference solver's trajectories, written as SFT data."""

from __future__ import annotations

import json

from webrl.data.prompts import build_actor_prompt
from webrl.data.trajectory import read_trajectories
from webrl.inference.__main__ import main


def test_demos_command_writes_sft_trajectories(tmp_path, capsys):
    assert main(["demos", "--split", "train", "--limit", "3", "--concurrency", "3", "--out", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out)["successes"] == 3
    trajectories = read_trajectories(tmp_path / "train.jsonl")
    assert len(trajectories) == 3
    for trajectory in trajectories:
        assert trajectory.eval_reward == 1.0 and trajectory.status == "exit"
        for i, step in enumerate(trajectory.steps):
            assert step.prompt == build_actor_prompt(
                trajectory.task.intent, [s.response for s in trajectory.steps[:i]], step.observation
            )
            assert step.url.startswith("http://127.0.0.1:") and step.action is not None and step.error is None
            assert set(step.timings) == {"act", "observe", "engine"}
            assert step.response.startswith("# Element: ") or step.response.startswith("exit(message=")
