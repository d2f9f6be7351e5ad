"""What a cache key hashes of a settings dataclass: every field, except a later one left at its default.

A field added to a dataclass that a cache key hashes changes every key built before it, even at a default that
changes nothing, and the next run rebuilds what it had: adding `average_tail` to the stage settings made a run on
the cached SmolLM2 SFT actor train it again (43 minutes on a 2-core machine, for the same weights). A field
declared with `metadata=OMITTED_AT_DEFAULT` is left out of the key while it holds its default.
"""

from __future__ import annotations

import dataclasses
from typing import Any

OMITTED_AT_DEFAULT = {"cache_key": "omitted at its default"}
"""A dataclass field's metadata: leave the field out of cache keys while it holds its default."""


def key_fields(value: Any) -> Any:
    """`value` with every dataclass in it as a dict of its fields (as `dataclasses.asdict`), less the fields
    marked `OMITTED_AT_DEFAULT` that hold their defaults."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            item.name: key_fields(getattr(value, item.name))
            for item in dataclasses.fields(value)
            if not (item.metadata.get("cache_key") and getattr(value, item.name) == item.default)
        }
    if isinstance(value, (list, tuple)):  # one JSON array either way; a named tuple takes no single iterable
        return [key_fields(item) for item in value]
    if isinstance(value, dict):
        return {key: key_fields(item) for key, item in value.items()}
    return value
