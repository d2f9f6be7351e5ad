"""WebRL's action language: `do(action="Click", element="7")`, `exit(message="…")` and friends.

The model answers with one Python-call-shaped line, optionally preceded by `# Element: …` and
`# Note: …` comment lines (docs/method.md §4.3). Like the release, parsing takes the text from the last
`exit(` or else the last `do(` occurrence, then reads it with `ast` (never `eval`), so a response
that thinks aloud before its action still parses, and text after the call (a stop token, a stray
explanation) is ignored. A call inside a string or comment of an earlier call is that call's text, not
the action: do(action="Type", argument='exit(message="x")', element="3") types it. Anything that does
not parse raises `ActionParseError`; the episode turns that into a step error the agent sees on its next
turn rather than an exception.

Any text must parse in time linear in its length, since the parser runs beside every other episode:
a response is capped at MAX_RESPONSE_CHARS, each call start is read once (`action_syntax`), and the
reads together may cover the response only a few times over; a response whose call starts overlap
more than that (calls inside comments inside calls) is refused.
"""

from __future__ import annotations

import ast
import bisect
import re
from dataclasses import dataclass
from typing import Any

from webrl.env.action_syntax import CALL_NAMES, ActionParseError, CallReader
from webrl.env.python_syntax import parse_expression

# WebRL action names (case-insensitive, spaces/underscores free) -> canonical names.
_DO_ACTIONS = {
    "click": "click",
    "type": "type",
    "search": "search",
    "hover": "hover",
    "selectdropdownoption": "select",
    "scrollup": "scroll_up",
    "scrolldown": "scroll_down",
    "pressenter": "press_enter",
    "gobackward": "go_backward",
    "goback": "go_backward",
    "goforward": "go_forward",
    "wait": "wait",
}
_NEEDS_ELEMENT = {"click", "type", "search", "hover", "select"}
_NEEDS_ARGUMENT = {"type", "search", "select"}
_BARE_CALLS = {"go_backward": "go_backward", "go_forward": "go_forward"}
_CALL_START = re.compile(rf"\b({'|'.join(CALL_NAMES)})\s*\(")

ACTION_NAMES = frozenset(_DO_ACTIONS.values()) | {"exit"}
MAX_RESPONSE_CHARS = 8192
"""Longest response parsed (512 generated tokens are about 2,000 characters); longer ones are refused."""
# How many times over the call reads may cover the response, plus a floor for short responses.
_READS_PER_CHAR = 2
_READ_FLOOR = 4096


@dataclass
class Action:
    """One parsed action. `name` is canonical (see ACTION_NAMES); `raw` is the whole response."""

    name: str
    element: str | None = None
    argument: str | None = None
    message: str | None = None
    raw: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "element": self.element,
            "argument": self.argument,
            "message": self.message,
            "raw": self.raw,
        }

    def key(self) -> tuple[str, str | None, str | None, str | None]:
        """Identity of the action without comments or formatting, for repeated-action detection."""
        return (self.name, self.element, self.argument, self.message)


def _call_starts(text: str) -> list[int]:
    """Where the action may start: each `exit(`, then each `do(`, then bare go_* calls, last first.

    The release reads from the last `exit(` (else the last `do(`); trying earlier occurrences next
    keeps a `do(` quoted inside an argument from hiding the real call.
    """
    found: dict[str, list[int]] = {}
    for match in _CALL_START.finditer(text):
        found.setdefault(match.group(1), []).append(match.start())
    starts = [start for name in CALL_NAMES for start in reversed(found.get(name, []))]
    if starts:
        return starts
    lines = [line for line in text.strip().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ActionParseError('empty response: expected a call such as do(action="Click", element="3")')
    raise ActionParseError(f"no do(...) or exit(...) call in the response: {lines[-1][:120]!r}")


def _parse_call(call_text: str) -> ast.Call:
    """Read one call's text (as `CallReader` delimited it) with Python's own parser."""
    try:
        return parse_expression(call_text)  # type: ignore[return-value]
    except (SyntaxError, ValueError) as err:
        reason = err.msg if isinstance(err, SyntaxError) else str(err)
        raise ActionParseError(f"cannot parse {call_text[:120]!r} as a call ({reason})") from None


def _literal(node: ast.expr, key: str) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int)) and not isinstance(node.value, bool):
        return str(node.value)
    raise ActionParseError(f"argument {key!r} must be a string literal, got {ast.unparse(node)!r}")


def _arguments(call: ast.Call) -> dict[str, str]:
    func = call.func.id  # type: ignore[attr-defined]
    values: dict[str, str] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ActionParseError(f"{func}(...) does not accept **kwargs")
        values[keyword.arg] = _literal(keyword.value, keyword.arg)
    if call.args:
        # exit("answer") is a common slip for exit(message="answer"); nothing else takes positionals.
        if func == "exit" and len(call.args) == 1 and "message" not in values:
            values["message"] = _literal(call.args[0], "message")
        else:
            raise ActionParseError(f'{func}(...) takes keyword arguments only, e.g. do(action="Click", element="3")')
    return values


