"""Scoring a cut action (the engine stopped it at `max_tokens`): no EOS term in its log-prob, count or confidence.

Checked against a forward pass computed by hand: the finished action's log-prob sum is the cut action's plus
log pi(EOS | prompt + action), read from the logits at the action's last token.
"""

from __future__ import annotations

import pytest
import torch

from webrl.modules.lm import action_logprobs, actor_scorer, collate_actions, encode_prompt_action

PROMPTS = ["Task Instruction: buy the red shirt\n\nRound 0\n\n<html/>", "Task Instruction: find the cheapest laptop"]
ACTIONS = ['do(action="Click", element="2")', 'exit(message="42")']


def _eos_logprob(model, tokenizer, prompt: str, action: str) -> float:
    ids, _ = encode_prompt_action(tokenizer, prompt, action, truncated=True)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].float()  # (V,) the next-token logits after the action
    return float(torch.log_softmax(logits, -1)[tokenizer.eos_token_id])


def test_a_cut_action_is_encoded_without_its_eos(tiny):
    _, tokenizer = tiny
    full, full_mask = encode_prompt_action(tokenizer, PROMPTS[0], ACTIONS[0])
    cut, cut_mask = encode_prompt_action(tokenizer, PROMPTS[0], ACTIONS[0], truncated=True)
    assert full == [*cut, tokenizer.eos_token_id]
    assert sum(full_mask) == sum(cut_mask) + 1
    batch = collate_actions(
        tokenizer, [(p, a, 0.0) for p, a in zip(PROMPTS, ACTIONS, strict=True)], truncated=[True, False]
    )
    plain = [len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in ACTIONS]
    assert batch["action_mask"].sum(-1).tolist() == [plain[0], plain[1] + 1]
    with pytest.raises(ValueError, match="1 truncation flags for 2 actions"):
        collate_actions(tokenizer, [(p, a, 0.0) for p, a in zip(PROMPTS, ACTIONS, strict=True)], truncated=[True])


def test_the_log_prob_of_a_cut_action_leaves_out_the_eos_term(tiny):
    model, tokenizer = tiny
    finished = action_logprobs(model, tokenizer, PROMPTS, ACTIONS)
    cut = action_logprobs(model, tokenizer, PROMPTS, ACTIONS, truncated=[True, True])
    for i, (prompt, action) in enumerate(zip(PROMPTS, ACTIONS, strict=True)):
        eos = _eos_logprob(model, tokenizer, prompt, action)
        assert float(finished.sum[i]) == pytest.approx(float(cut.sum[i]) + eos, abs=1e-4)
        assert float(finished.count[i]) == float(cut.count[i]) + 1
    mixed = actor_scorer(model, tokenizer)(PROMPTS, ACTIONS, [True, False])
    assert mixed == pytest.approx([float(cut.geo_mean_prob[0]), float(finished.geo_mean_prob[1])], abs=1e-6)
