"""`ScriptedEngine`: an engine-like wrapper of a scripted policy, driven exactly as a model's engine is.

It is how demonstrations are made (the embedded sites' reference solver, through
`WebEnvironment.run_episodes`, the same driver as rollouts), and the test double that lets the
rollout runner be tested and benchmarked without model time and with known outcomes: driven by the
reference solver every embedded task must succeed; driven by the MiniWoB++ scripted policy every
supported task must.

A scripted policy needs the task and the page, which a prompt string does not carry in a usable
form (MiniWoB's intent is only known once the page is open, and the prompt may be cut to a
budget). So it sees what the prompt was built from: `wrap(prompt_builder)` returns a builder that
builds the same prompt and remembers its (task, earlier responses, page html); `generate` looks
each prompt up there and asks the policy. `run_episodes` wraps its builder for it; a direct caller
of `collect_rollouts` passes `prompt_builder=engine.wrap(...)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from webrl.data.trajectory import Step, Task
from webrl.inference.engine import Completion, SamplingParams
from webrl.inference.rollout import PromptBuilder

Policy = Callable[[Task, list[str], str], str]
"""(task, earlier responses of the episode, current page html) -> the next response."""


class ScriptedEngine:
    """An engine whose responses come from a scripted policy, not a model.

    Token ids are empty and log-probabilities absent, as from a server that does not return them.
    A policy error (e.g. the solver cannot find its element) becomes the response text
    `# policy error: ...`, which the episode records as a parse error, so a test sees it.
    `tokenizer` is the tokenizer of the actor the policy stands in for: the driver builds the
    actor's prompt form from it (the chat form when it has a chat template), so demonstrations
    record the prompts that actor will see in its own rollouts.
    """

    def __init__(self, policy: Policy, tokenizer: Any = None) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.calls: list[int] = []
        self._contexts: dict[str, tuple[Task, list[str], str]] = {}

    def wrap(self, prompt_builder: PromptBuilder) -> PromptBuilder:
        """A prompt builder that builds the same prompts and lets this engine see their inputs."""

        def build(task: Task, steps: Sequence[Step], html: str) -> str:
            prompt = prompt_builder(task, steps, html)
            self._contexts[prompt] = (task, [step.response for step in steps], html)
            return prompt

        return build

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        self.calls.append(len(prompts))
        return [Completion(self._respond(prompt), [], None, "stop") for prompt in prompts]

    def _respond(self, prompt: str) -> str:
        context = self._contexts.get(prompt)
        if context is None:
            raise KeyError("ScriptedEngine got a prompt that its wrapped prompt builder did not build")
        try:
            return self.policy(*context)
        except (LookupError, ValueError, RuntimeError) as err:
            return f"# policy error: {err}"

    def close(self) -> None:
        self._contexts.clear()

    @classmethod
    def for_embedded_sites(cls, tokenizer: Any = None) -> ScriptedEngine:
        """Replays the embedded sites' reference solver (webrl.env.sites.solver), for the actor of `tokenizer`."""
        from webrl.env.sites.solver import respond
        from webrl.env.sites.templates import plan_for

        return cls(lambda task, history, html: respond(task, plan_for(task), history, html), tokenizer)

    @classmethod
    def noisy_embedded_sites(
        cls, noise: float, answer_noise: float = 0.0, seed: int = 0, tokenizer: Any = None
    ) -> ScriptedEngine:
        """The reference solver with seeded random detours and wrong answers (webrl.env.noisy_solver)."""
        from webrl.env.noisy_solver import NoisySolver

        return cls(NoisySolver(noise, answer_noise, seed), tokenizer)

    @classmethod
    def replay(cls, responses: dict[str, list[str]], tokenizer: Any = None) -> ScriptedEngine:
        """Gives each task's responses (by task id) in order: a demonstration's variant, replayed in the browser."""

        def policy(task: Task, history: list[str], html: str) -> str:
            script = responses[task.task_id]
            if len(history) >= len(script):
                raise LookupError(f"task {task.task_id}: the script of {len(script)} responses is used up")
            return script[len(history)]

        return cls(policy, tokenizer)

    @classmethod
    def exit_at_once(cls) -> ScriptedEngine:
        """The do-nothing baseline: an empty exit on the first page (no evaluator may pass it)."""
        return cls(lambda task, history, html: 'exit(message="")')

    @classmethod
    def for_miniwob(cls) -> ScriptedEngine:
        """Replays the MiniWoB++ scripted policy (webrl.env.scripted_policy) on its supported tasks."""
        from webrl.env.scripted_policy import MiniWoBScriptedPolicy

        policy = MiniWoBScriptedPolicy()
        return cls(lambda task, history, html: policy.act(task, html, len(history)))
