"""The critic's training items: each distinct state of each trajectory once, labelled by its outcome.

A step sample holds s and s', and the next state of step t is the prompt of step t+1
(`webrl.data.steps.trajectory_to_samples`). Training the critic on (s, s') pairs, as the release
does, therefore runs every interior state of a trajectory through the trunk twice per epoch, and
only the first and the last state once. `critic_states` keeps s and s' of every sample, current
and replayed alike, and drops the repeats, so an epoch costs about half the trunk passes while
every state keeps the same target (its trajectory's outcome) and the same weight in the loss.

A state is a repeat when its trajectory and its text are the same. The same text in two
trajectories stays twice: two rollouts that reached one page are two Monte-Carlo samples of
P(success | state), and merging them would weigh a page seen in three successes and one failure
like one seen once in each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webrl.data.steps import StepSample


@dataclass(frozen=True)
class CriticState:
    """s (or s' when `next_state`) of `sample`; the sample keeps the pieces its prompt is re-built from."""

    sample: StepSample
    next_state: bool

    @property
    def text(self) -> str:
        """The state's prompt as recorded."""
        return self.sample.next_prompt if self.next_state else self.sample.prompt

    @property
    def outcome(self) -> float:
        """1 for a state of a successful trajectory, 0 otherwise: 1[mc_return > 0], as in the release."""
        return 1.0 if self.sample.mc_return > 0 else 0.0


def critic_states(samples: Sequence[StepSample]) -> list[CriticState]:
    """Every state (s and s') of `samples` once per trajectory, in order of first appearance."""
    seen: set[tuple[str, str]] = set()
    states = []
    for sample in samples:
        for next_state in (False, True):
            state = CriticState(sample, next_state)
            key = (sample.trajectory_id, state.text)
            if key not in seen:
                seen.add(key)
                states.append(state)
    return states
