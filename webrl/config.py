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
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from webrl.config_checks import ConfigError, finite_numbers

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
            _override(merged, key.strip(), _parse_value(raw))
        except OmegaConfBaseException as err:
            raise ConfigError(f"command-line override {item!r}: {_describe_error(err)}") from None
        from_environment.pop(key.strip(), None)
        _forget(set_in_files, key.strip())
    if missing := _required_keys(merged):
        raise ConfigError(f"no value for {', '.join(missing)}: a config file requires them (???); give key=value")
    try:
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise ConfigError(_describe_error(err)) from None
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


def _leaf_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """The dotted keys a YAML file gives values to (an empty mapping counts as a value)."""
    keys = []
    for key in node:
        dotted = f"{prefix}{key}"
        child = None if OmegaConf.is_missing(node, key) else node[key]
        if isinstance(child, DictConfig) and len(child):
            keys.extend(_leaf_keys(child, dotted + "."))
        else:
            keys.append(dotted)
    return keys


def _forget(set_in: dict[str, Path], key: str) -> None:
    """Drop `key` and the keys under it from `set_in`: a later source (environment, command line) set them."""
    for known in [k for k in set_in if k == key or k.startswith(key + ".")]:
        del set_in[known]


def _file_of(set_in: Mapping[str, Path], key: str) -> Path | None:
    """The file that set `key`, a key under it (a mapping's entry) or a key above it; None where none did."""
    for known, path in set_in.items():
        if known == key or known.startswith(key + ".") or key.startswith(known + "."):
            return path
    return None


def _override(merged: DictConfig, key: str, value: Any) -> None:
    """Set `key=value` from the command line: a mapping given to a plain mapping key replaces it, as a list does.

    `env.url_map={}` must empty the map a file gave; merging would keep every entry. A section of the schema
    (a dataclass, e.g. `actor.loss={beta: 0.5}`) still takes the given keys over its others.
    """
    node = OmegaConf.select(merged, key, throw_on_missing=False)
    replaces = isinstance(value, dict) and isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict
    OmegaConf.update(merged, key, value, merge=not replaces, force_add=False)


def _required_keys(node: DictConfig, prefix: str = "") -> list[str]:
    """The dotted keys a YAML file sets to `???`: values its user must give (`to_object` then names each one)."""
    keys = []
    for key in node:
        dotted = f"{prefix}{key}"
        if OmegaConf.is_missing(node, key):
            keys.append(dotted)
        elif isinstance(node[key], DictConfig):
            keys.extend(_required_keys(node[key], dotted + "."))
    return keys


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
        if err.key in from_environment:
            raise ConfigError(f"{err} (from ${from_environment[err.key]})", key=err.key) from None
        path = _file_of(set_in_files, err.key) if err.key else None
        if path is not None:
            raise ConfigError(f"{err} (set in {path})", key=err.key) from None
        raise


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
