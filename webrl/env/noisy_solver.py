"""The reference solver with random detours (DART-style noise): successes and failures of a known policy.

An ORM trained only on one actor's rollouts sees few successes, and only the mistakes that actor
makes. Injecting noise into the reference solver gives trajectories that range from demonstrations
to lost episodes: at each step, with probability `noise`, the solver takes a random action of the
current page instead of its plan's (clicks a random link or button, goes back, scrolls), then picks
its plan up again where it can. When the plan's next move cannot be carried out on the page the
detour left it on, it undoes the detour (forward after a detour back, else back), going back up to
`max_backtracks` times in a row, and then gives up with an empty exit. With probability
`answer_noise` a final answer is replaced by a plausible wrong one. Whether an episode succeeded
is left to the task's evaluator, never assumed from the noise.

The policy is a function of (task, responses so far, page) like `webrl.env.sites.solver.respond`, and every random
draw comes from a generator seeded by (seed, task, step), so an episode is the same for a seed
whatever else runs beside it. Detours are written exactly as the solver writes its own actions, so
a trajectory carries no mark of which steps were noise.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from webrl.data.trajectory import Task
from webrl.env.sites.solver import NEXT_PAGE, SolverError, act, parse_elements, text_lines
from webrl.env.sites.templates import plan_for

GO_BACK = 'do(action="Go Backward")'
GO_FORWARD = 'do(action="Go Forward")'
SCROLL_DOWN = 'do(action="Scroll Down")'
GIVE_UP = 'exit(message="")'
_NUMBER = re.compile(r"\d+")


def click_response(element_id: str, text: str) -> str:
    """A click in the solver's own style (`# Element:` comment, then the call)."""
    return f'# Element: {text}\ndo(action="Click", element="{element_id}")'


def exit_response(message: str) -> str:
    """An exit in the solver's own style (JSON string syntax, which the action parser reads)."""
    return f"exit(message={json.dumps(message, ensure_ascii=False)})"


def perturb_answer(answer: str, rng: random.Random, alternatives: Sequence[str] = ()) -> str:
    """A wrong answer of the same kind: one number in it shifted, else another text from `alternatives`.

    A shifted number keeps the answer's format (a price stays a price), which is what makes the
    wrong answer hard to tell from the right one; text answers take another value of the same
    kind, or the answer with a word dropped when there is none. The result always differs from
    `answer` (case and spaces aside).
    """
    numbers = list(_NUMBER.finditer(answer))
    if numbers:
        match = rng.choice(numbers)
        value = int(match.group())
        shifted = value + rng.choice([d for d in range(-9, 10) if d and value + d >= 0])
        return answer[: match.start()] + str(shifted) + answer[match.end() :]
    own = " ".join(answer.lower().split())
    others = sorted({a for a in alternatives if a.strip() and " ".join(a.lower().split()) != own})
    if others:
        return rng.choice(others)
    words = answer.split()
    return " ".join(words[:-1]) if len(words) > 1 else answer + "s"


@dataclass(frozen=True)
class NoisySolver:
    """A policy (task, history, page) -> response: the reference plan with seeded random detours."""

    noise: float
    """Probability that a step is a random action of the page instead of the plan's."""
    answer_noise: float = 0.0
    """Probability that a non-empty final answer is replaced by a wrong one (`perturb_answer`)."""
    seed: int = 0
    """Seed of every draw, combined with the task id and the step index."""
    max_backtracks: int = 3
    """Consecutive go-backs tried when the plan cannot go on, before giving up with an empty exit."""

    def __post_init__(self) -> None:
        for name in ("noise", "answer_noise"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"NoisySolver.{name} must lie in [0, 1], got {value}")
        if self.max_backtracks < 0:
            raise ValueError(f"NoisySolver.max_backtracks must be >= 0, got {self.max_backtracks}")

    def __call__(self, task: Task, history: Sequence[str], observation: str) -> str:
        plan = plan_for(task)
        step = len(history)
        rng = self._rng(task, step)
        if rng.random() < self.noise:
            return self._detour(rng, observation)
        position, recoveries = self._progress(task, history)
        if position >= len(plan):
            raise SolverError(f"task {task.task_id}: the plan of {len(plan)} moves is already complete")
        try:
            response, _ = act(task, plan[position], observation)
        except SolverError:
            return self._recovery(task, history, recoveries)
        if response.startswith("exit(") and response != GIVE_UP and rng.random() < self.answer_noise:
            answer = json.loads(response[len("exit(message=") : -1])
            alternatives = [e.text for e in parse_elements(observation)] + text_lines(observation)
            return exit_response(perturb_answer(answer, rng, alternatives))
        return response

    def is_detour(self, task: Task, step: int) -> bool:
        """Whether step `step` of an episode of `task` is noise (the first draw of that step decides)."""
        return self._rng(task, step).random() < self.noise

    def _rng(self, task: Task, step: int) -> random.Random:
        return random.Random(f"{self.seed}:{task.task_id}:{step}")

    def _progress(self, task: Task, history: Sequence[str]) -> tuple[int, int]:
        """(moves of the plan completed, recoveries in a row at the end) given the responses so far.

        Detours, recoveries and paging clicks complete no move; the plan itself never goes back or
        forward, so such a step that was not a detour is a recovery.
        """
        position = recoveries = 0
        for step, response in enumerate(history):
            if self.is_detour(task, step):
                recoveries = 0
            elif response in (GO_BACK, GO_FORWARD):
                recoveries += 1
            else:
                recoveries = 0
                if not response.startswith(f"# Element: {NEXT_PAGE}\n"):
                    position += 1
        return position, recoveries

    def _recovery(self, task: Task, history: Sequence[str], recoveries: int) -> str:
        """Undo the last detour: forward once after a detour back, else back; give up after `max_backtracks`."""
        detours = [step for step in range(len(history)) if self.is_detour(task, step)]
        if recoveries == 0 and detours and history[detours[-1]] == GO_BACK:
            return GO_FORWARD
        backs = sum(1 for response in history[len(history) - recoveries :] if response == GO_BACK)
        return GO_BACK if backs < self.max_backtracks else GIVE_UP

    @staticmethod
    def _detour(rng: random.Random, observation: str) -> str:
        """A random action of the page: a click on any link or button, going back, or scrolling down."""
        clicks = [click_response(e.id, e.text) for e in parse_elements(observation) if e.tag in ("a", "button")]
        return rng.choice([*clicks, GO_BACK, SCROLL_DOWN])
