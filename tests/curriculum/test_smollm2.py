"""LLM mode with a real pretrained generator: SmolLM2-135M-Instruct through `HFEngine` and its chat template.

A 135M model follows the format only loosely, so the config opens its reply with "- `" (the
`reply_prefix` knob for small completion models); the test asserts that the real model's reply goes
through the real parser into valid, evaluator-free tasks on the site's start page, reproducibly.
Marked slow: about 20 s on an idle 2-core machine, but minutes when the cores are shared.
"""

from __future__ import annotations

import pytest

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.curriculum import Curriculum
from webrl.curriculum.filters import dedupe_key
from webrl.curriculum.generation import GenerationRequest, parse_task_list
from webrl.data.trajectory import Task, Trajectory

pytest.importorskip("gguf", reason="converting the packaged SmolLM2 GGUF needs the gguf package")

START = "http://127.0.0.1:8000/shopping/"
SEEDS = [
    "Show me the price of the cheapest red mug",
    "Add 2 packs of green tea to my cart",
    "How many orders did I place in March 2023?",
    "Find the product rated highest in the Kitchen category",
]


@pytest.fixture(scope="module")
def engine(smollm2_dir):
    from webrl.inference.hf import HFEngine

    engine = HFEngine(smollm2_dir)
    yield engine
    engine.close()


def _phase(engine, seed: int):
    config = CurriculumConfig(
        tasks_per_phase=10,
        seeds_per_call=4,
        generation_turns=1,
        max_tokens=64,
        stop=["\n\n"],
        reply_prefix="- `",
        seed=seed,
    )
    curriculum = Curriculum(
        config, generator_engine=engine, generator_tokenizer=engine.tokenizer, start_urls={"shopping": START}
    )
    failures = [
        Trajectory(task=Task(f"s{i}", intent, ["shopping"], START + "deep"), outcome=0.0)
        for i, intent in enumerate(SEEDS)
    ]
    return curriculum, curriculum.propose(1, failures)


@pytest.mark.slow
def test_smollm2_generates_parseable_tasks(engine):
    curriculum, result = _phase(engine, seed=3)
    prompt = curriculum.generator.prompt(GenerationRequest("shopping", SEEDS))
    assert "<|im_start|>assistant" in prompt and prompt.endswith("- `")  # the model's own chat template
    (reply,) = [r["reply"] for r in result.record.replies]
    assert reply.startswith("- `") and "\n\n" not in reply
    parsed = parse_task_list(reply)
    assert parsed.tasks, f"no task parsed from the model's reply {reply!r}"
    assert result.metrics["curriculum/generated"] == len(parsed.tasks)
    # Kept = the parsed tasks that are neither a seed (the model may echo one) nor a repeat, in any order.
    seen = {dedupe_key(s) for s in SEEDS}
    expected = {dedupe_key(t): t for t in parsed.tasks if dedupe_key(t) not in seen}
    assert sorted(t.intent for t in result.tasks) == sorted(expected.values())
    for task in result.tasks:
        assert "`" not in task.intent and "\n" not in task.intent
        assert task.eval is None and task.sites == ["shopping"] and task.start_url == START
    _, again = _phase(engine, seed=3)
    assert again.record.replies == result.record.replies
