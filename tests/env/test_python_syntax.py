"""Parses of actions and helper calls take turns: CPython 3.11.7 can fail two overlapping parses on threads."""

from __future__ import annotations

import ast
import threading

import pytest

from webrl.env import python_syntax
from webrl.env.actions import parse_action


def test_a_parse_waits_while_another_holds_the_parser():
    done = threading.Event()

    def parse() -> None:
        parse_action('do(action="Click", element="3")')
        done.set()

    with python_syntax._ONE_AT_A_TIME:
        worker = threading.Thread(target=parse)
        worker.start()
        assert not done.wait(0.3), "an action was parsed while another parse held the parser"
    assert done.wait(5)
    worker.join()


def test_parse_expression_reads_an_expression_and_raises_syntax_errors():
    call = python_syntax.parse_expression('f("a", 1)')
    assert isinstance(call, ast.Call) and call.func.id == "f"
    with pytest.raises(SyntaxError):
        python_syntax.parse_expression("f(")
    assert not python_syntax._ONE_AT_A_TIME.locked()
