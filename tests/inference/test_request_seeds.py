"""Per-request sampling seeds: each episode step of a rollout samples from its own random stream.

One seed for a whole engine call gave every prompt of the call the same stream in vLLM (it seeds each
request with it): at each token position all episodes drew the same noise, so 6 curriculum episodes of one
template sampled byte-identical actions, and 60-task evaluations at temperature 1 succeeded on 32 tasks
under one seed and 18 under the next. These tests pin the fix down on real Chromium and a real model.
"""

from __future__ import annotations

import pytest
import torch

from webrl.data.prompts import actor_prompt_for_step
from webrl.env.miniwob import miniwob_tasks
from webrl.inference.engine import SamplingParams
from webrl.inference.hf import HFEngine
from webrl.inference.rollout import collect_rollouts, episode_keys, request_seed
from webrl.inference.scripted import ScriptedEngine


class _RecordsSeeds:
    """Wraps the scripted engine and records, per prompt, the seed each call gave it."""

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner = inner
        self.seen: list[tuple[str, int | None]] = []
        self.call_sizes: list[int] = []

    def generate(self, prompts, params):
        self.call_sizes.append(len(prompts))
        self.seen.extend(zip(prompts, params.prompt_seeds(len(prompts)), strict=True))
        return self.inner.generate(prompts, params)

    def close(self) -> None:
        self.inner.close()


def _rollout_seeds(run, pool, miniwob, concurrency: int, seed: int | None) -> tuple[dict[str, int | None], list[int]]:
    scripted = ScriptedEngine.for_miniwob()
    engine = _RecordsSeeds(scripted)
    tasks = miniwob_tasks(["login-user", "enter-text", "click-button"], seeds=[2])
    run(
        collect_rollouts(
            engine,
            tasks,
            miniwob,
            pool,
            concurrency=concurrency,
            sampling=SamplingParams(temperature=1.0, max_tokens=8, seed=seed),
            prompt_builder=scripted.wrap(actor_prompt_for_step),
            max_batch_wait_s=30.0,
            progress=False,
        )
    )
    return dict(engine.seen), engine.call_sizes


def test_each_episode_step_gets_its_own_seed_whatever_the_batching(run, pool, miniwob):
    batched, sizes = _rollout_seeds(run, pool, miniwob, concurrency=3, seed=5)
    one_by_one, single = _rollout_seeds(run, pool, miniwob, concurrency=1, seed=5)
    assert max(sizes) == 3 and max(single) == 1, "the two runs batch their prompts differently"
    # login-user 3 steps, enter-text 2, click-button 1: six prompts, six different seeds.
    assert len(batched) == 6 and len(set(batched.values())) == 6
    assert batched == one_by_one, "a step's seed depends on its episode and step, not on its batch"
    other, _ = _rollout_seeds(run, pool, miniwob, concurrency=3, seed=6)
    assert set(other.values()).isdisjoint(batched.values())


def test_an_unseeded_rollout_leaves_every_prompt_unseeded(run, pool, miniwob):
    seeds, _ = _rollout_seeds(run, pool, miniwob, concurrency=3, seed=None)
    assert set(seeds.values()) == {None}


def test_request_seed_is_a_digest_of_seed_episode_attempt_and_step():
    base = request_seed(0, "7#0", 0, 0)
    assert base == request_seed(0, "7#0", 0, 0)
    variants = {request_seed(1, "7#0", 0, 0), request_seed(0, "8#0", 0, 0), request_seed(0, "7#1", 0, 0)}
    variants |= {request_seed(0, "7#0", 1, 0), request_seed(0, "7#0", 0, 1)}
    assert base not in variants and len(variants) == 5
    assert 0 <= base < 2**31, "vLLM and torch both take it"
    assert request_seed(None, "7#0", 0, 0) is None


