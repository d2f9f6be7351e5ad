"""The critic's items: each distinct state of a trajectory once, tokenised as in a pair, batched by its own length."""

from __future__ import annotations

from sample_records import build_trajectory

from webrl.data.collate import CriticCollator, CriticStateCollator, StepTokenizer
from webrl.data.critic_states import critic_states
from webrl.data.datamodule import ReplayDataModule
from webrl.data.steps import trajectory_to_samples


def _rows(batch: dict, ids_key: str, mask_key: str) -> list[list[int]]:
    """The unpadded token rows of a batch."""
    pairs = zip(batch[ids_key].tolist(), batch[mask_key].tolist(), strict=True)
    return [[token for token, keep in zip(ids, mask, strict=True) if keep] for ids, mask in pairs]


def test_the_next_state_of_a_step_is_the_prompt_of_the_next_step():
    samples = trajectory_to_samples(build_trajectory("chain", num_steps=4))
    assert [s.next_prompt for s in samples[:-1]] == [s.prompt for s in samples[1:]]
    assert samples[-1].next_prompt not in {s.prompt for s in samples}


def test_each_state_of_a_trajectory_comes_once_with_its_outcome():
    success = trajectory_to_samples(build_trajectory("win", num_steps=3, outcome=1.0))
    failure = trajectory_to_samples(build_trajectory("lose", num_steps=2, outcome=0.0))
    states = critic_states(success + failure)
    # Pairs would hold 2 x (3 + 2) = 10 states; the distinct ones are s_0..s_2 and the last s' per trajectory.
    assert len(states) == 4 + 3
    expected = [s.prompt for s in success] + [success[-1].next_prompt] + [s.prompt for s in failure]
    assert [state.text for state in states] == [*expected, failure[-1].next_prompt]
    assert [state.outcome for state in states] == [1.0] * 4 + [0.0] * 3
    # Each step's s' comes first as the next state of the step before it: only a trajectory's first state is an s.
    assert [state.next_state for state in states] == [False, True, True, True, False, True, True]


def test_a_replayed_step_adds_only_the_states_its_trajectory_has_not_given():
    samples = trajectory_to_samples(build_trajectory("replayed", num_steps=3))
    assert len(critic_states(samples + samples[1:2])) == 4
    # Only the middle step replayed: its s and s' are new items.
    assert [state.text for state in critic_states(samples[1:2])] == [samples[1].prompt, samples[2].prompt]


def test_the_same_page_in_two_trajectories_stays_twice():
    first = trajectory_to_samples(build_trajectory("same", num_steps=2, outcome=1.0))
    second = trajectory_to_samples(build_trajectory("same", num_steps=2, outcome=1.0))
    assert first[0].prompt == second[0].prompt
    states = critic_states(first + second)
    assert len(states) == 6 and [state.text for state in states].count(first[0].prompt) == 2


def test_a_state_is_tokenised_as_in_a_pair_even_when_its_page_is_cut(tiny_tokenizer):
    samples = trajectory_to_samples(build_trajectory("long", num_steps=2, html_size=3000))
    pairs = CriticCollator(tiny_tokenizer, max_length=300, padding_side="right")(samples)
    states = critic_states(samples)
    batch = CriticStateCollator(tiny_tokenizer, max_length=300, padding_side="right")(states)
    assert set(batch) == {"input_ids", "attention_mask", "outcome"}
    rows = _rows(batch, "input_ids", "attention_mask")
    pair_s = _rows(pairs, "state_input_ids", "state_attention_mask")
    pair_n = _rows(pairs, "next_state_input_ids", "next_state_attention_mask")
    assert rows == [pair_s[0], pair_s[1], pair_n[1]] and pair_n[0] == pair_s[1]
    assert all(len(row) <= 300 for row in rows) and len(tiny_tokenizer(samples[0].prompt)["input_ids"]) > 300
    assert StepTokenizer(tiny_tokenizer, 300).fit_state(samples[0], next_state=True) == pair_n[0]


def test_the_critic_loader_serves_each_state_once_grouped_by_the_states_length(tiny_tokenizer):
    trajectories = [build_trajectory(f"t{i}", num_steps=1 + i % 3, html_size=40 + 300 * i) for i in range(6)]
    dm = ReplayDataModule(tiny_tokenizer, current=trajectories, batch_size=2, group_by_length=True, seed=5)
    dm.setup()
    states = dm.critic_states
    assert len(dm.dataset) == 12 and len(states) == 12 + 6  # 1+2+3+1+2+3 steps, one more state per trajectory
    loader = dm.critic_dataloader()
    assert loader.batch_sampler.lengths == [len(state.text) for state in states]
    seen = [index for batch in loader.batch_sampler for index in batch]
    assert sorted(seen) == list(range(len(states)))
    batches = list(dm.critic_dataloader())
    assert sum(b["input_ids"].shape[0] for b in batches) == len(states)
    outcomes = sorted(o for b in batches for o in b["outcome"].tolist())
    assert outcomes == sorted(state.outcome for state in states)
