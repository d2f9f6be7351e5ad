"""Replay buffer durability and the experience filter on hand-made probabilities."""

from __future__ import annotations

import json

import pytest
import torch
from sample_records import build_trajectory

from webrl.data.replay import (
    ReplayBuffer,
    ReplayFilterConfig,
    filter_by_perplexity,
    score_samples,
    select_successes,
)
from webrl.data.steps import mc_returns, trajectory_to_samples


def test_buffer_stores_phases_and_reopens_from_disk(tmp_path, make_trajectory):
    buffer = ReplayBuffer(tmp_path / "replay")
    phase0 = [make_trajectory("a", orm_score=0.9, orm_reward=1.0, eval_reward=0.0), make_trajectory("b", outcome=0.0)]
    phase1 = [make_trajectory("c", num_steps=2, phase=1)]
    buffer.add_phase(0, phase0)
    buffer.add_phase(1, phase1)
    assert (tmp_path / "replay" / "phase_000" / "trajectories.jsonl").is_file()
    reopened = ReplayBuffer(tmp_path / "replay")
    assert reopened.phases() == [0, 1]
    assert reopened.trajectories(0) == phase0
    assert reopened.trajectories() == phase0 + phase1
    assert reopened.trajectories(0)[0].orm_score == 0.9 and reopened.trajectories(0)[0].eval_reward == 0.0
    expected = {"file": "phase_000/trajectories.jsonl", "trajectories": 2, "steps": 6, "successes": 1}
    assert reopened.stats()[0] == expected
    assert len(reopened) == 3
    manifest = json.loads((tmp_path / "replay" / "manifest.json").read_text())
    assert sorted(manifest["phases"]) == ["0", "1"]


def test_buffer_refuses_to_overwrite_a_phase_unless_asked(tmp_path, make_trajectory):
    buffer = ReplayBuffer(tmp_path)
    buffer.add_phase(0, [make_trajectory("a")])
    with pytest.raises(ValueError, match="phase 0 is already stored"):
        buffer.add_phase(0, [make_trajectory("b")])
    buffer.add_phase(0, [make_trajectory("b")], overwrite=True)
    assert [t.task.task_id for t in ReplayBuffer(tmp_path).trajectories(0)] == ["b"]
    with pytest.raises(KeyError, match="no phase 3"):
        buffer.trajectories(3)


def test_a_negative_phase_is_refused(tmp_path, make_trajectory):
    with pytest.raises(ValueError, match="phase must be >= 0, got -1"):
        ReplayBuffer(tmp_path).add_phase(-1, [make_trajectory("a")])


def test_phase_file_without_manifest_entry_is_not_a_phase(tmp_path, make_trajectory):
    buffer = ReplayBuffer(tmp_path)
    buffer.add_phase(0, [make_trajectory("a")])
    # A crash after writing phase 1's file but before the manifest: phase 1 does not exist yet.
    (tmp_path / "phase_001").mkdir()
    (tmp_path / "phase_001" / "trajectories.jsonl").write_text("")
    assert ReplayBuffer(tmp_path).phases() == [0]


def test_corrupt_manifest_is_an_error_naming_it(tmp_path):
    (tmp_path / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match=r"manifest\.json: not valid JSON"):
        ReplayBuffer(tmp_path)


def test_a_manifest_of_another_version_is_an_error_naming_it(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"version": 2, "phases": {}}))
    with pytest.raises(ValueError, match=r"manifest\.json: not a replay manifest of version 1"):
        ReplayBuffer(tmp_path)


def test_mc_returns_match_hand_computed_values():
    # success of 3 steps, outcome on every step (the release's broadcast): 1 + .9 + .81, 1 + .9, 1
    assert mc_returns([1.0, 1.0, 1.0], 0.9) == pytest.approx([2.71, 1.9, 1.0])
    assert mc_returns([0.0, 0.0], 0.9) == [0.0, 0.0]
    assert mc_returns([0.0, 0.0, 1.0], 0.9) == pytest.approx([0.81, 0.9, 1.0])  # sparse: outcome on the last step


