"""`ScriptedEngine`: a TEST DOUBLE of an inference engine that answers with a scripted policy.

It lets the rollout runner be tested and benchmarked without model time and with known outcomes:
driven by the embedded sites' reference solver every episode must succeed; driven by the MiniWoB++
scripted policy every supported task must. It is never used in the default path.

A scripted policy needs the task and the page, which a prompt string does not carry in a usable
form (MiniWoB's intent is only known once the page is open, and the prompt may be cut to a
budget). So the double sees what the prompt was built from: `wrap(prompt_builder)` returns a
builder that builds the same prompt and remembers its (task, earlier responses, page html);
`generate` looks each prompt up there and asks the policy. The runner is used exactly as with a
real engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from webrl.data.trajectory import Step, Task
from webrl.inference.engine import Completion, SamplingParams
from webrl.inference.rollout import PromptBuilder

Policy = Callable[[Task, list[str], str], str]
"""(task, earlier responses of the episode, current page html) -> the next response."""


class ScriptedEngine:
    """TEST DOUBLE: an engine whose responses come from a scripted policy, not a model.

    Token ids are empty and log-probabilities absent, as from a server that does not return them.
    A policy error (e.g. the solver cannot find its element) becomes the response text
    `# policy error: ...`, which the episode records as a parse error, so a test sees it.
    """

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
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
    def for_embedded_sites(cls) -> ScriptedEngine:
        """Replays the embedded sites' reference solver (webrl.env.sites.solver)."""
        from webrl.env.sites.solver import respond
        from webrl.env.sites.templates import plan_for

        return cls(lambda task, history, html: respond(task, plan_for(task), history, html))

    @classmethod
    def for_miniwob(cls) -> ScriptedEngine:
        """Replays the MiniWoB++ scripted policy (webrl.env.scripted_policy) on its supported tasks."""
        from webrl.env.scripted_policy import MiniWoBScriptedPolicy

        policy = MiniWoBScriptedPolicy()
        return cls(lambda task, history, html: policy.act(task, html, len(history)))
