"""Typed configuration: dataclass schema, YAML files, environment variables, then `key=value` overrides.

Every knob is a dataclass field with a one-line docstring (the `--help` text). Loading goes through
OmegaConf's structured configs, so an unknown key or a value of the wrong type is an error, which
`load_config` re-raises as `ConfigError` naming the full dotted key and, for YAML, the file.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf, StringNode
from omegaconf.errors import OmegaConfBaseException

from webrl.config_checks import ConfigError, finite_numbers, flatten

T = TypeVar("T")


def load_config(
    schema: type[T],
    argv: Sequence[str] | None = None,
    *,
    default_file: str | Path | None = None,
    environment: Mapping[str, str] | None = None,
    usage: str = "",
    help_keys: Sequence[str] = (),
) -> T:
    """Build a `schema` instance from `[--config FILE|NAME ...] [key=value ...]`, checked before it is returned.

    Precedence: dataclass defaults < `default_file` < each `--config FILE` in order (a method's file can
    go over a model's, e.g. an ablation over webrl_smollm2.yaml) < the environment variables that
    `environment` maps to keys (`{"WANDB_MODE": "tracking.wandb_mode"}`) < command-line overrides.
    `--help` prints `usage`, then each key (those under `help_keys`, when given) with the value this
    command would run with and its docstring; `--print-config` prints the checked config as YAML. Both exit.
    A schema with `resolve` has it called once, before the values are checked, shown or returned.
    A mapping given to a plain mapping key (`env.url_map`) replaces it whole, in a file as on the command line,
    so that `--print-config` output and a run's config.json load back to the config they record.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    wants_help = bool({"--help", "-h"} & set(argv))
    wants_yaml = "--print-config" in argv
    config_files, overrides = _split_argv([item for item in argv if item not in ("--help", "-h", "--print-config")])
    # --help shows the keys a file requires (`???`) with the value they would otherwise have, rather than stop.
    set_in_files: dict[str, Path] = {}
    merged = _merge_files(
        OmegaConf.structured(schema), (default_file, *config_files), required=not wants_help, set_in=set_in_files
    )
    from_environment = _apply_environment(merged, environment or {})
    for key in from_environment:
        _forget(set_in_files, key)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (see --help for the keys)")
        key, _, raw = item.partition("=")
        try:
            _override(merged, key.strip(), raw)
        except OmegaConfBaseException as err:
            raise ConfigError(f"command-line override {item!r}: {_describe_error(err)}") from None
        from_environment.pop(key.strip(), None)
        _forget(set_in_files, key.strip())
    if missing := _required_keys(merged):
        raise ConfigError(f"no value for {', '.join(missing)}: a config file requires them (???); give key=value")
    config = _to_object(merged, from_environment, set_in_files)
    resolve = getattr(config, "resolve", None)
    if callable(resolve):
        resolve()
    if wants_help:
        print(help_text(config, usage, help_keys, _sources(default_file, environment or {})))
        raise SystemExit(0)
    _check(config, from_environment, set_in_files)
    if wants_yaml:
        print(OmegaConf.to_yaml(config), end="")
        raise SystemExit(0)
    return config  # type: ignore[return-value]


def _to_object(merged: DictConfig, from_environment: Mapping[str, str], set_in_files: Mapping[str, Path]) -> Any:
    """The schema's instance of `merged`; an error names the file or variable that set its key, as `_check` does.

    Interpolations are resolved here (a file's `${oc.env:NAME}` with NAME unset fails here), and sections that
    check themselves as they are built (`__post_init__`) raise here, before `_check`.
    """
    try:
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        path = _file_of(set_in_files, getattr(err, "full_key", None) or "")
        raise ConfigError(f"{path}: {_describe_error(err)}" if path else _describe_error(err)) from None
    except ConfigError as err:
        raise _traced(err, from_environment, set_in_files) from None


def _sources(default_file: str | Path | None, environment: Mapping[str, str]) -> list[str]:
    """Where values come from, lowest precedence first, as `--help` names them."""
    sources = ["dataclass defaults"]
    if default_file:
        sources.append(Path(default_file).name)
    sources.append("--config FILE|NAME ...")
    if environment:
        sources.append(" ".join(f"${variable}" for variable in environment))
    return [*sources, "key=value"]


PACKAGED_CONFIGS = ("recipes", "configs")
"""Where the packaged configs live: the `configs` folder of the installed `recipes` package (wheel or checkout)."""


def packaged_config_dir() -> Path | None:
    """The folder of the packaged configs, found without importing the recipes; None where it is not installed."""
    spec = importlib.util.find_spec(PACKAGED_CONFIGS[0])
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / PACKAGED_CONFIGS[1]
        if folder.is_dir():
            return folder
    return None


def resolve_config_file(name: str | Path) -> Path:
    """A `--config` argument as a file: an existing path as given, else a packaged config by name.

    `webrl_smollm2` and `webrl_smollm2.yaml` both name `recipes/configs/webrl_smollm2.yaml` of the installed
    package, so a command works from any folder; a path that exists wins over a packaged name.
    """
    path = Path(name).expanduser()
    if path.is_file():
        return path
    folder = packaged_config_dir()
    if folder is not None and path.parent == Path("."):
        packaged = folder / f"{path.name.removesuffix('.yaml')}.yaml"
        if packaged.is_file():
            return packaged
    names = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) if folder is not None else "none installed"
    raise ConfigError(f"config file not found: {name} (neither a file nor a packaged config: {names})")


