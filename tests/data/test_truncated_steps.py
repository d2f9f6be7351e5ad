"""A step whose response the engine cut at its token budget is trained and scored without an EOS it never produced.

Checked on the data side: the action ids of the actor's batch, the samples read back from files written before the
flag existed, and the replay filter's scorer, which gets the flags only for a batch that holds a cut step.
"""

from __future__ import annotations

from sample_records import build_trajectory

from webrl.data.collate import ActorCollator, StepTokenizer, action_token_ids
from webrl.data.replay import score_samples
from webrl.data.steps import StepSample, trajectory_to_samples
from webrl.data.trajectory import Step


def _samples(cut_steps: set[int]) -> list[StepSample]:
    trajectory = build_trajectory("t1", num_steps=3)
    for step in trajectory.steps:
        step.truncated = step.index in cut_steps
    return trajectory_to_samples(trajectory)


def test_a_cut_action_has_no_eos_and_a_finished_one_keeps_it(tiny_tokenizer):
    eos = tiny_tokenizer.eos_token_id
    text = 'do(action="Click", element="3")'
    plain = tiny_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert action_token_ids(tiny_tokenizer, text) == [*plain, eos]
    assert action_token_ids(tiny_tokenizer, text, truncated=True) == plain
    # An empty cut response keeps its EOS: every action needs a token to score.
    assert action_token_ids(tiny_tokenizer, "", truncated=True) == [eos]


def test_the_actor_batch_masks_no_eos_after_a_cut_action(tiny_tokenizer):
    samples = _samples(cut_steps={1})
    assert [s.truncated for s in samples] == [False, True, False]
    steps = StepTokenizer(tiny_tokenizer, max_length=4096)
    batch = ActorCollator(tiny_tokenizer, 4096, padding_side="right")(samples)
    eos = tiny_tokenizer.eos_token_id
    for row, sample in enumerate(samples):
        prompt, action = steps.actor_ids(sample)
        plain = tiny_tokenizer(sample.action, add_special_tokens=False)["input_ids"]
        assert action == (plain if sample.truncated else [*plain, eos])
        length = len(prompt) + len(action)
        assert batch["input_ids"][row, :length].tolist() == prompt + action
        assert int(batch["action_mask"][row].sum()) == len(action)


def test_records_written_before_the_flag_read_as_finished():
    step = Step.from_dict({"index": 0, "prompt": "p", "observation": "o", "response": "r"})
    assert step.truncated is False
    data = _samples(cut_steps=set())[0].to_dict()
    del data["truncated"]
    assert StepSample.from_dict(data).truncated is False


def test_the_replay_scorer_gets_the_flags_only_for_a_batch_with_a_cut_step():
    calls = []

    def scorer(prompts, actions, *truncated):
        calls.append(truncated)
        return [0.5] * len(prompts)

    samples = _samples(cut_steps={2})
    assert score_samples(samples, scorer, batch_size=2) == [0.5, 0.5, 0.5]
    assert calls == [(), ([True],)]
