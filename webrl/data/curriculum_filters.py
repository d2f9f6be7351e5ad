"""The curriculum's cheap, pure filters: intent normalisation for dedupe, the critic's value window,
site-balanced selection, and per-phase random streams.

They are plain functions over plain values so that each can be tested on hand-made inputs; the
`Curriculum` wires them to the critic, the judge and the generator.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

_WORD = re.compile(r"[^\W_]+")


def normalise_intent(text: str) -> str:
    """The dedupe key of an intent: case, accents' compatibility forms, punctuation and spacing ignored.

    "Show me the price of the red mug." and "show me  the price of the Red Mug" are the same task;
    a model that echoes an example with a changed full stop has not created a new one.
    """
    return " ".join(_WORD.findall(unicodedata.normalize("NFKC", text).casefold()))


def phase_rng(seed: int, phase: int, stream: str) -> random.Random:
    """A random stream derived from (seed, phase, stream) only, never from global state.

    A resumed run that re-enters phase p draws exactly what the first run drew; separate streams
    (seed sampling, template values, selection) keep one consumer's draws from shifting another's.
    """
    digest = hashlib.sha256(f"webrl-curriculum/{seed}/{phase}/{stream}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def value_verdict(value: float, window: tuple[float, float]) -> str | None:
    """None when the critic's P(success) lies in the closed window, else "critic_low" / "critic_high".

    Too low: the agent would almost surely fail (no learning signal); too high: it already solves it.
    """
    low, high = window
    if value != value:  # NaN: a broken critic must not let every task through
        raise ValueError(f"critic returned NaN; cannot apply curriculum.value_window {window}")
    if value < low:
        return "critic_low"
    if value > high:
        return "critic_high"
    return None


def pick_balanced(queues: Mapping[Hashable, list[T]], counts: dict[Hashable, int], n: int) -> list[tuple[Hashable, T]]:
    """Pop up to `n` items, each time from the non-empty queue whose key has the fewest items so far.

    `counts` (items already kept or pending per key) is updated in place. Ties go to the key that
    comes first in `queues`' order, so with equal starting counts this is a round-robin; a site
    that runs out of candidates leaves its share to the others. Deterministic for given inputs.
    """
    picked: list[tuple[Hashable, T]] = []
    order = {key: i for i, key in enumerate(queues)}
    while len(picked) < n:
        live = [key for key in queues if queues[key]]
        if not live:
            break
        key = min(live, key=lambda k: (counts.get(k, 0), order[k]))
        picked.append((key, queues[key].pop(0)))
        counts[key] = counts.get(key, 0) + 1
    return picked


def group_by(items: Sequence[T], key_of) -> dict[str, list[T]]:
    """Group `items` by `key_of(item)`, keys sorted, items in their input order."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(key_of(item), []).append(item)
    return {key: groups[key] for key in sorted(groups)}