def _merge_files(
    merged: DictConfig,
    paths: Sequence[str | Path | None],
    *,
    required: bool = True,
    set_in: dict[str, Path] | None = None,
) -> DictConfig:
    """`merged` with each YAML file of `paths` merged over it, in order; bad files are one-line errors.

    Each entry is a path or a packaged config's name (`resolve_config_file`). With `required`, a key a file sets
    to `???` has no value until a later file or an override gives one. `set_in`, when given, receives the file
    that last set each dotted key, so that a value the schema's checks refuse can be traced to its file.
    """
    for path in paths:
        if path is None:
            continue
        path = resolve_config_file(path)
        try:
            loaded = OmegaConf.load(path)
        except yaml.YAMLError as err:
            raise ConfigError(_describe_yaml_error(path, err)) from None
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        except OSError as err:  # OmegaConf's error for a top level that is a number or a boolean
            raise ConfigError(f"{path}: the top level must be a mapping of keys ({err})") from None
        if not isinstance(loaded, DictConfig):
            raise ConfigError(f"{path}: the top level must be a mapping of keys, got a {type(loaded).__name__}")
        try:
            _empty_replaced_mappings(merged, loaded)
            merged = OmegaConf.merge(merged, loaded)
        except OmegaConfBaseException as err:
            raise ConfigError(f"{path}: {_describe_error(err)}") from None
        for key in _required_keys(loaded) if required else ():
            # A merge keeps the value under a `???`, so a key a file requires would quietly keep an earlier file's
            # value (the tiny model under a paper-scale config); it is set missing again, to be given later.
            OmegaConf.update(merged, key, "???", force_add=False)
        if set_in is not None:
            set_in.update(dict.fromkeys(_leaf_keys(loaded), path))
    return merged


def _empty_replaced_mappings(merged: DictConfig, loaded: DictConfig) -> None:
    """Empty each plain mapping key of `merged` (`_is_plain_mapping`) that `loaded` gives a mapping, before the merge.

    A file's mapping replaces the key's whole, as on the command line (`_override`): merged, it would keep the
    entries of the defaults and of earlier files, so that a config.json or `--print-config` output whose
    `curriculum.judge_rules` holds fewer rules than the defaults would not load back to the config it records.
    """
    given = {
        dotted
        for key, value in _flat_unresolved(loaded).items()
        for dotted in _self_and_parents(key)
        if dotted != key or isinstance(value, dict)
    }
    for dotted in sorted(given):
        if _is_plain_mapping(_node(merged, dotted)):
            OmegaConf.update(merged, dotted, {}, merge=False)


