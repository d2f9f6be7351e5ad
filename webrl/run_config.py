"""A run directory keeps the config it was started with; relaunching it with other settings stops first.

Every stage of a run is cached in its directory, so rerunning the directory with, say, another
learning rate would reuse every finished stage and mix two configurations in one result. The
first launch writes `config.json`; each relaunch compares its resolved config with it before any
work and stops with one line listing the keys that differ (old → new). Keys that change no
phase's results (`NEUTRAL_KEYS`) are never compared, nor is a key config.json lacks (the schema
gained it since) that holds its default, since a new key's default keeps the behaviour from before
it; others may be changed on purpose with `resume.allow_changes=[key, ...]`, and each accepted set
of changes is recorded, with the phase it starts from, in `config_changes.json`. `config.json`
itself is never rewritten.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webrl.config_checks import ConfigError, at_least, require
from webrl.data.atomic_io import write_json_atomic
from webrl.paths import absolute_path
from webrl.run_layout import RunLayout
from webrl.run_state import RunState

ABSENT = object()
"""Stands for a key that one of the two configs lacks (a key added to the schema since the run started)."""
NEUTRAL_KEYS = (
    "output_dir",
    "model.cache_dir",
    "phases",
    "tracking",
    "resume",
    "env.strict_tasks",
    "env.screenshots",
    "engines.gpu_memory_utilization",
    "engines.sleep",
    "fabric.activation_checkpointing",
)
"""Where the run lives, where built models are kept (each cached product is named by a key of the settings that
make it, so another cache builds the same products again, never other ones), how far it goes (phases only bounds
the loop), where metrics go, this check's own keys, env.strict_tasks (it loads the same tasks or stops, so it
never changes a result), env.screenshots (pictures for the report; the agent never sees them), and the GPU memory
settings (vLLM's budget and sleep, activation checkpointing: the same numbers in other places and times)."""
PATH_KEYS = ("output_dir", "model.cache_dir", "model.actor", "model.orm")
"""Keys holding paths, made absolute when the config is read (an empty value stays empty). A config.json written
before that may hold one relative: it is compared as relative to the current folder, where it was read then."""


@dataclass
class ResumeConfig:
    """Relaunching a run directory with settings other than those it was started with."""

    allow_changes: list[str] = field(default_factory=list)
    """Keys or sections (e.g. env.test_tasks, env) that may differ from the run's config.json from this launch on."""
    stage_checkpoint_minutes: float = 10.0
    """How often a training stage (SFT, ORM, critic, actor, Filtered BC) saves its weights, optimiser state and place
    in the data while it runs, so that a relaunch after a crash or Ctrl-C continues the stage instead of starting it
    over (the two-epoch SmolLM2 SFT takes over 2 hours on a 2-core CPU); 0 = never. A SmolLM2 save is about 1.6 GB
    and takes seconds, so every 10 minutes costs little; the state is removed once the stage's model is saved."""

    def validate(self, known: dict[str, Any]) -> None:
        """The save interval is not negative; each allowed change names a key or section among `known`."""
        at_least("resume.stage_checkpoint_minutes", self.stage_checkpoint_minutes, 0, "(0 = never)")
        for entry in self.allow_changes:
            exists = any(_under(key, entry) for key in known)
            require(
                exists, "resume.allow_changes", self.allow_changes, f"{entry!r} is not a key or section of the config"
            )


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` -> `{"a.b": 1}`; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _under(key: str, entry: str) -> bool:
    return key == entry or key.startswith(f"{entry}.")


def changed_keys(
    saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """Flattened keys whose values differ, neutral keys left out; a key one side lacks reads as ABSENT there.

    A key `saved` lacks whose current value is its default in `defaults` (the schema's) is no change: the run was
    started before the key existed, and a new key's default keeps the behaviour from before it. With any other
    value it is one, `(absent) → value`. Paths (`PATH_KEYS`) are compared made absolute, so a relaunch of a run
    whose config.json holds one relative is not refused for the new absolute spelling of the same place.
    """
    old, new, default = _flat(saved), _flat(current), _flat(defaults)
    changed = {key: (old.get(key, ABSENT), new.get(key, ABSENT)) for key in sorted(old.keys() | new.keys())}
    return {
        key: (was, now)
        for key, (was, now) in changed.items()
        if was != now
        and not (was is ABSENT and now == default.get(key, ABSENT))
        and not any(_under(key, neutral) for neutral in NEUTRAL_KEYS)
    }


def _flat(tree: dict[str, Any]) -> dict[str, Any]:
    """`tree` flattened as config.json holds it (JSON values), its paths absolute."""
    return _absolute_paths(flatten(json.loads(json.dumps(tree))))


def _absolute_paths(flat: dict[str, Any]) -> dict[str, Any]:
    """`flat` with each non-empty path of `PATH_KEYS` absolute."""
    return {
        key: str(absolute_path(value)) if key in PATH_KEYS and isinstance(value, str) and value else value
        for key, value in flat.items()
    }


def check_run_config(run_dir: Path, config: Any, allow_changes: list[str]) -> dict[str, tuple[Any, Any]] | None:
    """None for a run directory without config.json; else the allowed changes from it (empty when none).

    `config` is the resolved config, a dataclass: its class's defaults stand for the keys config.json lacks
    (`changed_keys`). Raises ConfigError (one line) listing the keys that differ and are not allowed. Reads only.
    """
    saved = effective_config(run_dir)
    if saved is None:
        return None
    changes = changed_keys(saved, dataclasses.asdict(config), dataclasses.asdict(type(config)()))
    refused = {key: values for key, values in changes.items() if not any(_under(key, a) for a in allow_changes)}
    if refused:
        raise ConfigError(
            f"{run_dir} was started with other settings: {describe_changes(refused)}. Use another output_dir, or add "
            f"resume.allow_changes=[{','.join(refused)}] to go on with the new values from the next stage"
        )
    return changes


def effective_config(run_dir: Path, up_to_phase: int | None = None) -> dict[str, Any] | None:
    """The run's settings now: config.json with each change accepted since (config_changes.json) applied, those from
    phases up to `up_to_phase` when given; None without config.json.

    A relaunch is checked against these, not against the first launch's: after `actor.train.lr` went from A to B,
    the first command again (lr A) is a change back, refused unless allowed, not a silent return to A.
    """
    layout = RunLayout(run_dir)
    if not layout.config_path.exists():
        return None
    settings = json.loads(layout.config_path.read_text(encoding="utf-8"))
    records = (
        json.loads(layout.config_changes_path.read_text(encoding="utf-8"))
        if layout.config_changes_path.exists()
        else []
    )
    for record in records:
        if up_to_phase is None or record["from_phase"] <= up_to_phase:
            for key, (_, new) in record["changes"].items():
                _set(settings, key, new)
    return settings


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, making the parents it lacks."""
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def keep_run_config(run_dir: Path, config: Any, allow_changes: list[str]) -> dict[str, tuple[Any, Any]] | None:
    """`check_run_config`, then config.json on a first launch, or the record of the changes it allowed."""
    changes = check_run_config(run_dir, config, allow_changes)
    if changes is None:
        write_json_atomic(RunLayout(run_dir).config_path, dataclasses.asdict(config))
    elif changes:
        _record_changes(run_dir, {key: [_plain(old), _plain(new)] for key, (old, new) in changes.items()})
    return changes


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    """`key old → new, ...`."""
    return ", ".join(f"{key} {_show(old)} → {_show(new)}" for key, (old, new) in changes.items())


def _record_changes(run_dir: Path, changes: dict[str, list[Any]]) -> None:
    """Append this set of accepted changes to config_changes.json once, with the phase it applies from."""
    layout = RunLayout(run_dir)
    path = layout.config_changes_path
    records = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
    record = {"from_phase": RunState.load(layout.state_path).phase, "changes": changes}
    if record not in records:
        write_json_atomic(path, [*records, record])


def _plain(value: Any) -> Any:
    return None if value is ABSENT else value


def _show(value: Any) -> str:
    return "(absent)" if value is ABSENT else json.dumps(value)
