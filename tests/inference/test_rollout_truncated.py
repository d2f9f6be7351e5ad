"""A response the engine cut at `max_tokens` (finish_reason "length") is recorded as truncated, on real Chromium.

The engine is the MiniWoB++ scripted policy (known responses), wrapped so that some of its answers come back with
finish_reason "length", as a model's engine reports a response cut at its token budget. The flag must reach the
trajectory file and the training samples made from it, where it keeps the EOS off the cut action.
"""

from __future__ import annotations

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.steps import trajectory_to_samples
from webrl.data.trajectory import read_trajectories
from webrl.env.limits import EpisodeLimits
from webrl.env.miniwob import miniwob_tasks
from webrl.inference.engine import Completion
from webrl.inference.rollout import collect_rollouts
from webrl.inference.scripted import ScriptedEngine


class _CutEveryOtherPrompt:
    """Wraps a scripted engine; every second prompt it answers comes back marked as cut at the token budget."""

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner = inner
        self.cut: set[str] = set()
        self.answered = 0

    def generate(self, prompts, params):
        completions = []
        for prompt, completion in zip(prompts, self.inner.generate(prompts, params), strict=True):
            self.answered += 1
            if self.answered % 2:
                self.cut.add(prompt)
                completion = Completion(completion.text, completion.token_ids, completion.logprobs, "length")
            completions.append(completion)
        return completions

    def close(self) -> None:
        self.inner.close()


def test_a_cut_response_is_recorded_as_truncated_in_the_file_and_the_samples(run, pool, miniwob, tmp_path):
    scripted = ScriptedEngine.for_miniwob()
    engine = _CutEveryOtherPrompt(scripted)
    tasks = miniwob_tasks(["click-button", "click-link", "click-checkboxes"], seeds=[1, 2])
    path = tmp_path / "rollouts.jsonl"
    result = run(
        collect_rollouts(
            engine,
            tasks,
            miniwob,
            pool,
            concurrency=2,
            prompt_builder=scripted.wrap(actor_prompt_for_step),
            writer=path,
            limits=EpisodeLimits(max_steps=4),
            progress=False,
        )
    )
    steps = [step for trajectory in result.trajectories for step in trajectory.steps]
    flags = [step.truncated for step in steps]
    assert flags == [step.prompt in engine.cut for step in steps]
    assert True in flags and False in flags
    stored = {t.trajectory_id: t for t in read_trajectories(path)}
    for trajectory in result.trajectories:
        again = stored[trajectory.trajectory_id]
        assert [s.truncated for s in again.steps] == [s.truncated for s in trajectory.steps]
        again.outcome = 1.0
        samples = trajectory_to_samples(again)
        assert [s.truncated for s in samples] == [s.truncated for s in trajectory.steps]
