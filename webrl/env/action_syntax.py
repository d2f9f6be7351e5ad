"""Where a call of the action language ends in a model response, found in one pass before `ast` reads it.

`ast` reads a call exactly, but it must be given the call alone: a `)` inside a string or a comment
does not end it, and the model's text after the call is not Python. Trying `ast.parse` on every
prefix that ends in `)` finds the end, at a cost cubic in the response (400 nested `do(` took 17 s,
on the event loop that runs every episode). `CallReader` instead reads the call once, token by
token as Python's tokenizer would, and only as far as the action language goes: arguments whose
values are string or integer literals, with the parentheses, comments, line breaks and implicit
string concatenation Python allows around them. Anything else (a nested call, an expression) is
refused at its first token, so a degenerate output costs one look per call start. `ast` then reads
the span found, so an accepted call means exactly what it means in Python.
"""

from __future__ import annotations

import re


class ActionParseError(ValueError):
    """A model response that is not a valid action; the message says what is wrong with it."""


CALL_NAMES = ("exit", "do", "go_backward", "go_forward")
_CALL_HEADER = re.compile(rf"({'|'.join(CALL_NAMES)})[ \t\f]*\(")
# Between tokens inside brackets: spaces, tabs, form feeds, line breaks, comments, continuations.
_GAP = re.compile(r"(?:[ \t\f\r\n]+|#[^\r\n]*|\\(?:\r\n|\r|\n))*")
_STRING_PREFIX = r"(?:[rRuUbBfF]|[rR][bBfF]|[bBfF][rR])?"
_STRING_START = re.compile(_STRING_PREFIX + "['\"]")
# A closing quote is optional so that the match always ends where Python's tokenizer would stop reading:
# no backtracking, and an unterminated string is known (no closing group matched) with its length.
_STRING = re.compile(
    _STRING_PREFIX + r"""(?:'''(?:[^'\\]|\\.|'(?!''))*(''')?"""
    r'''|"""(?:[^"\\]|\\.|"(?!""))*(""")?'''
    r"""|'(?:[^'\\\r\n]|\\(?:\r\n|.))*(')?"""
    r"""|"(?:[^"\\\r\n]|\\(?:\r\n|.))*(")?)""",
    re.DOTALL,
)
_NUMBER = re.compile(r"[0-9][0-9A-Za-z_]*")
# A name runs to the next ASCII character that is not a letter, digit or underscore; Python decides
# later whether the non-ASCII characters in it may be in a name.
_NAME = re.compile(r"[^\x00-\x40\x5b-\x5e\x60\x7b-\x7f][^\x00-\x2f\x3a-\x40\x5b-\x5e\x60\x7b-\x7f]*")
# After a literal, these would make it part of a larger expression (attribute, call, operator).
_OPERATORS = frozenset(".([+-*/%@<>=!&|^~")
# An expression up to its end at bracket depth 0, looking one level of brackets deep.
_EXPRESSION = re.compile(r"(?:[^,()\[\]{}\r\n]|\([^()\r\n]*\)|\[[^\[\]\r\n]*\]|\{[^{}\r\n]*\})*")
# Where no expression can start: reaching one of these means the call itself is malformed.
_NOT_A_START = frozenset(",)]}=:;")


def _expression_text(text: str, start: int, limit: int = 60) -> str:
    """The expression starting at `start` (one level of brackets deep), for an error message."""
    return _EXPRESSION.match(text[start : start + limit]).group().strip()


class CallReader:
    """Reads the call that starts at `start` in `text`; `pos` tells how far it read, also after an error.

    Every scan moves `pos` to where it stopped looking, so `pos - start` is the work done.
    """

    def __init__(self, text: str, start: int) -> None:
        self.text = text
        self.start = start
        self.pos = start

    def read(self) -> str:
        """The call's text, from its name to its closing parenthesis; ActionParseError if it is not one."""
        header = _CALL_HEADER.match(self.text, self.start)
        if header is None:
            raise self._cannot_parse("the name must be followed by '(' on the same line")
        func = header.group(1)
        self.pos = header.end()
        self._skip_gap()
        while self._peek() != ")":
            self._argument(func)
            self._skip_gap()
            if self._peek() == ",":
                self.pos += 1
                self._skip_gap()
            elif self._peek() != ")":
                raise self._unexpected()
        self.pos += 1
        return self.text[self.start : self.pos]

    def _peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def _skip_gap(self) -> None:
        self.pos = _GAP.match(self.text, self.pos).end()

    def _cannot_parse(self, reason: str) -> ActionParseError:
        return ActionParseError(f"cannot parse {self.text[self.start : self.start + 120]!r} as a call ({reason})")

    def _unexpected(self, at: int | None = None) -> ActionParseError:
        at = self.pos if at is None else at
        if at >= len(self.text):
            return self._cannot_parse("missing closing parenthesis")
        return self._cannot_parse(f"unexpected {self.text[at]!r} at {self.text[at : at + 20]!r}")

    def _argument(self, func: str) -> None:
        if self.text.startswith("**", self.pos):
            raise ActionParseError(f"{func}(...) does not accept **kwargs")
        # A positional argument: exit("answer") is read as its message; nothing else takes one.
        positional_key = "message" if func == "exit" else None
        name = _NAME.match(self.text, self.pos)
        if name and not _STRING_START.match(self.text, self.pos):
            self.pos = _GAP.match(self.text, name.end()).end()
            if self._peek() != "=" or self.text.startswith("==", self.pos):
                raise self._not_a_literal(positional_key, func, name.start())
            self.pos += 1
            self._skip_gap()
            self._value(name.group(), func)
            return
        self._value(positional_key, func)

    def _value(self, key: str | None, func: str) -> None:
        """A string or integer literal, maybe concatenated and parenthesised; nothing else."""
        start = self.pos
        depth = 0
        while self._peek() == "(":
            depth += 1
            self.pos += 1
            self._skip_gap()
        if not self._literal():
            raise self._not_a_literal(key, func, start)
        for _ in range(depth):
            self._skip_gap()
            if self._peek() != ")":
                raise self._not_a_literal(key, func, start)
            self.pos += 1
        self._skip_gap()
        if self._peek() in _OPERATORS:
            raise self._not_a_literal(key, func, start)

    def _literal(self) -> bool:
        number = _NUMBER.match(self.text, self.pos)
        if number:
            self.pos = number.end()
            return True
        if not self._string():
            return False
        while True:
            self._skip_gap()
            if not self._string():
                return True

    def _string(self) -> bool:
        if not _STRING_START.match(self.text, self.pos):
            return False
        string = _STRING.match(self.text, self.pos)
        start, self.pos = self.pos, string.end()
        if string.lastindex is None:
            raise self._cannot_parse(f"unterminated string at {self.text[start : start + 20]!r}")
        return True

    def _not_a_literal(self, key: str | None, func: str, start: int) -> ActionParseError:
        if start >= len(self.text) or self.text[start] in _NOT_A_START:
            return self._unexpected(start)
        if key is None:
            return ActionParseError(f'{func}(...) takes keyword arguments only, e.g. do(action="Click", element="3")')
        return ActionParseError(
            f"argument {key!r} must be a string literal, got {_expression_text(self.text, start)!r}"
        )
