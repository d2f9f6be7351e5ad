"""Actor and ORM prompts: exact format, HTML-only budget cuts, and rollout/training identity."""

from __future__ import annotations

import copy

from webrl.data.collate import StepTokenizer
from webrl.data.prompts import (
    ORM_SYSTEM_PROMPT,
    actor_prompt_for_step,
    build_actor_prompt,
    build_orm_prompt,
    trajectory_prompts,
)
from webrl.data.steps import trajectory_to_samples
from webrl.data.trajectory import Step, Task, Trajectory, read_trajectories, write_trajectories

U = "<|eot_id|><|start_header_id|>user<|end_header_id|>"
A = "<|eot_id|><|start_header_id|>assistant<|end_header_id|>"


def test_completion_form_matches_the_release_layout():
    prompt = build_actor_prompt("Buy milk", ["r0", "# Element: x\nr1"], "<b id=1>go</b>")
    expected = (
        "Task Instruction: Buy milk\n\n"
        f"Round 0\n\n{U}\nBuy milk\n\n{A}\nr0\n\n"
        f"Round 1\n\n{U}\n** Simplified html **\n\n{A}\n# Element: x\nr1\n\n"
        f"Round 2\n\n{U}\n<b id=1>go</b>\n\n{A}\n"
    )
    assert prompt == expected


def test_first_round_shows_the_page_not_the_intent():
    assert build_actor_prompt("Buy", [], "<p/>") == f"Task Instruction: Buy\n\nRound 0\n\n{U}\n<p/>\n\n{A}\n"


def test_budget_cuts_the_end_of_the_html_only():
    history = ["h" * 300, "k" * 200]
    prompt = build_actor_prompt("intent", history, "<html>" + "z" * 5000, max_chars=1000)
    assert len(prompt) == 1000
    assert "h" * 300 in prompt and "k" * 200 in prompt and "Task Instruction: intent" in prompt
    uncut = build_actor_prompt("intent", history, "")
    kept_html = 1000 - len(uncut)
    assert ("<html>" + "z" * 5000)[:kept_html] + f"\n\n{A}\n" in prompt


def test_history_over_budget_drops_the_html_but_keeps_history():
    prompt = build_actor_prompt("intent", ["h" * 500], "<page>", max_chars=100)
    assert "h" * 500 in prompt
    assert "<page>" not in prompt
    assert prompt == build_actor_prompt("intent", ["h" * 500], "")