def test_samples_follow_release_conventions(make_trajectory):
    trajectory = make_trajectory("a", num_steps=3, outcome=1.0)
    samples = trajectory_to_samples(trajectory)
    assert [s.reward for s in samples] == [1.0, 1.0, 1.0]
    assert [s.done for s in samples] == [False, False, True]
    assert [s.prompt for s in samples] == [step.prompt for step in trajectory.steps]
    assert samples[0].next_prompt == trajectory.steps[1].prompt
    last = samples[-1]
    assert last.next_html == last.html == trajectory.steps[-1].observation
    assert last.next_prompt.endswith(f"{last.action}\n\nRound 3\n\n" + last.next_prompt.split("Round 3\n\n")[1])
    assert last.history == [s.response for s in trajectory.steps[:2]]


def test_unlabelled_trajectory_is_an_error_naming_it(make_trajectory):
    trajectory = make_trajectory("nolabel", outcome=None)
    with pytest.raises(ValueError, match="task nolabel.* has no outcome"):
        trajectory_to_samples(trajectory)


def test_select_successes_keeps_first_success_per_intent(make_trajectory):
    trajectories = [
        make_trajectory("1", intent="same", outcome=0.0),
        make_trajectory("2", intent="same", outcome=1.0),
        make_trajectory("3", intent="same", outcome=1.0),
        make_trajectory("4", intent="other", outcome=None, orm_reward=1.0),
        make_trajectory("5", intent="third", outcome=0.4),
    ]
    assert [t.task.task_id for t in select_successes(trajectories)] == ["2", "4"]
    assert [t.task.task_id for t in select_successes(trajectories, first_per_task=False)] == ["2", "3", "4"]


class TableScorer:
    """Hand-made probabilities keyed by action text; records what it was asked to score."""

    def __init__(self, table: dict[str, float]) -> None:
        self.table = table
        self.batches: list[int] = []
        self.seen: list[str] = []

    def __call__(self, prompts: list[str], actions: list[str]) -> list[float]:
        self.batches.append(len(actions))
        self.seen.extend(actions)
        return [self.table[a] for a in actions]


def _experience(make_trajectory, probabilities):
    """One successful one-step trajectory per probability, plus a failure that must never be scored."""
    trajectories = []
    for i in range(len(probabilities)):
        trajectories.append(make_trajectory(f"s{i}", num_steps=1, outcome=1.0))
    trajectories.append(make_trajectory("fail", num_steps=1, outcome=0.0))
    table = {t.steps[0].response: p for t, p in zip(trajectories, probabilities, strict=False)}
    return trajectories, table


def test_filter_keeps_exactly_the_window(make_trajectory):
    probabilities = [0.5, 0.5000001, 0.7, 0.95, 0.9500001, 0.2, 0.99, 0.51]
    trajectories, table = _experience(make_trajectory, probabilities)
    scorer = TableScorer(table)
    kept = filter_by_perplexity(trajectories, scorer, current_steps=100, batch_size=3)
    assert sorted(s.score for s in kept) == [0.5000001, 0.51, 0.7, 0.95]
    assert all(s.reward == 1.0 and s.done for s in kept)
    assert "fail" not in " ".join(scorer.seen)
    assert scorer.batches == [3, 3, 2]


def test_filter_window_bounds_are_configurable(make_trajectory):
    trajectories, table = _experience(make_trajectory, [0.5, 0.7, 0.95])
    config = ReplayFilterConfig(low_inclusive=True, high_inclusive=False)
    kept = filter_by_perplexity(trajectories, TableScorer(table), current_steps=10, config=config)
    assert sorted(s.score for s in kept) == [0.5, 0.7]


