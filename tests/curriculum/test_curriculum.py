"""Curriculum phases end to end with hand-made replies and critic values: filters, dedupe, balance, resume.

The generator and judge here are `ScriptedReplyEngine`, a TEST DOUBLE of the engine protocol that
answers from a function of the prompt and the sampling seed, so that every expected task is known.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re

import pytest

from webrl.curriculum.config import CurriculumConfig
from webrl.curriculum.curriculum import Curriculum
from webrl.curriculum.page_facts import HeldOutFacts
from webrl.curriculum.state import CurriculumState
from webrl.data.trajectory import Task, Trajectory
from webrl.env.splits import load_split
from webrl.inference.engine import Completion, SamplingParams

SITES = {"shopping": "http://shop.test/", "gitlab": "http://git.test/", "map": "http://map.test/"}


class ScriptedReplyEngine:
    """TEST DOUBLE of `InferenceEngine`: `reply(prompt, params)` decides each completion; calls are logged.

    As vLLM and an OpenAI server do, it samples each prompt with that prompt's own seed (`prompt_seeds`):
    `reply` sees the call's params with `seed` set to the prompt's.
    """

    def __init__(self, reply):
        self.reply = reply
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, prompts, params):
        self.calls.append((list(prompts), params))
        own = [dataclasses.replace(params, seed=seed, seeds=None) for seed in params.prompt_seeds(len(prompts))]
        return [Completion(text=self.reply(p, q), token_ids=[]) for p, q in zip(prompts, own, strict=True)]

    def close(self):
        pass


def seeds_in(prompt: str) -> list[str]:
    return re.findall(r"^- `(.+)`$", prompt, flags=re.MULTILINE)


def evolve(prompt: str, params: SamplingParams) -> str:
    """Two new tasks per seed shown, whose wording depends on the sampling seed."""
    tag = params.seed % 997
    return "\n".join(f"- `{seed} variant {tag} {i}`" for seed in seeds_in(prompt) for i in "ab")


def failed(intent: str, site: str, task_id: str = "", **task) -> Trajectory:
    task = Task(task_id=task_id or intent, intent=intent, sites=[site], start_url=SITES[site] + "deep", **task)
    return Trajectory(task=task, outcome=0.0, status="exit")


def phase_inputs(n_per_site: dict[str, int], tag: str = "") -> list[Trajectory]:
    trajectories = [
        failed(f"{site} seed task number {i} {tag}".strip(), site) for site, n in n_per_site.items() for i in range(n)
    ]
    trajectories.append(Trajectory(task=Task("ok", "a task the agent solved", ["map"], SITES["map"]), outcome=1.0))
    return trajectories


def make(config: CurriculumConfig, reply=evolve, **kwargs) -> tuple[Curriculum, ScriptedReplyEngine]:
    engine = ScriptedReplyEngine(reply)
    return Curriculum(config, generator_engine=engine, start_urls=SITES, **kwargs), engine


def test_llm_phase_builds_tasks_from_failed_seeds_only():
    config = CurriculumConfig(tasks_per_phase=100, seeds_per_call=2, generation_turns=2, seed=3)
    curriculum, engine = make(config)
    result = curriculum.propose(1, phase_inputs({"shopping": 3, "gitlab": 1}))
    prompts, params = engine.calls[0]
    assert len(engine.calls) == 1 and len(prompts) == 4  # one batch: 2 sites x 2 turns
    assert (params.temperature, params.top_p, params.max_tokens) == (1.0, 1.0, config.max_tokens)
    assert [len(seeds_in(p)) for p in prompts] == [1, 1, 2, 2]  # gitlab has a single failure
    assert all("solved" not in p for p in prompts)
    shown = [s for p in prompts for s in seeds_in(p)]
    # Each call samples with its own seed, so every call's tasks are new (gitlab's two turns show the same seed);
    # all are evaluator-free, on the site's start page.
    assert len(result.tasks) == len(shown) * 2
    for task in result.tasks:
        assert task.eval is None and not task.has_evaluator
        assert task.start_url == SITES[task.site]
        assert task.extra["curriculum"]["origin"] == "llm"
    assert [t.task_id for t in result.tasks] == [f"curriculum-p1-{i:04d}" for i in range(len(result.tasks))]
    assert result.metrics["curriculum/seeds"] == 4.0
    assert result.metrics["curriculum/generated"] == 2.0 * len(shown)
    assert result.metrics["curriculum/kept"] == len(result.tasks)


def test_each_generation_call_samples_with_its_own_seed():
    # A site with one failure shows that failure in both of its turns: the calls are the same prompt, and an
    # engine that seeds per request would give both the same reply if they shared one seed.
    curriculum, engine = make(CurriculumConfig(tasks_per_phase=100, generation_turns=2, seed=3))
    result = curriculum.propose(1, phase_inputs({"gitlab": 1}))
    prompts = engine.calls[0][0]
    assert prompts[0] == prompts[1]
    first, second = (reply["reply"] for reply in result.record.replies)
    assert first != second
    assert len(result.tasks) == 4 and result.metrics["curriculum/rejected_duplicate"] == 0.0
    again, _ = make(CurriculumConfig(tasks_per_phase=100, generation_turns=2, seed=3))
    assert [t.intent for t in again.propose(1, phase_inputs({"gitlab": 1})).tasks] == [t.intent for t in result.tasks]


def test_critic_window_filter_on_hand_made_values():
    values = {"A": 0.05, "B": 0.75, "C": 0.0499, "D": 0.7501, "E": 0.4, "F": 0.9}
    reply = "\n".join(f"- `Open the page of item {key} please`" for key in values)
    config = CurriculumConfig(tasks_per_phase=10, generation_turns=1)
    opened = []
    curriculum, _ = make(
        config,
        reply=lambda prompt, params: reply,
        start_observation=lambda task: opened.append(task.start_url) or "<button id='1'> Go </button>",
    )
    prompts_seen = []

    def critic(prompts):
        prompts_seen.extend(prompts)
        return [values[re.search(r"item (\w)", p).group(1)] for p in prompts]

    result = curriculum.propose(1, phase_inputs({"shopping": 1}), critic=critic)
    kept = sorted(re.search(r"item (\w)", t.intent).group(1) for t in result.tasks)
    assert kept == ["A", "B", "E"]
    reasons = {re.search(r"item (\w)", r["intent"]).group(1): r["reason"] for r in result.record.rejected}
    assert reasons == {"C": "critic_low", "D": "critic_high", "F": "critic_high"}
    # The rejected ones keep their value, so the report can draw kept against rejected.
    assert {r["value"] for r in result.record.rejected} == {0.0499, 0.7501, 0.9}
    assert result.metrics["curriculum/rejected_critic"] == 3.0
    assert result.metrics["curriculum/critic_value_mean"] == pytest.approx(sum(values.values()) / 6)
    # The critic reads the round-0 actor prompt of the start page, fetched once per start URL.
    assert opened == [SITES["shopping"]]
    assert all("Round 0" in p and "<button id='1'> Go </button>" in p for p in prompts_seen)
    assert {t.extra["curriculum"]["critic_value"] for t in result.tasks} == {0.05, 0.75, 0.4}


def test_critic_needs_a_start_observation():
    curriculum, _ = make(CurriculumConfig())
    with pytest.raises(ValueError, match="start_observation"):
        curriculum.propose(1, phase_inputs({"shopping": 1}), critic=lambda prompts: [0.5] * len(prompts))


def test_dedupe_against_training_tasks_seeds_earlier_phases_and_the_batch():
    reply = (
        "- `Find the blue kettle`\n"  # a registered training task, in other case and punctuation
        "- `Shopping seed task number 0!`\n"  # the seed itself
        "- `Compare two kettles by price`\n"
        "- `compare two  kettles by price.`\n"  # same phase, same task
        "- `Show the newest review of the kettle`"
    )
    curriculum, _ = make(CurriculumConfig(tasks_per_phase=10, generation_turns=1), reply=lambda p, s: reply)
    curriculum.register_tasks([Task("t1", "find the Blue kettle.", ["shopping"], SITES["shopping"])])
    first = curriculum.propose(1, phase_inputs({"shopping": 1}))
    assert sorted(t.intent for t in first.tasks) == [
        "Compare two kettles by price",
        "Show the newest review of the kettle",
    ]
    assert first.metrics["curriculum/rejected_duplicate"] == 3.0
    assert first.metrics["curriculum/duplicate_rate"] == pytest.approx(3 / 5)
    second = curriculum.propose(2, phase_inputs({"shopping": 1}, tag="again"))
    assert second.tasks == []  # every reply repeats a task given in phase 1 or before
    assert second.metrics["curriculum/duplicate_rate"] == 1.0


def test_generated_tasks_that_differ_in_a_symbol_are_both_kept():
    reply = (
        "- `Apply a $10 discount to order 5`\n- `Apply a 10% discount to order 5`\n- `apply a $10 discount to order 5.`"
    )
    curriculum, _ = make(CurriculumConfig(tasks_per_phase=10, generation_turns=1), reply=lambda p, s: reply)
    result = curriculum.propose(1, phase_inputs({"shopping": 1}))
    assert sorted(t.intent for t in result.tasks) == [
        "Apply a $10 discount to order 5",
        "Apply a 10% discount to order 5",
    ]
    assert result.metrics["curriculum/rejected_duplicate"] == 1.0


def test_a_generated_task_that_a_held_out_task_asks_is_refused():
    # The generator writes a test-split task of the embedded sites word for word (in other case and punctuation).
    test_task = next(t for t in load_split("test") if t.site == "shopping")
    reply = f"- `{test_task.intent.upper()}!`\n- `Compare two kettles by price`"
    curriculum, _ = make(
        CurriculumConfig(tasks_per_phase=10, generation_turns=1),
        reply=lambda prompt, params: reply,
        held_out=HeldOutFacts(load_split("test")),
    )
    result = curriculum.propose(1, phase_inputs({"shopping": 1}))
    assert [t.intent for t in result.tasks] == ["Compare two kettles by price"]
    assert [(r["intent"], r["reason"]) for r in result.record.rejected] == [
        (f"{test_task.intent.upper()}!", "held_out")
    ]
    assert result.metrics["curriculum/rejected_held_out"] == 1.0
    assert not curriculum.state.is_seen(test_task.intent)


def test_keep_k_balanced_across_sites_round_robin():
    counts = {"shopping": 10, "gitlab": 5, "map": 1}

    def reply(prompt, params):
        site = next(s for s in SITES if f"seed for {s}" in prompt)
        return "\n".join(f"- `Generated {site} task number {i}`" for i in range(counts[site]))

    config = CurriculumConfig(tasks_per_phase=9, generation_turns=1)
    curriculum, _ = make(config, reply=reply)
    trajectories = [failed(f"The seed for {site} here", site) for site in SITES]
    result = curriculum.propose(1, trajectories)
    sites = [t.site for t in result.tasks]
    assert sites == ["gitlab", "map", "shopping", "gitlab", "shopping", "gitlab", "shopping", "gitlab", "shopping"]
    assert result.metrics["curriculum/gitlab/kept"] == 4.0
    assert result.metrics["curriculum/map/kept"] == 1.0
    assert result.metrics["curriculum/shopping/kept"] == 4.0
    assert result.metrics["curriculum/shopping/generated"] == 10.0
    assert result.metrics["curriculum/unused"] == 16 - 9


def test_judge_rejects_infeasible_and_unparsed_and_the_site_gets_its_turn_back():
    def reply(prompt, params):
        task = re.search(r"^Task: (.*)$", prompt, flags=re.MULTILINE)
        if task is not None:
            assert params.temperature == 0.0
            if "weather" in task.group(1):
                return "The map has no weather data. [NO]"
            if "mumble" in task.group(1):
                return "Hmm, hard to say."
            return "This is supported. [YES]"
        if "seed for map" in prompt:
            return "\n".join(
                [
                    "- `Show the weather at the city museum`",
                    "- `Route from the museum to the zoo`",
                    "- `mumble about the zoo`",
                ]
            )
        return "- `Star the project named alpha`\n- `Open the issues of project beta`"

    # K=4 > the 3 feasible tasks: whatever order the map queue was shuffled in, every map task gets judged,
    # because each refusal hands the map its turn back.
    config = CurriculumConfig(tasks_per_phase=4, generation_turns=1, judge=True)
    curriculum, engine = make(config, reply=reply)
    trajectories = [failed(f"The seed for {site} here", site) for site in ("gitlab", "map")]
    result = curriculum.propose(1, trajectories)
    assert sorted(t.intent for t in result.tasks) == [
        "Open the issues of project beta",
        "Route from the museum to the zoo",
        "Star the project named alpha",
    ]
    assert sorted(r["reason"] for r in result.record.rejected) == ["infeasible", "judge_unparsed"]
    assert result.metrics["curriculum/rejected_judge"] == 2.0
    judge_prompts = [p for prompts, _ in engine.calls[1:] for p in prompts]
    assert len(judge_prompts) == 5
    map_prompts = [p for p in judge_prompts if "museum" in p or "zoo" in p]
    assert len(map_prompts) == 3 and all(config.judge_rules["map"] in p for p in map_prompts)


def test_judge_refusals_do_not_unbalance_the_sites():
    def reply(prompt, params):
        task = re.search(r"^Task: (.*)$", prompt, flags=re.MULTILINE)
        if task is not None:
            return "[NO]" if "weather" in task.group(1) else "[YES]"
        if "seed for map" in prompt:
            places = ["museum", "zoo", "park", "library", "harbour"]
            return "\n".join(
                f"- `Show the {'weather' if i < 2 else 'route'} near the {p}`" for i, p in enumerate(places)
            )
        return "\n".join(f"- `Star the project named {name}`" for name in ("alpha", "beta", "gamma", "delta", "omega"))

    config = CurriculumConfig(tasks_per_phase=6, generation_turns=1, judge=True, seed=1)
    curriculum, _ = make(config, reply=reply)
    result = curriculum.propose(1, [failed(f"The seed for {site} here", site) for site in ("gitlab", "map")])
    assert [t.site for t in result.tasks].count("map") == 3  # every feasible map task, despite two refusals
    assert [t.site for t in result.tasks].count("gitlab") == 3


def test_separate_judge_engine_and_template_seeds_without_a_template():
    judge = ScriptedReplyEngine(lambda prompt, params: "Fine. [YES]")
    config = CurriculumConfig(mode="mixed", tasks_per_phase=10, generation_turns=1, judge=True)
    variants = []

    def reinstantiate(task, rng, n):
        new = [
            Task(f"v{i}", f"{task.intent} in colour {rng.randrange(100)}", task.sites, task.start_url) for i in range(n)
        ]
        variants.extend(new)
        return new

    curriculum, generator = make(config, judge_engine=judge, reinstantiate=reinstantiate)
    templated = failed("Buy the mug named alpha", "shopping", intent_template_id=7)
    result = curriculum.propose(1, [templated, failed("Buy the mug named beta", "shopping")])
    assert len(generator.calls) == 1  # generation only: the judge has its own engine
    judged = [p for prompts, _ in judge.calls for p in prompts]
    assert len(judged) == 4 and all("variant" in p for p in judged)  # LLM-made tasks only, not template ones
    kept_templates = [t.intent for t in result.tasks if t.extra["curriculum"]["origin"] == "template"]
    assert sorted(kept_templates) == sorted(v.intent for v in variants)
    assert len(variants) == config.variants_per_seed
    assert [r["intent"] for r in result.record.rejected if r["reason"] == "no_template"] == ["Buy the mug named beta"]
    assert result.metrics["curriculum/rejected_no_template"] == 1.0


def test_phase_already_covered_is_an_error():
    curriculum, _ = make(CurriculumConfig())
    curriculum.propose(1, phase_inputs({"shopping": 1}))
    with pytest.raises(ValueError, match="already covers phase 1"):
        curriculum.propose(1, phase_inputs({"shopping": 1}))


def test_modes_check_their_dependencies():
    with pytest.raises(ValueError, match="generator engine"):
        Curriculum(CurriculumConfig(mode="llm"))
    with pytest.raises(ValueError, match="reinstantiate"):
        Curriculum(CurriculumConfig(mode="mixed"), generator_engine=ScriptedReplyEngine(evolve))


def test_resume_repeats_the_phase_exactly(tmp_path):
    config = CurriculumConfig(tasks_per_phase=7, seeds_per_call=3, generation_turns=2, seed=11)
    first, _ = make(config)
    first.register_tasks([Task("t0", "A training task", ["map"], SITES["map"])])
    first.propose(1, phase_inputs({"shopping": 5, "gitlab": 4, "map": 2}))
    first.state.save(tmp_path / "phase_001")
    inputs = phase_inputs({"shopping": 6, "gitlab": 3, "map": 4}, tag="p2")
    original = first.propose(2, inputs)
    first.state.save(tmp_path / "phase_002")

    resumed, _ = make(config, state=CurriculumState.load(tmp_path / "phase_001"))
    shuffled = list(inputs)
    random.Random(5).shuffle(shuffled)  # the order trajectories are read in must not matter
    again = resumed.propose(2, shuffled)
    assert [t.to_dict() for t in again.tasks] == [t.to_dict() for t in original.tasks]
    assert again.metrics == original.metrics
    assert resumed.state.seen == first.state.seen
    assert len(original.tasks) == 7

    other_seed, _ = make(
        CurriculumConfig(**{**vars(config), "seed": 12}), state=CurriculumState.load(tmp_path / "phase_001")
    )
    assert [t.intent for t in other_seed.propose(2, inputs).tasks] != [t.intent for t in original.tasks]


def test_state_file_round_trip_and_errors(tmp_path):
    curriculum, _ = make(CurriculumConfig(tasks_per_phase=3))
    result = curriculum.propose(1, phase_inputs({"shopping": 2}))
    path = curriculum.state.save(tmp_path / "p1")
    assert path == tmp_path / "p1" / "curriculum_state.json"  # the name the phase loop looks for
    data = json.loads(path.read_text())
    assert data["phase"] == 1 and data["record"]["metrics"] == result.metrics
    assert {"seeds", "generated", "kept", "rejected", "replies"} <= set(data["record"])
    loaded = CurriculumState.load(tmp_path / "p1")
    assert loaded.record.kept_tasks() == result.tasks
    assert not list((tmp_path / "p1").glob("*.tmp"))
    path.write_text("{not json")
    with pytest.raises(ValueError, match=re.escape(str(path))):
        CurriculumState.load(tmp_path / "p1")
    with pytest.raises(FileNotFoundError, match="no curriculum state"):
        CurriculumState.load(tmp_path / "missing")


def test_template_cap_leaves_tasks_without_a_template_alone():
    # LLM-made tasks carry no intent template: a cap of 1 must not reduce them to one.
    result = make(CurriculumConfig(tasks_per_phase=100, max_per_template=1, generation_turns=1))[0].propose(
        1, phase_inputs({"shopping": 3})
    )
    assert len(result.tasks) == 6
    assert result.metrics["curriculum/rejected_template_cap"] == 0.0