def _self_and_parents(key: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`, `a.b.c`]."""
    parts = key.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _leaf_keys(node: DictConfig) -> list[str]:
    """The dotted keys a YAML file gives values to (an empty mapping counts as a value)."""
    return list(_flat_unresolved(node))


def _forget(set_in: dict[str, Path], key: str) -> None:
    """Drop `key` and the keys under it from `set_in`: a later source (environment, command line) set them."""
    for known in [k for k in set_in if k == key or k.startswith(key + ".")]:
        del set_in[known]


def _file_of(set_in: Mapping[str, Path], key: str) -> Path | None:
    """The file that set `key`, a key under it (a mapping's entry) or a key above it; None where none did.

    A list's item (`orm.data.solver_noise[1]`) is traced as its list, the value a file gives whole.
    """
    key = key.split("[", 1)[0]
    for known, path in set_in.items():
        if known == key or known.startswith(key + ".") or key.startswith(known + "."):
            return path
    return None


def _override(merged: DictConfig, key: str, raw: str) -> None:
    """Set `key=raw` from the command line: a mapping given to a plain mapping key replaces it, as a list does.

    `env.url_map={}` must empty the map a file gave; merging would keep every entry. A section of the schema
    (a dataclass, e.g. `actor.loss={beta: 0.5}`) still takes the given keys over its others. A string key takes
    the text as typed (`_as_typed`).
    """
    node = _node(merged, key)
    value = _as_typed(node, raw)
    replaces = isinstance(value, dict) and _is_plain_mapping(node)
    OmegaConf.update(merged, key, value, merge=not replaces, force_add=False)


def _node(config: DictConfig, key: str) -> Any:
    """The node at dotted `key`, its interpolation unresolved; None where there is none."""
    parent_key, _, leaf = key.rpartition(".")
    try:
        parent = OmegaConf.select(config, parent_key) if parent_key else config
        return parent._get_node(leaf) if isinstance(parent, DictConfig) else None
    except OmegaConfBaseException:
        return None


def _is_plain_mapping(node: Any) -> bool:
    """A `dict[...]` key of the schema (`env.url_map`), unlike a section (a dataclass) that maps keys too."""
    return isinstance(node, DictConfig) and not node._is_missing() and OmegaConf.get_type(node) is dict


def _as_typed(node: Any, raw: str) -> Any:
    """`raw` read as YAML (`_parse_value`), except where `node` is a string key and YAML reads another scalar.

    YAML 1.1 reads `no` as false, `1.10` as 1.1 and an empty value as null, which a string key would then hold
    as 'False' and '1.1' or refuse as not optional: `tracking.wandb_project=no` and `env.judge_model=1.10` mean
    the text typed, and `model.actor=` (how a shell passes `model.actor=""`) the empty value that the key's
    doc gives a meaning. A quoted string, a list or a mapping keep their YAML reading, and `null` an optional key's.
    """
    value = _parse_value(raw)
    if not isinstance(node, StringNode) or isinstance(value, (str, list, dict)):
        return value
    if value is None and node._is_optional() and raw.strip():
        return None
    return raw.strip()


def _required_keys(node: DictConfig) -> list[str]:
    """The dotted keys a YAML file sets to `???`: values its user must give (`to_object` then names each one)."""
    return [key for key, value in _flat_unresolved(node).items() if value == "???"]


def _flat_unresolved(node: DictConfig) -> dict[str, Any]:
    """`node` as `{dotted key: value}`, a missing value as `???` and an empty mapping as a value of its own.

    Interpolations stay unresolved: a file's `output_dir: runs/seed_${seed}` names a key that another file, the
    defaults or the command line give, and an `${oc.env:...}` a variable read once, when the whole config is.
    """
    return flatten(OmegaConf.to_container(node, resolve=False))


def _apply_environment(merged: DictConfig, environment: Mapping[str, str]) -> dict[str, str]:
    """Set each key whose environment variable is set and not empty; returns {key: variable} of those set."""
    applied: dict[str, str] = {}
    for variable, key in environment.items():
        raw = os.environ.get(variable, "")
        if not raw:
            continue
        try:
            OmegaConf.update(merged, key, raw, merge=True, force_add=False)
        except OmegaConfBaseException as err:
            raise ConfigError(f"${variable}={raw!r}: {_describe_error(err)}") from None
        applied[key] = variable
    return applied


def _check(config: Any, from_environment: Mapping[str, str], set_in_files: Mapping[str, Path]) -> None:
    """Every number finite, then the schema's own `validate`; an error names the variable or file that set its key."""
    try:
        finite_numbers(config)
        validate = getattr(config, "validate", None)
        if callable(validate):
            validate()
    except ConfigError as err:
        raise _traced(err, from_environment, set_in_files) from None


def _traced(err: ConfigError, from_environment: Mapping[str, str], set_in_files: Mapping[str, Path]) -> ConfigError:
    """`err` with the variable or file that set its key named, where one did (`err` itself otherwise)."""
    if err.key in from_environment:
        return ConfigError(f"{err} (from ${from_environment[err.key]})", key=err.key)
    path = _file_of(set_in_files, err.key) if err.key else None
    return ConfigError(f"{err} (set in {path})", key=err.key) if path is not None else err


def _split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """The `--config` files, in the order given, and the key=value overrides."""
    config_files: list[str] = []
    overrides: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--config":
            config_file = next(items, None)
            if config_file is None:
                raise ConfigError("--config needs a file path")
            config_files.append(config_file)
        elif item.startswith("--config="):
            config_files.append(item.split("=", 1)[1])
        elif item.startswith("--"):
            raise ConfigError(f"unknown option {item!r}: use --config FILE and key=value overrides (see --help)")
        else:
            overrides.append(item)
    return config_files, overrides


def _parse_value(raw: str) -> Any:
    """Read `raw` as YAML (numbers, booleans, null, `[a, b]` lists); a string where it is not one."""
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def _describe_error(err: OmegaConfBaseException) -> str:
    key = getattr(err, "full_key", None)
    message = str(err).splitlines()[0]
    return f"key '{key}': {message}" if key else message


def _describe_yaml_error(path: Path, err: yaml.YAMLError) -> str:
    """`file:line:column: not valid YAML: problem (context at line:column)`: PyYAML's many-line report on one line."""
    mark = getattr(err, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    context = getattr(err, "context", None)
    if context:
        start = getattr(err, "context_mark", None)
        problem += f" ({context} at {start.line + 1}:{start.column + 1})" if start else f" ({context})"
    return f"{where}: not valid YAML: {problem}"


def config_to_dict(config: Any) -> dict[str, Any]:
    """Plain nested dict of a config dataclass (for W&B and for saving beside checkpoints)."""
    return dataclasses.asdict(config)


def help_text(config: Any, usage: str = "", keys: Sequence[str] = (), sources: Sequence[str] = ()) -> str:
    """`usage`, then the values `config` holds (the ones the command would run with), grouped by section.

    `sources` names where values come from, lowest precedence first.
    """
    order = f" ({' < '.join(sources)})" if sources else ""
    settings = f"Settings as this command would run with them{order}:\n{describe(config, only=keys)}"
    return f"{usage.strip()}\n\n{settings}" if usage.strip() else settings


def describe(schema: Any, prefix: str = "", only: Sequence[str] = ()) -> str:
    """`[section] summary` then `  dotted.key = value  -- docstring` per key; `schema` is a dataclass type or instance.

    `only` keeps the keys equal to, or under, one of its dotted prefixes (all keys when empty).
    """
    instance = schema() if isinstance(schema, type) else schema
    return "\n".join(_describe_lines(instance, prefix, only))


def _describe_lines(instance: Any, prefix: str, only: Sequence[str]) -> list[str]:
    docs = _field_docs(type(instance))
    own: list[str] = []
    sections: list[str] = []
    for field in dataclasses.fields(instance):
        key = f"{prefix}{field.name}"
        value = getattr(instance, field.name)
        if dataclasses.is_dataclass(value):
            sections.extend(_describe_lines(value, f"{key}.", only))
        elif not only or any(key == kept or key.startswith(f"{kept}.") for kept in only):
            doc = " ".join(docs.get(field.name, "").split())
            own.append(f"  {key} = {value!r}  -- {doc}")
    summary = _summary(type(instance))
    if own and (prefix or summary):
        own.insert(0, f"[{prefix[:-1]}] {summary}".rstrip() if prefix else summary)
    return own + sections


def _summary(schema: type) -> str:
    """The first line of the class docstring (none for the signature that dataclasses write when it has none)."""
    doc = (schema.__doc__ or "").strip()
    if not doc or doc.startswith(f"{schema.__name__}("):
        return ""
    return doc.splitlines()[0]


def _field_docs(schema: type) -> dict[str, str]:
    """Field docstrings: the string literal right under each field, in the class body or a base class's.

    Bases come first, so a subclass that redeclares a field with its own docstring wins.
    """
    docs: dict[str, str] = {}
    for cls in reversed(schema.__mro__):
        if dataclasses.is_dataclass(cls):
            docs.update(_own_field_docs(cls))
    return docs


def _own_field_docs(schema: type) -> dict[str, str]:
    """Field docstrings written in `schema`'s own class body."""
    try:
        source = inspect.getsource(schema)
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source.lstrip() if source.startswith(" ") else source)
    docs: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for node, following in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                docs[node.target.id] = str(following.value.value).strip()
    return docs