def test_chat_form_renders_rounds_as_messages(chat_tokenizer):
    prompt = build_actor_prompt("Buy milk", ["r0"], "<p/>", chat_template_tokenizer=chat_tokenizer)
    expected = (
        "<|im_start|>user\nTask Instruction: Buy milk\n\nRound 0\n\nBuy milk<|im_end|>\n"
        "<|im_start|>assistant\nr0<|im_end|>\n"
        "<|im_start|>user\nRound 1\n\n<p/><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert prompt == expected


def test_chat_form_budget(chat_tokenizer):
    prompt = build_actor_prompt("i", ["r"], "q" * 10_000, max_chars=300, chat_template_tokenizer=chat_tokenizer)
    assert len(prompt) == 300
    assert prompt.endswith("<|im_end|>\n<|im_start|>assistant\n")


def _trimming_tokenizer(chat_tokenizer):
    """A copy of the ChatML tokenizer whose template trims each message, as Llama-3's (`content | trim`) does."""
    tokenizer = copy.deepcopy(chat_tokenizer)
    tokenizer.chat_template = tokenizer.chat_template.replace("message['content']", "(message['content'] | trim)")
    return tokenizer


def test_a_trimming_chat_template_keeps_the_budget(chat_tokenizer):
    tokenizer = _trimming_tokenizer(chat_tokenizer)
    for build in (build_actor_prompt, build_orm_prompt):
        prompt = build("i", ["r"], "<p>" + "q" * 10_000, max_chars=1000, chat_template_tokenizer=tokenizer)
        assert len(prompt) == 1000


def test_a_trimming_chat_template_prompt_with_a_cut_page_is_fitted_not_refused(chat_tokenizer, make_trajectory):
    """Training re-builds an over-long prompt with less page; it must recognise the step's own prompt first."""
    tokenizer = _trimming_tokenizer(chat_tokenizer)
    trajectory = make_trajectory("t", num_steps=2, html_size=3000, max_chars=1000, tokenizer=tokenizer)
    sample = trajectory_to_samples(trajectory, chat_template_tokenizer=tokenizer, max_chars=1000)[0]
    prompt_ids, action_ids = StepTokenizer(tokenizer, 300).actor_ids(sample)
    assert len(prompt_ids) + len(action_ids) <= 300
    assert tokenizer.decode(prompt_ids).startswith(sample.prompt[:200])


def test_tokenizer_without_chat_template_gives_completion_form(chat_tokenizer):
    plain = chat_tokenizer.__class__(tokenizer_object=chat_tokenizer.backend_tokenizer)
    assert not plain.chat_template
    assert build_actor_prompt("a", [], "b", chat_template_tokenizer=plain) == build_actor_prompt("a", [], "b")


def _rollout_then_rebuild(tmp_path, tokenizer):
    """Record prompts as a runner does step by step, store, then rebuild from the stored trajectory only."""
    task = Task(task_id="7", intent="Find the price of the ‘red’ mug\nand report it", sites=["shopping"], start_url="")
    trajectory = Trajectory(task=task, outcome=1.0)
    pages = ["<a id=1>Mugs é</a>" + "m" * 20_000, "<p>€12</p>\n<b id=2>buy</b>", "<p>final</p>"]
    responses = ['# Element: Mugs\ndo(action="Click", element="1")', "# Note: €12\nscroll", 'exit(message="12")']
    for i, (html, response) in enumerate(zip(pages, responses, strict=True)):
        prompt = actor_prompt_for_step(task, trajectory.steps, html, chat_template_tokenizer=tokenizer)
        trajectory.steps.append(Step(index=i, prompt=prompt, observation=html, response=response))
    path = tmp_path / "rollouts.jsonl"
    write_trajectories(path, [trajectory])
    (stored,) = read_trajectories(path)
    recorded = [step.prompt for step in stored.steps]
    for step in stored.steps:
        step.prompt = ""
    rebuilt = trajectory_prompts(stored, chat_template_tokenizer=tokenizer)
    return recorded, rebuilt


def test_training_prompt_is_byte_identical_to_the_rollout_prompt(tmp_path):
    recorded, rebuilt = _rollout_then_rebuild(tmp_path, None)
    assert [p.encode() for p in rebuilt] == [p.encode() for p in recorded]
    assert len(recorded[0]) == 16384 - 512


def test_training_prompt_identity_chat_form(tmp_path, chat_tokenizer):
    recorded, rebuilt = _rollout_then_rebuild(tmp_path, chat_tokenizer)
    assert rebuilt == recorded
    assert recorded[2].count("<|im_start|>assistant") == 3


def test_orm_prompt_completion_form():
    prompt = build_orm_prompt("Buy milk", ["# Element: a\ndo(x)", 'exit(message="ok")'], "<final/>")
    user = 'The User Intent:\nBuy milk\n\nAction History:\n# Element: a; do(x)\nexit(message="ok")\n\n'
    user += "The Current Screenshot:\n<final/>"
    expected = (
        f"<|start_header_id|>system<|end_header_id|>\n\n{ORM_SYSTEM_PROMPT}"
        f"<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n{user}{A}\n\n"
    )
    assert prompt == expected


def test_orm_prompt_budget_cuts_final_html_only(chat_tokenizer):
    for tokenizer in (None, chat_tokenizer):
        prompt = build_orm_prompt("i", ["a" * 100], "F" * 9000, max_chars=2000, chat_template_tokenizer=tokenizer)
        assert len(prompt) == 2000
        assert "a" * 100 in prompt and ORM_SYSTEM_PROMPT in prompt


def test_orm_prompt_chat_form(chat_tokenizer):
    prompt = build_orm_prompt("i", ["x\ny"], "<f/>", chat_template_tokenizer=chat_tokenizer)
    assert prompt.startswith(f"<|im_start|>system\n{ORM_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n")
    assert "Action History:\nx; y\n\nThe Current Screenshot:\n<f/><|im_end|>\n<|im_start|>assistant\n" in prompt
