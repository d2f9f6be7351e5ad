"""Degenerate model outputs: every one parses or is rejected with ActionParseError, and none is read twice.

The parser runs on the event loop every step, so a response crafted (or sampled) to be expensive must
cost no more than one pass over it; how long that takes is measured by `bench/parser.py`, not here.
"""

from __future__ import annotations

import ast
import sys
import unicodedata

import pytest

from webrl.env.actions import MAX_RESPONSE_CHARS, ActionParseError, parse_action

CLICK = 'do(action="Click", element="3")'


def _outcome(text: str) -> tuple | str:
    """The parsed action's key, or "rejected"; any other exception fails the test that calls it."""
    try:
        return parse_action(text).key()
    except ActionParseError:
        return "rejected"


def _category_samples() -> dict[str, list[str]]:
    """The first and last code point of every Unicode general category (surrogates and unassigned included)."""
    samples: dict[str, list[str]] = {}
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        samples.setdefault(unicodedata.category(char), [char, char])[1] = char
    return samples


CATEGORY_SAMPLES = _category_samples()
# Characters with a meaning to Python's tokenizer that the category samples leave out.
SYNTAX_CHARACTERS = "\t\n\r\x0b\x0c\x1c\x85\"'\\#()=,;"


def _place_everywhere(char: str) -> None:
    """Put `char` in every part of a call; each response must parse or be rejected (nothing else)."""
    for text in [
        char,
        f"{char}{CLICK}{char}",
        f'do(action="Click",{char}element="3")',
        f'do(action="Click", element={char})',
        f'do({char}action="Click", element="3")',
        f'do{char}(action="Click", element="3")',
        f'do(action="Type", argument="{char}", element="3"{char}',
        f"do(action='Type', argument='''{char}''', element='3')",
    ]:
        _outcome(text)


def test_every_general_category_is_sampled():
    assert len(CATEGORY_SAMPLES) == 30


@pytest.mark.parametrize("category", sorted(CATEGORY_SAMPLES))
def test_characters_of_every_category_parse_or_are_rejected(category):
    for char in CATEGORY_SAMPLES[category]:
        _place_everywhere(char)
        # Inside a string literal any character is text, except those Python itself refuses there.
        typed = _outcome(f'do(action="Type", argument="a{char}b", element="3")')
        if char == "\x00" or category == "Cs":
            assert typed == "rejected", repr(char)
        else:
            assert typed == ("type", "3", f"a{char}b", None), repr(char)


@pytest.mark.parametrize("char", SYNTAX_CHARACTERS)
def test_characters_with_a_meaning_to_the_tokenizer_parse_or_are_rejected(char):
    _place_everywhere(char)


def test_nul_bytes_are_rejected_inside_the_call_and_ignored_around_it():
    assert _outcome('do(action="Click", element="3\x00")') == "rejected"
    assert _outcome('do(action="Click",\x00element="3")') == "rejected"
    assert _outcome(f"\x00\x00thinking\x00\n{CLICK}\x00") == ("click", "3", None, None)


def test_unbalanced_quotes_and_parentheses():
    for text in [
        'do(action="Click, element="3")',
        'do(action=\'Click", element="3")',
        'do(action="""Click, element="3")',
        'do(action="Click", element="3"',
        'exit(message="' + '"' * 1001,
        "(((((((" + CLICK[:-1],
    ]:
        assert _outcome(text) == "rejected", text
    # Quotes and brackets in the text around the call do not matter.
    assert _outcome(f"I don't know \"why (it\n{CLICK}") == ("click", "3", None, None)
    assert _outcome(f"{CLICK} ))) '''") == ("click", "3", None, None)
    assert _outcome('exit(message="it\'s (a) \\"test\\"")') == ("exit", None, None, 'it\'s (a) "test"')


@pytest.mark.parametrize("depth", [10, 199, 200, 400, 2000])
def test_deeply_nested_calls_are_rejected(depth):
    assert _outcome("do(" * depth + ")" * depth) == "rejected"
    assert _outcome("do(" * depth + ")" * depth + '\nexit(message="done")') == ("exit", None, None, "done")
    # Python allows 200 open brackets at once, the call's own included.
    wrapped = _outcome("exit(message=" + "(" * depth + '"x"' + ")" * depth + ")")
    assert wrapped == (("exit", None, None, "x") if depth < 200 else "rejected")


def test_parentheses_around_a_value_nest_as_deep_as_python_allows():
    assert _outcome('do(action="Click", element=' + "(" * 199 + '"3"' + ")" * 199 + ")") == ("click", "3", None, None)
    assert _outcome('do(action="Click", element=' + "(" * 200 + '"3"' + ")" * 200 + ")") == "rejected"


def test_a_response_over_the_cap_is_rejected_naming_the_cap():
    megabyte = 1 << 20
    for text in [
        'do(action="Type", argument="' + "x" * megabyte + '", element="1")',
        "do(" * (megabyte // 3),
        ")" * megabyte,
        '"' * megabyte,
        "\x00" * megabyte,
        CLICK + " " * megabyte,
    ]:
        with pytest.raises(ActionParseError, match=f"{MAX_RESPONSE_CHARS:,}"):
            parse_action(text)
    assert _outcome(" " * (MAX_RESPONSE_CHARS - len(CLICK)) + CLICK) == ("click", "3", None, None)


@pytest.mark.parametrize(
    "text",
    [
        "do(" * 60 + ")" * 60,
        "do(" * 60 + '"' + ")" * 60,
        'do(action="' * 30 + ")" * 30,
        "".join(f'do(action="Type", argument="{i})' for i in range(30)),
    ],
)
def test_each_call_is_read_at_most_once(monkeypatch, text):
    """Today's answer to a degenerate output must not be found by re-reading it once per ')'."""
    calls = []
    parse = ast.parse

    def counting_parse(source, *args, **kwargs):
        calls.append(source)
        return parse(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting_parse)
    _outcome(text)
    assert len(calls) <= text.count("do(") + text.count("exit(")


def test_a_response_of_many_overlapping_calls_is_refused_rather_than_read_again_and_again():
    # Each `do(` inside a comment reads on through every later line, so reading them all is quadratic.
    lines = ["do(", *["# do(" for _ in range(MAX_RESPONSE_CHARS // 8)], 'x="1")']
    with pytest.raises(ActionParseError, match="overlapping"):
        parse_action("\n".join(lines))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            """do(action="Type", argument='exit(message="done")', element="3")""",
            ("type", "3", 'exit(message="done")', None),
        ),
        (
            """do(action="Type", argument='do(action="Click", element="9")', element="3")""",
            ("type", "3", 'do(action="Click", element="9")', None),
        ),
        (
            'do(action="Click",  # not exit(message="x") yet\n element="3")',
            ("click", "3", None, None),
        ),
        (
            """do(action="Nap", argument='exit(message="done")', element="3")""",
            "rejected",
        ),
        # A call after the call that quotes one is still the action, as the release reads it.
        (
            """do(action="Type", argument='go_backward()', element="3")\nexit(message="done")""",
            ("exit", None, None, "done"),
        ),
    ],
)
def test_a_call_quoted_inside_another_call_is_text_not_the_action(text, expected):
    """A valid call in an argument's string used to win over the call that quotes it: a Type became an exit."""
    assert _outcome(text) == expected
