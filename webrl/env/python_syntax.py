"""Python's own parser for the expressions the environment reads (actions, WebArena helper calls), one at a time.

Episodes parse their actions on worker threads (`asyncio.to_thread`), so parses can overlap. CPython 3.11
up to 3.11.7 (the version this project is tested on) keeps the depth counter that the conversion of a
parsed tree into `ast` objects checks in state that threads share, and an overlap can fail a valid parse
with `SystemError: AST constructor recursion depth mismatch`: a test's scripted episode failed so once.
A lock makes the parses take turns; each takes microseconds, so the turns cost nothing measurable.
"""

from __future__ import annotations

import ast
import threading

_ONE_AT_A_TIME = threading.Lock()


def parse_expression(text: str) -> ast.expr:
    """`ast.parse(text, mode="eval").body`, never overlapping another parse of this module's (SyntaxError as usual)."""
    with _ONE_AT_A_TIME:
        return ast.parse(text, mode="eval").body