def test_filter_caps_at_twice_current_steps_reproducibly(make_trajectory):
    probabilities = [0.6 + 0.01 * i for i in range(20)]
    trajectories, table = _experience(make_trajectory, probabilities)

    def run(seed: int) -> list[str]:
        config = ReplayFilterConfig(seed=seed)
        kept = filter_by_perplexity(trajectories, TableScorer(table), current_steps=3, config=config)
        return [s.task_id for s in kept]

    assert len(run(0)) == 6
    assert run(0) == run(0)
    assert len({tuple(run(seed)) for seed in range(5)}) > 1
    uncapped = filter_by_perplexity(
        trajectories, TableScorer(table), current_steps=3, config=ReplayFilterConfig(cap_ratio=None)
    )
    assert len(uncapped) == 20


def test_a_fractional_cap_ratio_keeps_the_whole_floor_and_records_it(make_trajectory, tmp_path):
    # 0.29 x 100 is 28.999999999999996 in floating point; the cap is still 29 steps.
    trajectories, table = _experience(make_trajectory, [0.6 + 0.003 * i for i in range(100)])
    scores_path = tmp_path / "replay_scores.json"
    config = ReplayFilterConfig(cap_ratio=0.29)
    kept = filter_by_perplexity(
        trajectories, TableScorer(table), current_steps=100, config=config, scores_path=scores_path
    )
    assert len(kept) == 29
    record = json.loads(scores_path.read_text())
    assert record["window"]["cap"] == 29
    assert sum(step["kept"] for step in record["steps"]) == 29 and len(record["steps"]) == 100


def test_filter_counts_a_success_at_the_configured_threshold(make_trajectory):
    """Without an outcome the evaluator's 0.6 is the label: a success at the default 0.5, not at 0.7."""
    graded = make_trajectory("graded", num_steps=1, outcome=None, eval_reward=0.6)
    table = {graded.steps[0].response: 0.8}
    assert len(filter_by_perplexity([graded], TableScorer(table), current_steps=10)) == 1
    strict = ReplayFilterConfig(success_threshold=0.7)
    assert filter_by_perplexity([graded], TableScorer(table), current_steps=10, config=strict) == []


def test_filter_uses_only_first_success_of_a_task(make_trajectory):
    first = make_trajectory("a", intent="same", num_steps=2, outcome=1.0)
    second = make_trajectory("b", intent="same", num_steps=2, outcome=1.0)
    scorer = TableScorer({s.response: 0.8 for t in (first, second) for s in t.steps})
    kept = filter_by_perplexity([first, second], scorer, current_steps=10)
    assert {s.trajectory_id for s in kept} == {first.trajectory_id}
    assert len(kept) == 2


def test_score_samples_logs_a_line_not_a_bar_off_a_terminal(make_trajectory, capsys):
    samples = trajectory_to_samples(make_trajectory("a", num_steps=3))
    assert score_samples(samples, lambda prompts, actions: [0.5] * len(prompts), batch_size=2) == [0.5] * 3
    captured = capsys.readouterr()
    assert captured.out == "" and "\r" not in captured.err
    assert captured.err.startswith("replay scoring: done 2/2 batch (100%) in ") and captured.err.count("\n") == 1


def test_score_samples_batches_neighbours_in_length_and_returns_scores_in_sample_order(make_trajectory):
    """Prompts of 9, 3, 7, 1, 5 x 10 characters: batches of 2 are (1, 3), (5, 7), (9), each score back in its place."""
    samples = trajectory_to_samples(make_trajectory("a", num_steps=5))
    lengths = {s.prompt: 10 * n for s, n in zip(samples, (9, 3, 7, 1, 5), strict=True)}
    batches = []

    def score(prompts, actions):
        batches.append([len(p) for p in prompts])
        return [len(p) / 100 for p in prompts]

    scores = score_samples(samples, score, batch_size=2, fit_prompt=lambda s: "x" * lengths[s.prompt])
    assert batches == [[10, 30], [50, 70], [90]]
    assert scores == [0.9, 0.3, 0.7, 0.1, 0.5]


def test_score_samples_rejects_a_scorer_returning_the_wrong_count(make_trajectory):
    samples = trajectory_to_samples(make_trajectory("a", num_steps=2))
    with pytest.raises(ValueError, match="returned 1 scores for a batch of 2"):
        score_samples(samples, lambda prompts, actions: [0.5])


