"""A run directory keeps the config it was started with; relaunching it with other settings stops first.

Every stage of a run is cached in its directory, so rerunning the directory with, say, another
learning rate would reuse every finished stage and mix two configurations in one result. The
first launch writes `config.json`; each relaunch compares its resolved config with it before any
work and stops with one line listing the keys that differ (old → new). Keys that change no
phase's results (`NEUTRAL_KEYS`) are never compared, nor is a key config.json lacks (the schema
gained it since) that holds its default, since a new key's default keeps the behaviour from before
it; others may be changed on purpose with `resume.allow_changes=[key, ...]`, and each accepted set
of changes is recorded, with the phase and stage it starts from, in `config_changes.json`. `config.json`
itself is never rewritten.

A dict-valued key is compared entry by entry (`flatten`), so an entry added to or left out of a dict
(a site of `env.url_map`, a rule of `curriculum.judge_rules`), or a key dropped from the schema, is a
change like any other; a record names the keys its changes leave absent (`removed`), which the
run's settings then lack, so that the same relaunch again finds nothing changed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webrl.config_checks import ConfigError, at_least, flatten, read_run_file, require
from webrl.data.atomic_io import write_json_atomic
from webrl.paths import absolute_path
from webrl.run_layout import RunLayout
from webrl.run_state import STAGES, RunState

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
RECIPE_PATH_KEYS = ("filtered_bc.source_run",)
"""Keys of a recipe's own section holding paths (`recipes.filtered_bc_config`): its config's `resolve` makes them
absolute, and they are compared as those of `PATH_KEYS` are. The run config lacks those sections, so its own
`resolve` leaves them to the recipe's."""
KEYWORD_PATH_KEYS = {"model.base": ("tiny", "smollm2"), "env.suite": ("embedded",)}
"""Keys holding a keyword or a path; a path is made absolute as those of `PATH_KEYS` are. The SFT cache key holds
them, so a relative `model.base=models/llama` named from two folders would otherwise key two models alike."""


def absolute_unless_keyword(key: str, value: Any) -> Any:
    """`value` made absolute when `key` holds paths (`PATH_KEYS`, `RECIPE_PATH_KEYS`, or `KEYWORD_PATH_KEYS` other
    than their keywords); anything else, an empty value included, as it is."""
    keyword_path = key in KEYWORD_PATH_KEYS and value not in KEYWORD_PATH_KEYS[key]
    is_path = key in PATH_KEYS or key in RECIPE_PATH_KEYS or keyword_path
    return str(absolute_path(value)) if is_path and isinstance(value, str) and value else value


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
        """The save interval is not negative; each allowed change names a key or section among `known` (the flattened
        config, its `output_dir` included) or among those the run directory's saved settings name.

        A key dropped from the schema since the run started is in no config of this code, yet a relaunch is refused
        until it is allowed (`saved.key 1 → (absent)`), so the keys of config.json and of the accepted changes count.
        """
        at_least("resume.stage_checkpoint_minutes", self.stage_checkpoint_minutes, 0, "(0 = never)")
        unknown = [entry for entry in self.allow_changes if not any(_under(key, entry) for key in known)]
        saved = saved_keys(known.get("output_dir")) if unknown else set()  # the run's files, read only when needed
        for entry in unknown:
            exists = any(_under(key, entry) for key in saved)
            require(
                exists, "resume.allow_changes", self.allow_changes, f"{entry!r} is not a key or section of the config"
            )


def _under(key: str, entry: str) -> bool:
    return key == entry or key.startswith(f"{entry}.")


def changed_keys(
    saved: dict[str, Any], current: dict[str, Any], defaults: dict[str, Any], held: Collection[str] = ()
) -> dict[str, tuple[Any, Any]]:
    """Flattened keys whose values differ, neutral keys left out; a key one side lacks reads as ABSENT there.

    A key `saved` lacks whose current value is its default in `defaults` (the schema's) is no change: the run was
    started before the key existed, and a new key's default keeps the behaviour from before it. With any other
    value it is one, `(absent) → value`; so is any value of a key among `held` (those the run's settings have
    held, `saved_keys`), which `saved` lacks because an accepted change removed it (a dict entry left out), so
    that putting it back is a change back. Paths (`PATH_KEYS`, `RECIPE_PATH_KEYS`, `KEYWORD_PATH_KEYS`) are compared
    made absolute, so a relaunch of a run whose config.json holds one relative is not refused for the new absolute
    spelling of the same place.
    """
    old, new, default = _flat(saved), _flat(current), _flat(defaults)
    changed = {key: (old.get(key, ABSENT), new.get(key, ABSENT)) for key in sorted(old.keys() | new.keys())}
    return {
        key: (was, now)
        for key, (was, now) in changed.items()
        if was != now
        and not (was is ABSENT and key not in held and now == default.get(key, ABSENT))
        and not any(_under(key, neutral) for neutral in NEUTRAL_KEYS)
    }


