"""The rollout batcher on its own, with recording engines and no browser: what it batches, and what an engine's
bad reply does. The episodes are stood for by `set_live` and `request`, as `_Rollout._drive` calls them."""

from __future__ import annotations

import asyncio
import time

import pytest

from webrl.inference.engine import Completion, SamplingParams
from webrl.inference.rollout import _Batcher
from webrl.inference.rollout_metrics import ActivityClock


class _Recording:
    """Answers every prompt with itself upper-cased and records the prompts of each call."""

    def __init__(self, drop_when_batched: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.drop_when_batched = drop_when_batched

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        self.calls.append(list(prompts))
        answers = [Completion(prompt.upper(), [1, 2], None, "stop") for prompt in prompts]
        return answers[:1] if self.drop_when_batched else answers

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "RecordingEngine"


async def _with_batcher(engine: _Recording, body, max_wait_s: float) -> None:
    """Run `body` beside the batch loop; the loop dying (which would stop every episode of a rollout) fails the test."""
    batcher = _Batcher(engine, SamplingParams(), ActivityClock(), max_wait_s)
    loop = asyncio.create_task(batcher.run())
    episodes = asyncio.create_task(body(batcher))
    try:
        done, _ = await asyncio.wait({loop, episodes}, timeout=20, return_when=asyncio.FIRST_COMPLETED)
        assert loop not in done, f"the batch loop died: {loop.exception()!r}"
        assert episodes in done, "the episodes' prompts were not answered in 20 s"
        episodes.result()
    finally:
        loop.cancel()
        episodes.cancel()


def test_a_prompt_whose_episode_was_cancelled_does_not_stand_in_for_a_live_episodes_prompt() -> None:
    """Three live episodes; one times out (its hard limit) while its prompt waits. The two left must be answered in
    one call: the cancelled prompt is no live episode's, so the batch still waits for the second live prompt."""
    engine = _Recording()

    async def body(batcher: _Batcher) -> None:
        batcher.set_live(+3)
        hung = asyncio.create_task(batcher.request("a", None))
        await asyncio.sleep(0.05)
        hung.cancel()
        await asyncio.sleep(0)
        batcher.set_live(-1)
        first = asyncio.create_task(batcher.request("b", None))
        await asyncio.sleep(0.3)
        second = asyncio.create_task(batcher.request("c", None))
        answers = await asyncio.gather(first, second)
        assert [answer.text for answer in answers] == ["B", "C"]

    asyncio.run(_with_batcher(engine, body, max_wait_s=5.0))
    assert engine.calls == [["b", "c"]]


def test_a_reply_missing_completions_fails_that_call_naming_the_engine_and_spares_the_run() -> None:
    """An engine that answers 2 prompts with 1 completion: the call is the engine's failure, retried prompt by prompt
    (both answered, in order), not a crash of the batch loop that would stop every episode."""
    engine = _Recording(drop_when_batched=True)

    async def body(batcher: _Batcher) -> None:
        batcher.set_live(+2)
        answers = await asyncio.gather(batcher.request("a", 1), batcher.request("b", 2))
        assert [(answer.text, answer.token_ids) for answer in answers] == [("A", [1, 2]), ("B", [1, 2])]
        assert batcher.generated_tokens == 4 and batcher.failed_calls == 0

    asyncio.run(_with_batcher(engine, body, max_wait_s=5.0))
    assert engine.calls == [["a", "b"], ["a"], ["b"]]


def test_a_single_prompt_the_engine_answers_with_nothing_fails_its_episode_with_a_message_naming_the_engine() -> None:
    class _Empty(_Recording):
        def generate(self, prompts, params):
            self.calls.append(list(prompts))
            return []

    engine = _Empty()

    async def body(batcher: _Batcher) -> None:
        batcher.set_live(+1)
        with pytest.raises(RuntimeError, match=r"^RecordingEngine returned 0 completions for 1 prompts$"):
            await batcher.request("a", None)
        assert batcher.failed_calls == 1

    asyncio.run(_with_batcher(engine, body, max_wait_s=5.0))


def test_after_a_failed_batch_only_prompts_still_awaited_are_retried() -> None:
    """The batch call fails (slowly, as a hung server's does) and two of its three episodes reach their hard limit
    meanwhile: only the third prompt is retried alone. Retrying the others would spend a server timeout each on
    answers no one reads, while the episodes' retries wait behind them."""

    class _FailsBatches(_Recording):
        def generate(self, prompts, params):
            self.calls.append(list(prompts))
            if len(prompts) > 1:
                time.sleep(1.0)
                raise ConnectionError("server hung")
            return [Completion(prompts[0].upper(), [1], None, "stop")]

    engine = _FailsBatches()

    async def body(batcher: _Batcher) -> None:
        batcher.set_live(+3)
        asked = {prompt: asyncio.create_task(batcher.request(prompt, None)) for prompt in "abc"}
        await asyncio.sleep(0.3)
        for prompt in "ac":
            asked[prompt].cancel()
        batcher.set_live(-2)
        assert (await asked["b"]).text == "B"
        assert batcher.failed_calls == 0

    asyncio.run(_with_batcher(engine, body, max_wait_s=0.05))
    assert engine.calls == [["a", "b", "c"], ["b"]]