def test_episode_keys_number_repeated_task_ids():
    tasks = miniwob_tasks(["click-button", "click-link"], seeds=[1])
    twice = [tasks[0], tasks[1], tasks[0]]
    assert episode_keys(twice) == [f"{tasks[0].task_id}#0", f"{tasks[1].task_id}#0", f"{tasks[0].task_id}#1"]


def test_sampling_params_check_one_seed_per_prompt():
    params = SamplingParams(seed=3, seeds=[1, 2])
    assert params.prompt_seeds(2) == [1, 2]
    assert SamplingParams(seed=3).prompt_seeds(2) == [3, 3]
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        params.prompt_seeds(3)


def test_hf_engine_per_prompt_seeds_are_reproducible_and_differ_from_one_seed(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir)
    per_prompt = SamplingParams(temperature=1.0, max_tokens=12, seeds=[11] * len(prompts))
    first = [c.token_ids for c in engine.generate(prompts, per_prompt)]
    assert first == [c.token_ids for c in engine.generate(prompts, per_prompt)]
    shifted = SamplingParams(temperature=1.0, max_tokens=12, seeds=[12] + [11] * (len(prompts) - 1))
    assert first != [c.token_ids for c in engine.generate(prompts, shifted)]


def test_hf_engine_samples_a_prompt_alike_alone_or_batched_whatever_its_batch_mates_seeds(tiny_model_dir, prompts):
    """A prompt's sample depends on its prompt and seed only, as in vLLM: a resumed or re-batched rollout draws
    what the original did. One generator for the whole batch made it depend on the other prompts and their seeds."""
    engine = HFEngine(tiny_model_dir, batch_size=2)
    params = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seeds=[7, 8, 9], logprobs=True)
    completions = engine.generate(prompts, params)
    batched = [c.token_ids for c in completions]
    alone = [
        engine.generate([prompt], SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seeds=[seed]))[0].token_ids
        for prompt, seed in zip(prompts, [7, 8, 9], strict=True)
    ]
    assert batched == alone
    mates_reseeded = engine.generate(
        prompts, SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seeds=[7, 5, 6])
    )
    assert mates_reseeded[0].token_ids == batched[0]
    assert len({tuple(ids) for ids in batched}) == 3
    # Log-probabilities stay the raw model's (before temperature and top-p), one per sampled token.
    ids = torch.tensor([engine.tokenizer(prompts[0]).input_ids + batched[0]])
    with torch.no_grad():
        raw = torch.log_softmax(engine.model(input_ids=ids).logits[0, -len(batched[0]) - 1 : -1], dim=-1)  # (T, V)
    expected = raw.gather(-1, torch.tensor(batched[0]).unsqueeze(-1)).squeeze(-1).tolist()
    assert completions[0].logprobs == pytest.approx(expected, abs=1e-4)


def test_hf_engine_per_prompt_sampling_follows_the_models_warped_distribution(tiny_model_dir, prompts):
    """Over 400 seeds, the first token's frequencies match softmax(logits / T) renormalised over the top-p nucleus."""
    engine = HFEngine(tiny_model_dir)
    temperature, top_p = 0.7, 0.8
    ids = torch.tensor([engine.tokenizer(prompts[0]).input_ids])
    with torch.no_grad():
        probs = torch.softmax(engine.model(input_ids=ids).logits[0, -1] / temperature, dim=-1)  # (V,)
    ordered, order = torch.sort(probs, descending=True)
    nucleus = order[: int((torch.cumsum(ordered, 0) < top_p).sum()) + 1].tolist()
    expected = probs[nucleus] / probs[nucleus].sum()
    params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=1, seeds=list(range(400)))
    drawn = [c.token_ids[0] for c in engine.generate([prompts[0]] * 400, params)]
    assert set(drawn) <= set(nucleus)
    frequency = sum(token == nucleus[0] for token in drawn) / 400
    sigma = float(expected[0] * (1 - expected[0]) / 400) ** 0.5
    assert abs(frequency - float(expected[0])) < 4 * sigma, (frequency, float(expected[0]))