def _flat(tree: dict[str, Any]) -> dict[str, Any]:
    """`tree` flattened as config.json holds it (JSON values), its paths absolute."""
    return _absolute_paths(flatten(json.loads(json.dumps(tree))))


def _absolute_paths(flat: dict[str, Any]) -> dict[str, Any]:
    """`flat` with each non-empty path of `PATH_KEYS`, `RECIPE_PATH_KEYS` and `KEYWORD_PATH_KEYS` absolute."""
    return {key: absolute_unless_keyword(key, value) for key, value in flat.items()}


def check_run_config(run_dir: Path, config: Any, allow_changes: list[str]) -> dict[str, tuple[Any, Any]] | None:
    """None for a new run directory (no config.json, no run_state.json); else the allowed changes from config.json
    (empty when none). A directory with run_state.json but no config.json is refused: its settings are unknown.

    `config` is the resolved config, a dataclass: its class's defaults stand for the keys config.json lacks
    (`changed_keys`). Raises ConfigError (one line) listing the keys that differ and are not allowed. Reads only.
    """
    saved = effective_config(run_dir)
    if saved is None:
        layout = RunLayout(run_dir)
        if layout.state_path.exists():
            # Stages ran, but what they ran with is gone: a relaunch would record its own settings as the run's.
            raise ConfigError(
                f"{layout.state_path} records finished stages but {layout.config_path} is missing, so the settings "
                "they ran with are unknown: restore config.json, or use another output_dir"
            )
        return None
    defaults = dataclasses.asdict(type(config)())
    changes = changed_keys(saved, dataclasses.asdict(config), defaults, saved_keys(run_dir))
    refused = {key: values for key, values in changes.items() if not any(_under(key, a) for a in allow_changes)}
    if refused:
        raise ConfigError(
            f"{run_dir} was started with other settings: {describe_changes(refused)}. Use another output_dir, or add "
            f"resume.allow_changes=[{','.join(refused)}] to go on with the new values from the next stage"
        )
    return changes


def effective_config(run_dir: Path, up_to: tuple[int, str] | None = None) -> dict[str, Any] | None:
    """The run's settings now: config.json with each change accepted since (config_changes.json) applied, only those
    in force for stage `up_to = (phase, stage)` when given (`in_force`); None without config.json.

    A relaunch is checked against these, not against the first launch's: after `actor.train.lr` went from A to B,
    the first command again (lr A) is a change back, refused unless allowed, not a silent return to A.
    """
    layout = RunLayout(run_dir)
    if not layout.config_path.exists():
        return None
    settings = read_run_file(layout.config_path, dict)
    for record in change_records(run_dir):
        if up_to is None or in_force(record, *up_to):
            _apply(settings, record)
    return settings


def change_records(run_dir: Path) -> list[dict[str, Any]]:
    """The records of config_changes.json, oldest first (none without the file); one that is not a record is a
    one-line ConfigError naming the file (`read_run_file`)."""
    path = RunLayout(run_dir).config_changes_path
    records = read_run_file(path, list) if path.exists() else []
    for record in records:
        if not _is_change_record(record):
            raise ConfigError(
                f"{path}: {record!r} is not a record of accepted changes "
                '({"from_phase": N, "changes": {"key": [old, new]}}); fix or restore the file'
            )
    return records


def _is_change_record(record: Any) -> bool:
    """`{"from_phase": N, "changes": {key: [old, new], ...}}`, as `_record_changes` writes one (a `from_stage`, if
    any, a stage)."""
    if not isinstance(record, dict) or not isinstance(record.get("changes"), dict):
        return False
    pairs = all(isinstance(pair, list) and len(pair) == 2 for pair in record["changes"].values())
    return pairs and isinstance(record.get("from_phase"), int) and record.get("from_stage", STAGES[0]) in STAGES