def test_a_replayed_last_step_keeps_the_runs_chat_form_in_its_next_state(chat_tokenizer, tmp_path, monkeypatch):
    """The critic reads s' of a replayed trajectory's last step, which the filter rebuilds: it must be in the form
    every rollout prompt of a chat-template actor takes, not the completion form."""
    from lightning.fabric import Fabric

    from webrl import phase_training
    from webrl.config import load_config
    from webrl.loop_config import WebRLConfig

    monkeypatch.setattr(phase_training, "load_actor_model", lambda path: (torch.nn.Linear(1, 1), chat_tokenizer))
    monkeypatch.setattr(phase_training, "actor_scorer", lambda *a, **k: lambda prompts, actions: [0.7] * len(prompts))
    success = build_trajectory("t", num_steps=2, tokenizer=chat_tokenizer)
    config = load_config(WebRLConfig, [f"output_dir={tmp_path}"])
    fabric = Fabric(accelerator="cpu", devices=1)
    kept = phase_training.filter_replay(fabric, config, [success], actor_dir=tmp_path, current_steps=4)
    last = next(sample for sample in kept if sample.done)
    assert success.steps[0].prompt.startswith("<|im_start|>user\nTask Instruction: Do thing t")
    assert last.next_prompt.startswith("<|im_start|>user\nTask Instruction: Do thing t"), last.next_prompt[:80]
    assert last.next_prompt.endswith("<|im_start|>assistant\n")


def test_the_filter_scores_the_prompt_the_actor_trains_on(tiny_model_dir, tmp_path, monkeypatch):
    """A replayed step longer than model.max_length is scored after the prompt the actor's batches hold (its page
    cut, instruction and history kept), not after the whole prompt, which the scorer would cut from the left."""
    from lightning.fabric import Fabric

    from webrl import phase_training
    from webrl.config import load_config
    from webrl.data.collate import ActorCollator
    from webrl.loop_config import WebRLConfig

    real_scorer, received = phase_training.actor_scorer, []

    def recording_scorer(model, tokenizer, **kwargs):
        score = real_scorer(model, tokenizer, **kwargs)

        def record(prompts: list[str], actions: list[str]) -> list[float]:
            received.extend(prompts)
            return score(prompts, actions)

        return record

    monkeypatch.setattr(phase_training, "actor_scorer", recording_scorer)
    long_page = build_trajectory("long", num_steps=2, html_size=20_000)
    short_page = build_trajectory("short", num_steps=1)
    config = load_config(WebRLConfig, [f"output_dir={tmp_path}", "model.max_length=300"])
    fabric = Fabric(accelerator="cpu", devices=1)
    phase_training.filter_replay(fabric, config, [long_page, short_page], actor_dir=tiny_model_dir, current_steps=4)

    _, tokenizer = phase_training.load_actor_model(tiny_model_dir)
    samples = [s for t in (long_page, short_page) for s in trajectory_to_samples(t)]
    assert len(received) == len(samples)
    scored = {tuple(tokenizer(prompt)["input_ids"]): prompt for prompt in received}  # scored in length order
    matched = []
    for sample in samples:
        batch = ActorCollator(tokenizer, max_length=300)([sample])  # one row: no padding
        ids, mask = batch["input_ids"][0].tolist(), batch["action_mask"][0].tolist()
        prompt = scored.pop(tuple(ids[: mask.index(1)]), None)
        assert prompt is not None, (sample.task_id, sample.step_index)
        instruction = sample.prompt[: sample.prompt.index(sample.intent) + len(sample.intent)]
        assert prompt.startswith(instruction), prompt[:80]
        matched.append(prompt)
    for prompt, sample in zip(matched[:2], samples[:2], strict=True):
        assert len(tokenizer(sample.prompt)["input_ids"]) > 300
        assert sample.html[:10] in prompt and sample.html not in prompt
    assert samples[1].history[0] in matched[1]
    assert matched[2] == samples[2].prompt
