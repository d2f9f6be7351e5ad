"""Collation and ReplayDataModule: exact token layout, HTML-only truncation, padding, DDP sharding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dist_worker import build_trajectories, score_by_length

from webrl.data.collate import ActorCollator, CriticCollator
from webrl.data.critic_states import critic_states
from webrl.data.datamodule import ReplayDataModule
from webrl.data.steps import trajectory_to_samples
from webrl.modules.lm import encode_prompt_action

WORKER = Path(__file__).with_name("dist_worker.py")


def _unpad(ids: list[int], mask: list[int]) -> list[int]:
    return [i for i, m in zip(ids, mask, strict=True) if m]


def test_actor_batch_layout_is_prompt_action_eos_left_padded(tiny_tokenizer):
    samples = [s for t in build_trajectories()[:3] for s in trajectory_to_samples(t)]
    batch = ActorCollator(tiny_tokenizer, max_length=4096)(samples)
    width = batch["input_ids"].shape[1]
    for b, sample in enumerate(samples):
        ids, mask = encode_prompt_action(tiny_tokenizer, sample.prompt, sample.action)
        length = len(ids)
        assert batch["input_ids"][b, width - length :].tolist() == ids
        assert batch["action_mask"][b, width - length :].tolist() == mask
        assert batch["attention_mask"][b].tolist() == [0] * (width - length) + [1] * length
        assert (batch["input_ids"][b, : width - length] == tiny_tokenizer.pad_token_id).all()
        assert ids[0] == tiny_tokenizer.bos_token_id and ids[-1] == tiny_tokenizer.eos_token_id
        action_ids = tiny_tokenizer(sample.action, add_special_tokens=False)["input_ids"]
        assert int(batch["action_mask"][b].sum()) == len(action_ids) + 1
    assert batch["reward"].tolist() == [s.reward for s in samples]
    assert batch["done"].tolist() == [s.done for s in samples]
    assert "advantage" not in batch


def test_actor_batch_carries_precomputed_advantages(tiny_tokenizer):
    samples = trajectory_to_samples(build_trajectories()[1])
    for i, sample in enumerate(samples):
        sample.advantage = [1.0, -0.6][i % 2]
    batch = ActorCollator(tiny_tokenizer, max_length=4096)(samples)
    assert batch["advantage"].tolist() == pytest.approx([1.0, -0.6][: len(samples)])
    # With the advantages known, the critic's view of s and s' is not tokenised at all.
    assert not any(key.startswith(("state_", "next_state_")) for key in batch)
    assert batch["outcome"].tolist() == [s.trajectory_reward for s in samples]


def test_critic_batch_has_states_and_release_outcome(tiny_tokenizer):
    failed, succeeded = build_trajectories()[2], build_trajectories()[5]
    samples = trajectory_to_samples(failed) + trajectory_to_samples(succeeded)
    batch = CriticCollator(tiny_tokenizer, max_length=4096, padding_side="right")(samples)
    assert batch["outcome"].tolist() == [0.0] * len(failed.steps) + [1.0] * len(succeeded.steps)
    assert batch["mc_return"][-1].item() == pytest.approx(1.0)
    assert batch["mc_return"][-3].item() == pytest.approx(1.0 + 0.9 + 0.81)
    for b, sample in enumerate(samples):
        state = _unpad(batch["state_input_ids"][b].tolist(), batch["state_attention_mask"][b].tolist())
        nxt = _unpad(batch["next_state_input_ids"][b].tolist(), batch["next_state_attention_mask"][b].tolist())
        assert state == tiny_tokenizer(sample.prompt)["input_ids"]
        assert nxt == tiny_tokenizer(sample.next_prompt)["input_ids"]
        assert batch["state_attention_mask"][b, 0] == 1  # right padding: real tokens first
    last = samples[-1]
    assert last.next_prompt.count(last.action) == 1 and last.next_html == last.html


def test_long_page_is_cut_by_html_never_history_or_action(tiny_tokenizer, make_trajectory):
    trajectory = make_trajectory("long", num_steps=3, html_size=20_000)
    sample = trajectory_to_samples(trajectory)[2]
    batch = ActorCollator(tiny_tokenizer, max_length=300)([sample])
    assert batch["input_ids"].shape[1] <= 300
    ids = batch["input_ids"][0].tolist()
    mask = batch["action_mask"][0].tolist()
    action_text = tiny_tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m], skip_special_tokens=True)
    assert action_text == sample.action
    prompt_text = tiny_tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    for earlier in sample.history:
        assert earlier in prompt_text
    assert sample.html[:10] in prompt_text and sample.html not in prompt_text
    assert prompt_text.endswith("<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n")
    critic = CriticCollator(tiny_tokenizer, max_length=300)([sample])
    assert critic["state_input_ids"].shape[1] <= 300 and critic["next_state_input_ids"].shape[1] <= 300


def test_history_longer_than_max_length_is_an_error_naming_the_step(tiny_tokenizer, make_trajectory):
    sample = trajectory_to_samples(make_trajectory("hist", num_steps=12))[11]
    with pytest.raises(ValueError, match="task hist step 11: the prompt needs"):
        ActorCollator(tiny_tokenizer, max_length=60)([sample])


def test_a_step_without_a_recorded_prompt_is_an_error_not_a_re_rendered_prompt(make_trajectory):
    trajectory = make_trajectory("unrecorded", num_steps=3)
    trajectory.steps[1].prompt = ""
    with pytest.raises(ValueError, match=r"task unrecorded\): steps \[1\] have no recorded prompt"):
        trajectory_to_samples(trajectory)


def test_datamodule_without_a_trainer(tiny_tokenizer):
    trajectories = build_trajectories()
    replay = trajectory_to_samples(trajectories[3])
    dm = ReplayDataModule(tiny_tokenizer, current=trajectories[:3], replay=replay, batch_size=2, shuffle=False)
    with pytest.raises(RuntimeError, match="call setup"):
        dm.critic_dataloader()
    dm.setup()
    expected = [s for t in trajectories[:3] for s in trajectory_to_samples(t)] + replay  # 1 + 2 + 3 + 1 steps
    assert [s.prompt for s in dm.dataset.samples] == [s.prompt for s in expected]
    batches = list(dm.train_dataloader())
    assert [b["input_ids"].shape[0] for b in batches] == [2, 2, 2, 1]
    critic = list(dm.critic_dataloader())
    # 7 steps of 4 trajectories: their 7 states s plus the last s' of each (the replayed step's s' is new too).
    assert sum(b["outcome"].shape[0] for b in critic) == len(critic_states(expected)) == 7 + 4
    shuffled = ReplayDataModule(tiny_tokenizer, current=trajectories, batch_size=4, seed=3)
    shuffled.setup()
    order = list(shuffled.critic_dataloader().sampler)
    assert order == list(shuffled.critic_dataloader().sampler) and order != sorted(order)


def test_datamodule_rejects_bad_settings(tiny_tokenizer):
    with pytest.raises(ValueError, match="target must be one of"):
        ReplayDataModule(tiny_tokenizer, target="policy")
    with pytest.raises(ValueError, match="no training steps"):
        ReplayDataModule(tiny_tokenizer).setup()


@pytest.fixture(scope="module")
def ddp_records(tmp_path_factory, tiny_model_dir):
    out = tmp_path_factory.mktemp("ddp")
    env = {**os.environ, "PYTHONPATH": str(WORKER.parent)}
    result = subprocess.run(
        [sys.executable, str(WORKER), str(out), str(tiny_model_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_sharded_scoring_gathers_every_score_in_order(ddp_records):
    samples = [s for t in build_trajectories() for s in trajectory_to_samples(t)]
    expected = score_by_length([s.prompt for s in samples], [s.action for s in samples])
    for record in ddp_records:
        assert record["scores"] == pytest.approx(expected)
        assert record["scores_dist"] == pytest.approx(expected)
    assert sorted(r["scored_here"] for r in ddp_records) == [6, 7]  # 13 steps split over 2 ranks
    assert ddp_records[0]["kept"] == ddp_records[1]["kept"]
    assert len(ddp_records[0]["kept"]) == 4  # successes' steps (first per task), capped at 2 x 2


def test_datamodule_yields_padded_batches_under_two_process_ddp(ddp_records, tiny_tokenizer):
    samples = [s for t in build_trajectories() for s in trajectory_to_samples(t)]
    states = critic_states(samples)
    pad_id = tiny_tokenizer.pad_token_id
    indices: dict[str, list[set[int]]] = {"actor": [], "critic": []}
    # 13 steps: ceil(13 / 2) = 7 per rank; 13 + 7 distinct states (one last s' per trajectory): 10 per rank.
    sizes = {"actor": [3, 3, 1], "critic": [3, 3, 3, 1]}
    for record in ddp_records:
        for name, loader in record["loaders"].items():
            if name == "grouped":
                continue
            assert loader["sampler"] == "DistributedSampler"
            assert [len(b["outcome"]) for b in loader["batches"]] == sizes[name]
            flat = loader["indices"]
            rows = 0
            for batch in loader["batches"]:
                ids, mask = torch.tensor(batch["input_ids"]), torch.tensor(batch["attention_mask"])
                assert ids.shape == mask.shape
                assert (ids[mask == 0] == pad_id).all()
                assert (mask[:, -1] == 1).all()  # left padding: every row ends with a real token
                for row in range(ids.shape[0]):
                    if name == "actor":
                        sample = samples[flat[rows]]
                        want, _ = encode_prompt_action(tiny_tokenizer, sample.prompt, sample.action)
                    else:
                        want = tiny_tokenizer(states[flat[rows]].text)["input_ids"]
                    assert _unpad(ids[row].tolist(), mask[row].tolist()) == want
                    rows += 1
            indices[name].append(set(flat))
    assert indices["actor"][0] | indices["actor"][1] == set(range(len(samples)))
    assert indices["critic"][0] | indices["critic"][1] == set(range(len(states)))


def test_length_grouped_batches_split_across_two_ddp_processes(ddp_records, tiny_tokenizer):
    """Under DDP Fabric cannot put its sampler into a batch sampler: each rank reads its own length-grouped slice."""
    samples = [s for t in build_trajectories() for s in trajectory_to_samples(t)]
    want = {tuple(encode_prompt_action(tiny_tokenizer, s.prompt, s.action)[0]) for s in samples}
    counts, rows = [], set()
    for record in ddp_records:
        batches = record["loaders"]["grouped"]["batches"]
        counts.append(len(batches))
        for batch in batches:
            for ids, mask in zip(batch["input_ids"], batch["attention_mask"], strict=True):
                rows.add(tuple(_unpad(ids, mask)))
    assert counts[0] == counts[1] > 0 and rows == want


def test_batches_feed_the_critic_and_actor_modules_under_a_trainer(tiny_model_dir, tiny_tokenizer, tmp_path):
    import lightning as L

    from webrl.modules.actor import ActorModule
    from webrl.modules.critic import CriticModule

    critic = CriticModule(tiny_model_dir, lr=1e-3)
    actor = ActorModule(tiny_model_dir, critic=critic, lr=1e-3)
    trajectories = build_trajectories()
    dm = ReplayDataModule(tiny_tokenizer, current=trajectories, batch_size=4, max_length=512, target="critic")
    trainer = L.Trainer(
        max_steps=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, default_root_dir=tmp_path
    )
    before = [p.detach().clone() for p in critic.heads.parameters()]
    trainer.fit(critic, datamodule=dm)
    assert trainer.global_step == 2
    assert any(not torch.equal(a, b) for a, b in zip(before, critic.heads.parameters(), strict=True))
    dm.setup()
    batch = next(iter(dm.actor_dataloader()))
    loss, metrics = actor.compute_loss(batch)
    loss.backward()
    assert torch.isfinite(loss) and "actor/loss" in metrics
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in actor.model.parameters())


def test_group_by_length_batches_neighbours_in_length(tiny_tokenizer):
    trajectories = build_trajectories()
    dm = ReplayDataModule(tiny_tokenizer, current=trajectories, batch_size=2, seed=1, group_by_length=True)
    dm.setup()
    loader = dm.actor_dataloader()
    lengths = [len(s.prompt) + len(s.action) for s in dm.dataset.samples]
    index_batches = list(loader.batch_sampler)
    assert sorted(i for batch in index_batches for i in batch) == list(range(len(lengths)))
    # One pool holds every step here, so sorting it leaves no other step strictly between a batch's two lengths.
    for batch in (b for b in index_batches if len(b) == 2):
        low, high = sorted(lengths[i] for i in batch)
        assert not [n for n in lengths if low < n < high]
    assert sum(b["input_ids"].shape[0] for b in loader) == len(lengths)