def saved_keys(run_dir: str | Path | None) -> set[str]:
    """The flattened keys of `run_dir`'s config.json and those its change records name (none without config.json)."""
    if not run_dir or not RunLayout(Path(run_dir)).config_path.is_file():
        return set()
    first = read_run_file(RunLayout(Path(run_dir)).config_path, dict)
    return set(flatten(first)).union(*(record["changes"] for record in change_records(Path(run_dir))))


def in_force(record: dict[str, Any], phase: int, stage: str) -> bool:
    """Whether the accepted change `record` was in force when stage `stage` of phase `phase` ran.

    A record holds the phase (`from_phase`) and the first stage not yet done (`from_stage`) when it was accepted:
    the stages before it ran with the settings before it. A record without `from_stage` applies from the phase's
    first stage: records written before the field existed, and those accepted before any stage of their phase ran
    (which leave it out, as the stage adds nothing then).
    """
    start = (record["from_phase"], STAGES.index(record.get("from_stage", STAGES[0])))
    return start <= (phase, STAGES.index(stage))


def _apply(settings: dict[str, Any], record: dict[str, Any]) -> None:
    """Apply one record to the nested `settings`: its removed keys first, then each other key's new value.

    Removals come first because a dict that gains entries in place of a value (`env.url_map`: `{}` to
    `{"__X__": ...}`) is recorded as its old key removed and its entries set.
    """
    removed = record.get("removed", [])
    for key in removed:
        _remove(settings, key)
    for key, (_, new) in record["changes"].items():
        if key not in removed:
            _set(settings, key, new)


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `a.b.c` in a nested dict, making the parents it lacks or that hold a value instead of a dict.

    A record written before removals were recorded sets a dict that gained entries to null before its entries.
    """
    *parents, leaf = dotted.split(".")
    for part in parents:
        if not isinstance(tree.get(part), dict):
            tree[part] = {}
        tree = tree[part]
    tree[leaf] = value


def _remove(tree: dict[str, Any], dotted: str) -> None:
    """Delete `a.b.c` from a nested dict if there, and each parent that this leaves empty.

    Flattened, an empty dict is a value of its own (`a.b: {}`): a section dropped from the schema would otherwise
    leave one behind, a change from what the config now has (nothing) at every relaunch.
    """
    *parents, leaf = dotted.split(".")
    path = [tree]
    for part in parents:
        child = path[-1].get(part)
        if not isinstance(child, dict):
            return
        path.append(child)
    path[-1].pop(leaf, None)
    for depth in reversed(range(len(parents))):
        if path[depth + 1]:
            break
        del path[depth][parents[depth]]


def keep_run_config(run_dir: Path, config: Any, allow_changes: list[str]) -> dict[str, tuple[Any, Any]] | None:
    """`check_run_config`, then config.json on a first launch, or the record of the changes it allowed."""
    changes = check_run_config(run_dir, config, allow_changes)
    if changes is None:
        write_json_atomic(RunLayout(run_dir).config_path, dataclasses.asdict(config))
    elif changes:
        _record_changes(run_dir, changes)
    return changes


def describe_changes(changes: dict[str, tuple[Any, Any]]) -> str:
    """`key old → new, ...`."""
    return ", ".join(f"{key} {_show(old)} → {_show(new)}" for key, (old, new) in changes.items())


def _record_changes(run_dir: Path, changes: dict[str, tuple[Any, Any]]) -> None:
    """Append this set of accepted changes to config_changes.json, with the phase and stage it applies from.

    `from_stage` (the first stage of the phase not done yet) is left out at a phase's first stage, where a record
    reads as one from before the field existed (`in_force`); `removed` lists the keys the new config lacks, whose
    new value is written as null like any absent one.
    """
    layout = RunLayout(run_dir)
    state = RunState.load(layout.state_path)
    record: dict[str, Any] = {
        "from_phase": state.phase,
        "changes": {key: [_plain(old), _plain(new)] for key, (old, new) in changes.items()},
    }
    stage = next((stage for stage in STAGES if stage not in state.done), STAGES[0])
    if stage != STAGES[0]:
        record["from_stage"] = stage
    removed = [key for key, (_, new) in changes.items() if new is ABSENT]
    if removed:
        record["removed"] = removed
    records = change_records(run_dir)
    if records[-1:] != [record]:  # an earlier equal record may since have been changed back: only the last counts
        write_json_atomic(layout.config_changes_path, [*records, record])


def _plain(value: Any) -> Any:
    return None if value is ABSENT else value


def _show(value: Any) -> str:
    return "(absent)" if value is ABSENT else json.dumps(value)
