"""Curriculum text handling: the generation prompt, the task-list parser, the judge's verdict parser."""

from __future__ import annotations

import pytest

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.filters import FeasibilityJudge, judge_messages, parse_verdict
from webrl.curriculum.generation import generation_messages, parse_task_list, render_messages
from webrl.data.trajectory import Task
from webrl.inference.engine import Completion


def test_well_formed_reply_gives_one_task_per_backticked_span():
    reply = (
        "Here are some new tasks:\n"
        "- `Show me the cheapest blue mug in the Kitchen category`\n"
        "- `How many reviews does the Acme kettle have?`\n"
        "* `Add two packs of green tea to my cart` and `Find my most recent order`\n"
    )
    parsed = parse_task_list(reply)
    assert parsed.tasks == [
        "Show me the cheapest blue mug in the Kitchen category",
        "How many reviews does the Acme kettle have?",
        "Add two packs of green tea to my cart",
        "Find my most recent order",
    ]
    assert parsed.rejected == []


def test_malformed_reply_keeps_what_it_can_and_names_each_drop():
    reply = (
        "```\n"  # a code fence around the list must not shift the pairing of the spans
        "- `Find the top rated laptop under 500 dollars`\n"
        "- `List the orders placed in March 2023\n"  # unterminated: runs onto the next line
        "- ``\n"
        "- `   `\n"
        "- `mug`\n"
        '- `do(action="Click", element="3")`\n'
        "- `12345 67890 !!!!`\n"
        "- `Write a given task about mugs for me`\n"
        f"- `{'very long task ' * 30}`\n"
        '- `"Show me reviews that mention the word broken"`\n'
        "- `Compare the prices of\n"
        "the two cheapest kettles`\n"
        "```"
    )
    parsed = parse_task_list(reply, min_chars=12, max_chars=300)
    assert parsed.tasks == [
        "Find the top rated laptop under 500 dollars",
        "Show me reviews that mention the word broken",
    ]
    reasons = [reason for _, reason in parsed.rejected]
    assert reasons == [
        "multiline",
        "empty",
        "empty",
        "too_short",
        "garbage",
        "garbage",
        "garbage",
        "too_long",
        "multiline",
    ]
    assert parsed.rejected[0][0] == "List the orders placed in March 2023"
    assert parsed.rejected[-1][0] == "Compare the prices of the two cheapest kettles"


def test_a_span_over_several_lines_is_one_drop_with_its_whole_text():
    reply = (
        "- `Compare the prices of\n"
        "the two cheapest kettles\n"
        "in the Kitchen category`\n"
        "- `Find my most recent order`\n"
        "I`ve kept them short.\n"  # a stray backtick opens a span the end of the reply leaves unclosed
    )
    parsed = parse_task_list(reply)
    assert parsed.tasks == ["Find my most recent order"]
    assert parsed.rejected == [
        ("Compare the prices of the two cheapest kettles in the Kitchen category", "multiline"),
        ("ve kept them short.", "multiline"),
    ]


def test_a_stray_backtick_does_not_swallow_the_list_below_it():
    parsed = parse_task_list("Here I`ve listed them:\n- `Find my most recent order`\n- `Show the cheapest mug`")
    assert parsed.tasks == ["Find my most recent order", "Show the cheapest mug"]
    assert parsed.rejected == [("ve listed them:", "multiline")]


@pytest.mark.parametrize("reply", ["", "I cannot help with that.", "`", "``````", "\n\n- \n"])
def test_replies_without_tasks_parse_to_nothing(reply):
    assert parse_task_list(reply).tasks == []


def test_whitespace_inside_a_span_is_collapsed():
    assert parse_task_list("`Show  me\tthe   cart please`").tasks == ["Show me the cart please"]


def test_generation_prompt_lists_seeds_in_backticks_and_states_the_brief():
    config = CurriculumConfig()
    messages = generation_messages(config.site_description("shopping"), ["Buy a red mug", "Show my cart"])
    text = render_messages(messages)
    assert "- `Buy a red mug`\n- `Show my cart`\n" in text
    assert config.site_description("shopping") in text
    for phrase in ("more varied", "as hard as", "realistic", "reuse the concrete names", "wrapped in backticks"):
        assert phrase in text
    # Plain rendering: system text, then the user text, ending where the model continues.
    assert text.startswith(messages[0]["content"]) and text.endswith("\n\n")


def test_unknown_site_is_described_by_its_name():
    assert CurriculumConfig().site_description("wiki_pedia") == "the wiki pedia website"


def test_chat_template_rendering_is_used_when_the_tokenizer_has_one():
    class TemplateTokenizer:
        chat_template = "{{ messages }}"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return "".join(f"<{m['role']}>{m['content']}</{m['role']}>" for m in messages) + "<assistant>"

    text = render_messages([{"role": "user", "content": "hi"}], TemplateTokenizer())
    assert text == "<user>hi</user><assistant>"


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("The map can find routes. [YES]", True),
        ("Weather is not on the site. [NO]", False),
        ("[yes]", True),
        ("I first thought [NO] but on reflection [ YES ]", True),
        ("Reason: bookings are not supported.\nNO", False),
        ("Feasible: YES", True),
        ("YES at first, but NO", False),  # bare verdicts: the last one wins too
        ("The answer is no, I think.", None),
        ("", None),
        ("NOTE: unclear", None),
    ],
)
def test_verdict_parser(reply, verdict):
    assert parse_verdict(reply) is verdict


def test_judge_prompt_carries_the_site_rules_and_the_answer_format():
    config = CurriculumConfig()
    text = render_messages(judge_messages(config.site_description("map"), config.judge_rules["map"], "Is it raining?"))
    assert config.judge_rules["map"] in text
    assert "Task: Is it raining?" in text
    assert "[YES]" in text and "[NO]" in text


class OneReplyEngine:
    """TEST DOUBLE of `InferenceEngine` that answers a batch with a single completion, whatever its size."""

    def generate(self, prompts, params):
        return [Completion(text="[YES]", token_ids=[])]

    def close(self):
        pass


def test_a_judge_engine_returning_the_wrong_number_of_completions_is_an_error():
    judge = FeasibilityJudge(OneReplyEngine(), CurriculumConfig())
    tasks = [Task(f"t{i}", f"Find mug {i}", ["shopping"], "http://shop.test/") for i in range(2)]
    assert [verdict.feasible for verdict in judge.judge(tasks[:1])] == [True]
    with pytest.raises(RuntimeError, match="judge engine returned 1 completions for 2 prompts"):
        judge.judge(tasks)


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        ({"mode": "random"}, "curriculum.mode"),
        ({"tasks_per_phase": 0}, "curriculum.tasks_per_phase"),
        ({"seeds_per_call": -1}, "curriculum.seeds_per_call"),
        ({"value_window": (0.8, 0.2)}, "curriculum.value_window"),
        ({"value_window": (0.1,)}, "curriculum.value_window"),
        ({"top_p": 0.0}, "curriculum.top_p"),
        ({"stop": [""]}, "curriculum.stop"),
        ({"stop": "\n\n"}, "curriculum.stop"),
        ({"min_task_chars": 50, "max_task_chars": 10}, "curriculum.min_task_chars"),
        ({"max_task_chars": 0}, "curriculum.max_task_chars"),
    ],
)
def test_bad_config_names_the_key(overrides, key):
    with pytest.raises(ValueError, match="^" + key.replace(".", r"\.") + "="):
        CurriculumConfig(**overrides)
