"""Lazy re-exports: a package lists its public names and loads each one's module on first access.

`webrl.data` and `webrl.modules` re-export names whose modules pull torch, transformers or Lightning.
Importing them eagerly would make `import webrl.data` (records and prompts, pure Python) take seconds
and load a deep-learning stack that a trajectory reader never needs; PEP 562's module `__getattr__`
keeps the import free and the names where users look for them.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, resolving each name in `exports` (name -> module).

    A name is imported once, then cached on the package, so later lookups cost a dict access.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