def action_record(text: str) -> dict[str, Any]:
    """The action a response names, as a trajectory step records it (`Step.action`); ActionParseError if none.

    This is the `read_action` that `webrl.data.traces.import_trace_dir` takes.
    """
    return parse_action(text).to_dict()


class _Overlapping(ActionParseError):
    """The response's call starts overlap so much that reading them all would cost more than its allowance."""


class _Calls:
    """The calls of one response, each start read at most once, all reads within the response's allowance."""

    def __init__(self, text: str, starts: list[int]) -> None:
        self.text = text
        self.allowance = _READS_PER_CHAR * len(text) + _READ_FLOOR
        self._read: dict[int, str | ActionParseError] = {}
        self._ascending = sorted(starts)
        # _reach[i]: the furthest any call read from the first i + 1 starts (ascending) reaches.
        self._reach: list[int] = []

    def read(self, start: int) -> str | ActionParseError:
        """The call's text at `start`, or the error saying why none is there; _Overlapping once the allowance is spent.

        The error is returned, not raised: a degenerate response has thousands of starts, and raising costs.
        """
        if start not in self._read:
            if self.allowance < 0:
                raise _Overlapping("too many overlapping calls in the response to read them all")
            reader = CallReader(self.text, start)
            try:
                self._read[start] = reader.read()
            except ActionParseError as err:
                self._read[start] = err
            finally:
                self.allowance -= reader.pos - start
        return self._read[start]

    def quoted(self, start: int) -> bool:
        """Whether the call at `start` lies inside a call that starts before it, in one of its strings or comments.

        Such a call is text the agent wrote, not its action: do(action="Type", argument='exit(message="x")', …)
        types that text, it does not end the episode. Once the allowance is spent the call counts as not
        quoted, read as the release reads it.
        """
        before = bisect.bisect_left(self._ascending, start)
        while len(self._reach) < before:
            earlier = self._ascending[len(self._reach)]
            try:
                found = self.read(earlier)
            except _Overlapping:
                return False
            end = earlier if isinstance(found, ActionParseError) else earlier + len(found)
            self._reach.append(max(end, self._reach[-1] if self._reach else 0))
        return before > 0 and self._reach[before - 1] > start


def parse_action(text: str) -> Action:
    """Parse a model response into an Action; raise ActionParseError saying what is wrong.

    Candidates are tried in the release's order of preference; the first that makes a valid action
    and is not quoted inside another call wins, and when none does, the error is the one for the most
    likely candidate.
    """
    if len(text) > MAX_RESPONSE_CHARS:
        raise ActionParseError(
            f"the response has {len(text):,} characters, more than the {MAX_RESPONSE_CHARS:,} an action may have"
        )
    starts = _call_starts(text)
    calls = _Calls(text, starts)
    first_error: ActionParseError | None = None
    for start in starts:
        try:
            found = calls.read(start)
            if isinstance(found, ActionParseError):
                first_error = first_error or found
            elif not calls.quoted(start):
                return _action_from_call(_parse_call(found), text)
        except _Overlapping as err:
            raise ActionParseError(f"{first_error} (and {err})" if first_error else str(err)) from None
        except ActionParseError as err:
            first_error = first_error or err
    assert first_error is not None, "_call_starts returns at least one start, and a quoted call's enclosing one is read"
    raise first_error


def _action_from_call(call: ast.Call, text: str) -> Action:
    func = call.func.id  # type: ignore[attr-defined]
    values = _arguments(call)
    if func == "exit":
        unknown = set(values) - {"message"}
        if unknown:
            raise ActionParseError(f"exit(...) takes only message=, got {sorted(unknown)}")
        return Action(name="exit", message=values.get("message", ""), raw=text)
    if func in _BARE_CALLS:
        if values:
            raise ActionParseError(f"{func}() takes no arguments, got {sorted(values)}")
        return Action(name=_BARE_CALLS[func], raw=text)
    unknown = set(values) - {"action", "element", "argument"}
    if unknown:
        raise ActionParseError(f"do(...) got unknown arguments {sorted(unknown)}; expected action, element, argument")
    if "action" not in values:
        raise ActionParseError('do(...) needs action=, e.g. do(action="Click", element="3")')
    key = re.sub(r"[\s_-]+", "", values["action"].lower())
    if key not in _DO_ACTIONS:
        known = "Click, Type, Search, Hover, Select Dropdown Option, Scroll Up, Scroll Down, Press Enter, "
        raise ActionParseError(f"unknown action {values['action']!r}; known: {known}Go Backward, Go Forward, Wait")
    name = _DO_ACTIONS[key]
    if name in _NEEDS_ELEMENT and not values.get("element", "").strip():
        raise ActionParseError(f'{values["action"]} needs element="N" (the id of an element in the page)')
    if name in _NEEDS_ARGUMENT and "argument" not in values:
        raise ActionParseError(f'{values["action"]} needs argument="..."')
    element = values["element"].strip() if name in _NEEDS_ELEMENT else None
    argument = values.get("argument") if name in _NEEDS_ARGUMENT else None
    return Action(name=name, element=element, argument=argument, raw=text)
