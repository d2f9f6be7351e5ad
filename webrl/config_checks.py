"""Checks of config values, each failing as one line that names the key, the value and what is allowed.

The config dataclasses' `validate` methods are written with these helpers so that every message
reads the same way (`env.test_tasks=-1: must be >= 0 (0 = all)`), the form a user would type to
fix it. They run when the config is loaded, before a run writes or starts anything. `read_run_file` reads the
settings and state a run directory keeps, with the same one-line errors.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration problem; the message names the key (and file) at fault."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key
        """The dotted key at fault, when one is."""


def invalid(key: str, value: Any, allowed: str) -> ConfigError:
    """The error for `key` holding `value`: `key=value: allowed`."""
    return ConfigError(f"{key}={value!r}: {allowed}", key=key)


def require(condition: bool, key: str, value: Any, allowed: str) -> None:
    """Raise `invalid(key, value, allowed)` unless `condition`."""
    if not condition:
        raise invalid(key, value, allowed)


def at_least(key: str, value: float, low: float, note: str = "") -> None:
    """`value >= low`; `note` says what the boundary means, e.g. `(0 = all)`."""
    require(value >= low, key, value, f"must be >= {low}{f' {note}' if note else ''}")


def positive(key: str, value: float) -> None:
    """`value > 0`."""
    require(value > 0, key, value, "must be > 0")


def within(key: str, value: float, low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> None:
    """`value` in the interval from `low` to `high`, each end closed unless said open."""
    above = value > low if open_low else value >= low
    below = value < high if open_high else value <= high
    interval = f"{'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    require(above and below, key, value, f"must lie in {interval}")


def one_of(key: str, value: Any, choices: Iterable[Any]) -> None:
    """`value` is one of `choices`."""
    choices = tuple(choices)
    require(value in choices, key, value, f"must be one of {', '.join(str(choice) for choice in choices)}")


def finite_numbers(config: Any, prefix: str = "") -> None:
    """Every float anywhere in the dataclass `config` (lists and tuples included) is finite: no nan, no inf.

    A range check such as `lr > 0` is false for nan without being caught (`nan <= 0` is false too),
    so non-finite numbers are refused once here, for every key of every schema.
    """
    for field in dataclasses.fields(config):
        key = f"{prefix}{field.name}"
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            finite_numbers(value, prefix=f"{key}.")
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if isinstance(item, float) and not math.isfinite(item):
                raise invalid(key, value, "must be a finite number")


def read_run_file(path: Path, expected: type[dict] | type[list]) -> Any:
    """The JSON object (`expected=dict`) or array (`list`) a run directory keeps in `path`; else one-line ConfigError.

    The run writes its config.json, config_changes.json and run_state.json atomically, so one that does not read is
    a hand edit: the error names the file (and where its JSON breaks) for the user to fix, never a bare traceback.
    """
    fix = "fix or restore the file"
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}"
        raise ConfigError(f"{path}: not valid JSON ({err.msg} at {where}); {fix}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); {fix}") from None
    if not isinstance(value, expected):
        wanted = "a JSON object" if expected is dict else "a JSON array"
        raise ConfigError(f"{path}: must hold {wanted}, got {type(value).__name__}; {fix}")
    return value


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
