"""An episode's limits (steps, repeats, parse failures, time) and where an episode stands against them.

docs/method.md §4.4: an episode ends after 30 steps, 5 identical consecutive actions or 5 consecutive
responses that do not parse; the time limits keep one hung page or slow site from holding a rollout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from webrl.env.actions import Action


@dataclass
class EpisodeLimits:
    """When an episode stops, and how long any part of it may take.

    A run takes the step, repeat, parse-failure and episode-time limits from its config (`env.max_steps`,
    `env.max_repeated_actions`, `env.max_parse_failures`, `env.episode_timeout_s`: `WebEnvironment.limits`).
    """

    max_steps: int = 30
    """Steps (agent turns) before the episode ends with status "max_steps"."""
    max_repeated_actions: int = 5
    """Identical consecutive actions (comments ignored) that end it with "repeated_action"."""
    max_parse_failures: int = 5
    """Consecutive unparsable responses that end it with "parse_failures"."""
    action_timeout_s: float = 10.0
    """Limit for one action and for one observation."""
    reset_timeout_s: float = 30.0
    """Limit for opening the start page (and for any page load)."""
    episode_timeout_s: float = 300.0
    """Wall-clock limit from reset; a step after it ends the episode with "timeout"."""
    wait_action_s: float = 1.0
    """How long the Wait action waits."""

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_repeated_actions", "max_parse_failures"):
            if getattr(self, name) < 1:
                raise ValueError(f"EpisodeLimits.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("action_timeout_s", "reset_timeout_s", "episode_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"EpisodeLimits.{name} must be > 0, got {getattr(self, name)}")


class LimitTracker:
    """Counts what the limits are about during one episode: consecutive repeats and parse failures, time."""

    def __init__(self, limits: EpisodeLimits) -> None:
        self.limits = limits
        self._started = 0.0
        self._repeats = 0
        self._last_key: tuple | None = None
        self._parse_failures = 0

    def start(self) -> None:
        """The episode's clock starts (at reset)."""
        self._started = time.monotonic()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def count(self, action: Action | None) -> None:
        """Count one response: its parsed action, or None when it did not parse."""
        if action is None:
            self._parse_failures += 1
            self._repeats, self._last_key = 0, None
            return
        self._parse_failures = 0
        self._repeats = self._repeats + 1 if action.key() == self._last_key else 1
        self._last_key = action.key()

    def out_of_time(self) -> tuple[str, str] | None:
        """("timeout", why) once the episode has run past `episode_timeout_s`."""
        if self.elapsed_s > self.limits.episode_timeout_s:
            return "timeout", f"episode exceeded {self.limits.episode_timeout_s:g}s"
        return None

    def reached(self, steps: int) -> tuple[str, str | None] | None:
        """(status, why) of the first limit reached after `steps` recorded steps, if any."""
        limits = self.limits
        if self._parse_failures >= limits.max_parse_failures:
            return "parse_failures", f"{self._parse_failures} consecutive responses did not parse"
        if self._repeats >= limits.max_repeated_actions:
            return "repeated_action", f"the same action {self._repeats} times in a row"
        if steps >= limits.max_steps:
            return "max_steps", None
        return self.out_of_time()
