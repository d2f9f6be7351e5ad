"""Typed configuration: dataclass schema, YAML file, then `key=value` overrides from the command line.

Every knob is a dataclass field with a one-line docstring (the `--help` text). Loading goes through
OmegaConf's structured configs, so an unknown key or a value of the wrong type is an error, which
`load_config` re-raises as `ConfigError` naming the full dotted key and, for YAML, the file.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from webrl.config_checks import ConfigError, finite_numbers

T = TypeVar("T")


def load_config(schema: type[T], argv: Sequence[str] | None = None, *, default_file: str | Path | None = None) -> T:
    """Build a `schema` instance from `[--config FILE] [key=value ...]`.

    Precedence: dataclass defaults < `default_file` < `--config FILE` < command-line overrides.
    `--help` prints every key with its docstring and exits.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help" in argv or "-h" in argv:
        print(describe(schema))
        raise SystemExit(0)
    config_file, overrides = _split_argv(argv)
    merged: DictConfig = OmegaConf.structured(schema)
    for path in (default_file, config_file):
        if path is None:
            continue
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = OmegaConf.load(path)
        except yaml.YAMLError as err:
            raise ConfigError(_describe_yaml_error(path, err)) from None
        if not isinstance(loaded, DictConfig):
            raise ConfigError(f"{path}: the top level must be a mapping of keys, got a {type(loaded).__name__}")
        try:
            merged = OmegaConf.merge(merged, loaded)
        except OmegaConfBaseException as err:
            raise ConfigError(f"{path}: {_describe_error(err)}") from None
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value (see --help for the keys)")
        key, _, raw = item.partition("=")
        try:
            OmegaConf.update(merged, key.strip(), _parse_value(raw), merge=True, force_add=False)
        except OmegaConfBaseException as err:
            raise ConfigError(f"command-line override {item!r}: {_describe_error(err)}") from None
    try:
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise ConfigError(_describe_error(err)) from None
    finite_numbers(config)
    validate = getattr(config, "validate", None)
    if callable(validate):
        validate()
    return config  # type: ignore[return-value]


def _split_argv(argv: list[str]) -> tuple[str | None, list[str]]:
    config_file = None
    overrides: list[str] = []
    items = iter(argv)
    for item in items:
        if item == "--config":
            config_file = next(items, None)
            if config_file is None:
                raise ConfigError("--config needs a file path")
        elif item.startswith("--config="):
            config_file = item.split("=", 1)[1]
        elif item.startswith("--"):
            raise ConfigError(f"unknown option {item!r}: use --config FILE and key=value overrides (see --help)")
        else:
            overrides.append(item)
    return config_file, overrides


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


def describe(schema: Any, prefix: str = "") -> str:
    """One line per key: `dotted.key = default  -- docstring`; `schema` is a dataclass type or instance."""
    instance = schema if not isinstance(schema, type) else schema()
    docs = _field_docs(type(instance))
    lines = []
    for field in dataclasses.fields(instance):
        key = f"{prefix}{field.name}"
        value = getattr(instance, field.name)
        if dataclasses.is_dataclass(value):
            lines.append(describe(value, prefix=f"{key}."))
        else:
            lines.append(f"{key} = {value!r}  -- {docs.get(field.name, '')}")
    return "\n".join(lines)


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
