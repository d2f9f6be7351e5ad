"""Parsing WebRL's action language: every action, comments, trailing text, and the errors."""

from __future__ import annotations

import re

import pytest

from webrl.env.actions import ACTION_NAMES, Action, ActionParseError, parse_action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('do(action="Click", element="7")', Action("click", element="7")),
        ('do(action="Type", argument="01/01/2023", element="22")', Action("type", "22", "01/01/2023")),
        ('do(action="Search", argument="lamp", element="13")', Action("search", "13", "lamp")),
        ('do(action="Hover", element="4")', Action("hover", element="4")),
        ('do(action="Select Dropdown Option", argument="Month", element="20")', Action("select", "20", "Month")),
        ('do(action="Scroll Up")', Action("scroll_up")),
        ('do(action="Scroll Down")', Action("scroll_down")),
        ('do(action="Press Enter")', Action("press_enter")),
        ('do(action="Go backward")', Action("go_backward")),
        ('do(action="Go forward")', Action("go_forward")),
        ('do(action="Wait")', Action("wait")),
        ('exit(message="42 orders")', Action("exit", message="42 orders")),
        ("exit()", Action("exit", message="")),
        ("go_backward()", Action("go_backward")),
        # Case, spacing and an integer element id are tolerated, like the release's parser.
        ('do(action="select dropdown option", argument="Month", element=20)', Action("select", "20", "Month")),
        ('do(action="CLICK", element=" 3 ")', Action("click", element="3")),
    ],
)
def test_each_action_parses(text, expected):
    action = parse_action(text)
    assert action.key() == expected.key()
    assert action.name in ACTION_NAMES
    assert action.raw == text


def test_comments_and_text_around_the_call():
    text = '# Element: the "Go" button\n# Note: price is $12\ndo(action="Click", element="7")<|eot_id|>'
    assert parse_action(text).key() == ("click", "7", None, None)
    # The last exit( wins over earlier do( calls, and text after the call is ignored.
    text = 'do(action="Click", element="1")\nexit(message="The answer is (a)") because it says so'
    assert parse_action(text).key() == ("exit", None, None, "The answer is (a)")
    # A do( quoted inside an argument does not hide the real call.
    assert parse_action('do(action="Type", argument="do(x)", element="2")').argument == "do(x)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Python call syntax the action language inherits: comments, line breaks and continuations
        # inside the call, implicit concatenation, parentheses, integer forms, every string form.
        ('do(action="Click",  # the search box\n   element="3")', ("click", "3", None, None)),
        ('do(\n  action="Type",\n  argument="lamp",\n  element="13",\n)', ("type", "13", "lamp", None)),
        ('do(action="Click", \\\n element="3")', ("click", "3", None, None)),
        ('do(action="Click",\r\n element="3")', ("click", "3", None, None)),
        ('do(action="Cl" "ick", element=("3"))', ("click", "3", None, None)),
        ('do(action=(("Click")), element=7)', ("click", "7", None, None)),
        ('do(action="Click", element="3" "4")', ("click", "34", None, None)),
        ('do(\uff41ction="Click", element="3")', ("click", "3", None, None)),
        ('do(action="Click", element=0x10)', ("click", "16", None, None)),
        ('do(action="Click", element=1_0)', ("click", "10", None, None)),
        ('do(action="Click", element=00)', ("click", "0", None, None)),
        ('do(action="Click", element=0o17)', ("click", "15", None, None)),
        ("do(action='''Type''', argument='''two\nlines''', element='2')", ("type", "2", "two\nlines", None)),
        ('do(action="Type", argument="t\\tb \\x41 \\N{BULLET}", element="2")', ("type", "2", "t\tb A \u2022", None)),
        ('do(action=u"Click", element=r"3")', ("click", "3", None, None)),
        ('do(action="Type", argument="quote \\" inside", element="2")', ("type", "2", 'quote " inside', None)),
        ('exit(message="""He said "hi" (twice)""")', ("exit", None, None, 'He said "hi" (twice)')),
        ('exit("the answer")', ("exit", None, None, "the answer")),
        ('do(action="Fly", action="Click", element="3")', ("click", "3", None, None)),
        ('do\t(action="Click", element="3")', ("click", "3", None, None)),
        ('do\x0c(action="Click", element="3")', ("click", "3", None, None)),
        ('do( action = "Click" , element = "3" )', ("click", "3", None, None)),
        ("go_backward ( )", ("go_backward", None, None, None)),
    ],
)
def test_python_call_syntax_is_accepted(text, expected):
    assert parse_action(text).key() == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('do(action=f"Click", element="3")', "argument 'action' must be a string literal"),
        ('do(action=b"Click", element="3")', "argument 'action' must be a string literal"),
        ('do(action="Click", element=1.0)', "argument 'element' must be a string literal"),
        ('do(action="Click", element=-1)', "argument 'element' must be a string literal"),
        ('do(action="Click", element=None)', "argument 'element' must be a string literal"),
        ('do(action="Click", element=("3",))', "argument 'element' must be a string literal"),
        ('do(**{"action": "Click"})', "does not accept **kwargs"),
        ("exit(message=x)", "argument 'message' must be a string literal"),
        ('do\n(action="Click", element="3")', "cannot parse"),
        ('do\x0b(action="Click", element="3")', "cannot parse"),
        ('do(action="Click", element="3",,)', "cannot parse"),
        ('do(action="Click" element="3")', "cannot parse"),
        ('exit(message="a", "b")', "cannot parse"),
        ("do(action='Click\n', element='3')", "cannot parse"),
        ('do(action="Click", element=07)', "cannot parse"),
    ],
)
def test_what_python_would_not_make_a_literal_call_is_rejected(text, message):
    with pytest.raises(ActionParseError, match=re.escape(message)):
        parse_action(text)


def test_to_dict_round_trips_the_fields():
    action = parse_action('do(action="Type", argument="hi", element="5")')
    assert action.to_dict() == {
        "name": "type",
        "element": "5",
        "argument": "hi",
        "message": None,
        "raw": 'do(action="Type", argument="hi", element="5")',
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty response"),
        ("# Element: nothing", "empty response"),
        ("click the button 7", "no do(...) or exit(...) call"),
        ('do(action="Fly", element="1")', "unknown action 'Fly'"),
        ('do(action="Right Click", element="1")', "unknown action 'Right Click'"),
        ('do(action="Click")', 'Click needs element="N"'),
        ('do(action="Type", element="3")', 'Type needs argument="..."'),
        ('do(action="Click", element="3"', "missing closing parenthesis"),
        ("do(action=Click, element='3')", "argument 'action' must be a string literal"),
        ('do(element="3")', "do(...) needs action="),
        ('do(action="Click", elem="3")', "unknown arguments ['elem']"),
        ('exit(message="a", score="1")', "exit(...) takes only message="),
        ('do("Click", "3")', "keyword arguments only"),
        ('go_backward(steps="2")', "takes no arguments"),
    ],
)
def test_malformed_responses_raise_with_the_reason(text, message):
    with pytest.raises(ActionParseError, match=re.escape(message)):
        parse_action(text)


def test_parsing_never_evaluates_code():
    with pytest.raises(ActionParseError):
        parse_action('do(action=__import__("os").system("echo hacked"), element="1")')
