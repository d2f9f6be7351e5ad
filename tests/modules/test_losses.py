"""losses.py against values worked out by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from webrl.modules.losses import (
    ActorLossConfig,
    AdvantageConfig,
    actor_loss,
    compute_advantage,
    critic_loss,
    critic_state_loss,
    critic_values,
    orm_loss,
    paper_advantage,
    release_advantage,
    trainable_rows,
    yes_probability,
)


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_paper_advantage():
    value, next_value = t(0.5, 0.2, 0.3), t(0.6, 0.9, 0.7)
    outcome, done, steps_to_end = t(1.0, 0.0, 1.0), torch.tensor([False, True, True]), torch.tensor([2, 0, 0])
    # s0: TD = 0 + .9*.6 - .5 = .04, MC = .9^2*1 - .5 = .31 -> .5*.04 + .5*.31 = .175
    # s1 (failed last step): TD = 0 + 0 - .2, MC = 0 - .2 -> -.2
    # s2 (successful last step, no bootstrap): TD = 1 - .3, MC = 1 - .3 -> .7
    got = paper_advantage(value, next_value, outcome, done, steps_to_end, gamma=0.9, lam=0.5)
    assert torch.allclose(got, t(0.175, -0.2, 0.7))
    # lam = 1 keeps only TD: s0 -> .04
    assert torch.isclose(
        paper_advantage(value, next_value, outcome, done, steps_to_end, gamma=0.9, lam=1.0)[0], t(0.04)[0]
    )


def test_paper_advantage_with_discount_penalises_the_early_steps_of_a_certain_success():
    """The critic learns the undiscounted outcome (V = P(success)), the advantage discounts it: with γ < 1 every
    step but the last of a success the critic was sure of gets A < 0, so the update favours exiting early."""
    value, next_value = t(1.0, 1.0, 1.0), t(1.0, 1.0, 0.0)  # a 3-step success, V = 1 throughout
    outcome, done, steps_to_end = t(1.0, 1.0, 1.0), torch.tensor([False, False, True]), torch.tensor([2, 1, 0])
    # γ = .9: s0: TD .9 - 1 = -.1, MC .81 - 1 = -.19 -> -.145; s1: TD -.1, MC .9 - 1 = -.1 -> -.1; s2: 0
    discounted = paper_advantage(value, next_value, outcome, done, steps_to_end, gamma=0.9, lam=0.5)
    assert torch.allclose(discounted, t(-0.145, -0.1, 0.0))
    # γ = 1: nothing to learn from a success the critic foresaw
    assert torch.allclose(
        paper_advantage(value, next_value, outcome, done, steps_to_end, gamma=1.0, lam=0.5), t(0, 0, 0)
    )


def test_release_advantage():
    value, next_value = t(0.5, 0.5, 0.2), t(0.4, 0.6, 0.22)
    reward, mc_return = t(1.0, 0.0, 0.0), t(1.9, 0.0, 0.0)
    # s0: .4 - .5 - .05 + 1 + 1.9 = 2.75 -> clamp 1; s1: .6 - .5 - .05 = .05; s2: .22 - .2 - .05 = -.03
    raw = release_advantage(value, next_value, reward, mc_return, binarise=False)
    assert torch.allclose(raw, t(1.0, 0.05, -0.03), atol=1e-6)
    assert torch.equal(release_advantage(value, next_value, reward, mc_return), t(1.0, 1.0, -0.6))


def test_compute_advantage_reads_the_collated_labels():
    batch = {
        "outcome": t(1.0, 0.0),
        "done": torch.tensor([False, True]),
        "step_index": torch.tensor([0, 1]),
        "num_steps": torch.tensor([3, 2]),
        "reward": t(1.0, 0.0),
        "mc_return": t(2.71, 0.0),
    }
    value, next_value = t(0.5, 0.2), t(0.6, 0.9)
    paper = compute_advantage(value, next_value, batch, AdvantageConfig())
    assert torch.allclose(paper, t(0.175, -0.2))  # same arithmetic as test_paper_advantage
    release = compute_advantage(value, next_value, batch, AdvantageConfig(form="release"))
    assert torch.equal(release, t(1.0, 1.0))  # s1: .9 - .2 - .05 = .65 >= 0
    with pytest.raises(ValueError, match=r"^actor\.advantage\.form='ppo': must be one of paper, release$"):
        AdvantageConfig(form="ppo")


def test_paper_actor_loss():
    logp, ref, count, adv = t(-2.0, -3.0), t(-2.5, -2.0), t(2, 4), t(0.5, -0.4)
    # logratio (sum) = .5, -1 -> ((.5 - .5)^2 + (-1 + .4)^2) / 2 = .18
    loss, stats = actor_loss(logp, ref, count, adv, ActorLossConfig.paper())
    assert loss.item() == pytest.approx(0.18)
    assert stats["masked_frac"].item() == 0.0 and stats["logratio"].item() == pytest.approx(-0.25)
    # beta 2: ((1 - .5)^2 + (-2 + .4)^2) / 2 = (.25 + 2.56) / 2
    assert actor_loss(logp, ref, count, adv, ActorLossConfig.paper(beta=2.0))[0].item() == pytest.approx(1.405)


def release_case() -> tuple[torch.Tensor, ...]:
    logp = t(-1.0, -3.0, -0.1, -0.2)
    ref = t(-1.4, -2.0, -0.2, -4.2)
    count = t(2, 4, 1, 2)
    adv = t(1.0, -0.6, 1.0, 1.0)
    return logp, ref, count, adv


def test_release_actor_loss():
    # per-token logratio: .2, -.25, .1, 2.0; reference prob exp(ref/count): .497, .607, .819, .122
    # beta: s0 1 (positive, unsure ref); s1 5 (negative, ref < .9) capped at |-.6/-.25| = 2.4;
    #       s2 5 (positive, ref >= .8), cap 10; s3 1 capped at |1/2| = .5
    # SmoothL1(beta*lr, A)/beta: s0 .5*.8^2 = .32; s1 0 (masked anyway); s2 .5*.5^2/5 = .025; s3 0
    loss, stats = actor_loss(*release_case(), ActorLossConfig.release())
    assert loss.item() == pytest.approx((0.32 + 0.025) / 4)
    assert stats["beta"].item() == pytest.approx((1 + 2.4 + 5 + 0.5) / 4)
    assert stats["masked_frac"].item() == pytest.approx(0.25)
    assert stats["logratio"].item() == pytest.approx((0.2 - 0.25 + 0.1 + 2.0) / 4)
    # ref_prob is the batch mean of p_ref = exp(ref/count) (method.md §8.3): (.49659 + .60653 + .81873 + .12246) / 4
    assert stats["ref_prob"].item() == pytest.approx(0.51108, abs=1e-5)


def test_release_beta_follows_the_reference_probability_not_the_policys():
    # p_ref = exp(-.5/1) = .607 < .8: a positive the reference finds unsure keeps beta 1 (the policy's own
    # exp(-.1) = .905 would have made it 5, capped at |A/rho| = 1/.4 = 2.5). rho = (-.1 + .5)/1 = .4;
    # SmoothL1(1 * .4, 1) / 1 = .5 * .6^2 = .18.
    loss, stats = actor_loss(t(-0.1), t(-0.5), t(1), t(1.0), ActorLossConfig.release())
    assert stats["beta"].item() == 1.0
    assert loss.item() == pytest.approx(0.18)


def test_release_actor_loss_with_sft_term():
    base, _ = actor_loss(*release_case(), ActorLossConfig.release())
    loss, stats = actor_loss(*release_case(), ActorLossConfig.release(sft_weight=1.0))
    # positives s0, s2, s3: -(logp / count * exp(1 - exp(logp/count))), over the 4 rows (s1, a negative, adds 0)
    terms = [(-1.0, 2), (-0.1, 1), (-0.2, 2)]
    sft = -sum(lp / n * math.exp(1 - math.exp(lp / n)) for lp, n in terms) / 4
    assert stats["sft_loss"].item() == pytest.approx(sft, rel=1e-5)
    assert loss.item() == pytest.approx(base.item() + sft, rel=1e-5)


def test_the_sft_term_does_not_depend_on_how_rows_are_split():
    """The loop weighs micro-batches by rows: two halves weighted 1/2 each must give the whole batch's loss."""
    logp, ref, count, adv = release_case()
    config = ActorLossConfig.release(sft_weight=1.0)
    whole = actor_loss(logp, ref, count, adv, config)[0].item()
    halves = [actor_loss(logp[i:j], ref[i:j], count[i:j], adv[i:j], config)[0].item() for i, j in ((0, 2), (2, 4))]
    assert whole == pytest.approx(sum(halves) / 2, rel=1e-6)


def test_the_positive_rows_alone_give_the_whole_batchs_loss_over_its_rows():
    """The release loss masks s1 (A = -0.6): s0, s2, s3 with rows=4 are the whole batch's (.32 + .025 + 0) / 4."""
    logp, ref, count, adv = release_case()
    config = ActorLossConfig.release(sft_weight=1.0)
    whole, whole_stats = actor_loss(logp, ref, count, adv, config)
    keep = trainable_rows(adv.clone(), config)
    assert keep.tolist() == [True, False, True, True]
    part, part_stats = actor_loss(logp[keep], ref[keep], count[keep], adv[keep], config, rows=4)
    assert part.item() == pytest.approx(whole.item(), rel=1e-6)
    assert whole.item() != pytest.approx(actor_loss(logp[keep], ref[keep], count[keep], adv[keep], config)[0].item())
    assert part_stats["masked_frac"].item() == pytest.approx(0.25) == whole_stats["masked_frac"].item()
    assert part_stats["sft_loss"].item() == pytest.approx(whole_stats["sft_loss"].item(), rel=1e-6)


def test_trainable_rows_keep_every_row_when_negatives_train_and_one_when_none_can():
    assert trainable_rows(t(1.0, -0.6), ActorLossConfig.paper()) is None  # negatives train: every row
    assert trainable_rows(t(1.0, 1.0), ActorLossConfig.release()) is None  # all positive: every row
    # No positive: the first row alone still runs, with mask 0, so every rank joins the step's collectives.
    assert trainable_rows(t(-0.6, 0.0, -0.6), ActorLossConfig.release()).tolist() == [True, False, False]


def test_each_release_choice_alone():
    logp, ref, count, adv = release_case()
    # only the mask: squared, sum logratio .4, -1, .1, 4 -> (.36 + 0 + .81 + 9) / 4 with s1 masked
    masked = ActorLossConfig(train_negatives=False)
    assert actor_loss(logp, ref, count, adv, masked)[0].item() == pytest.approx((0.36 + 0.81 + 9.0) / 4)
    # only the cap: sum logratio, beta 1 capped at |A/lr| = 2.5, .6, 10, .25 -> s1 .6*-1 = -.6 = A: 0;
    #   s3 .25*4 = 1 = A: 0; s0 (.4 - 1)^2 = .36; s2 (.1 - 1)^2 = .81
    capped = ActorLossConfig(cap_beta=True)
    assert actor_loss(logp, ref, count, adv, capped)[0].item() == pytest.approx((0.36 + 0.81) / 4)


def test_policy_gradient_objective_ignores_the_reference():
    logp, ref, count, adv = release_case()
    # -A * sum logp: 1*1 + (-.6*3 -> -1.8) + .1 + .2 -> (1 - 1.8 + .1 + .2) / 4 = -.125
    loss, _ = actor_loss(logp, ref, count, adv, ActorLossConfig(objective="policy_gradient"))
    assert loss.item() == pytest.approx(-0.125)
    assert actor_loss(logp, ref * 7, count, adv, ActorLossConfig(objective="policy_gradient"))[0].item() == loss.item()
    # per-token mean of log pi: 1*.5 - .6*.75 + .1 + .1 -> (.5 - .45 + .1 + .1) / 4 = .0625
    mean = ActorLossConfig(objective="policy_gradient", logratio="mean")
    assert actor_loss(logp, ref, count, adv, mean)[0].item() == pytest.approx(0.0625)


def test_capped_beta_survives_a_zero_logratio():
    loss, stats = actor_loss(t(-1.0), t(-1.0), t(2), t(1.0), ActorLossConfig.release())
    # lr = 0: the cap is |1/0| = inf, beta stays 1; SmoothL1(0, 1) = .5
    assert loss.item() == pytest.approx(0.5) and stats["beta"].item() == 1.0


def test_capped_beta_survives_a_zero_advantage_on_a_zero_logratio():
    # lr = 0 and A = 0: the cap |0/0| is NaN, read as no cap, so beta stays 1 and the loss is (1 * 0 - 0)^2 = 0
    loss, stats = actor_loss(t(-1.0), t(-1.0), t(2), t(0.0), ActorLossConfig(cap_beta=True))
    assert loss.item() == 0.0 and stats["beta"].item() == 1.0


def test_actor_loss_config_names_a_bad_key():
    """Built alone, the settings name their keys in the run config (actor.loss.*), where they are set."""
    with pytest.raises(ValueError, match=r"^actor\.loss\.objective='mse'"):
        ActorLossConfig(objective="mse")
    with pytest.raises(ValueError, match=r"^actor\.loss\.logratio='max'"):
        ActorLossConfig(logratio="max")
    with pytest.raises(ValueError, match=r"^actor\.loss\.beta_confident=0"):
        ActorLossConfig(beta_confident=0)


def test_critic_values_take_the_min_over_heads():
    # head 1: softmax(0, ln 3)[1] = .75; head 2: softmax(0, 0)[1] = .5 -> min .5
    logits = torch.tensor([[[0.0, math.log(3.0)]], [[0.0, 0.0]]])  # (H=2, B=1, 2)
    assert critic_values(logits).item() == pytest.approx(0.5)


def test_critic_loss_sums_four_cross_entropies():
    logits = torch.tensor([[[0.0, 2.0], [1.0, 0.0]], [[0.0, -1.0], [3.0, 0.0]]])  # (2, 2, 2)
    next_logits = torch.zeros(2, 2, 2)
    outcome = t(1.0, 0.0)

    def ce(row: list[float], target: int) -> float:
        return math.log(sum(math.exp(x) for x in row)) - row[target]

    expected = (ce([0, 2], 1) + ce([1, 0], 0)) / 2 + (ce([0, -1], 1) + ce([3, 0], 0)) / 2 + 2 * math.log(2)
    loss, accuracy = critic_loss(logits, next_logits, outcome)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert accuracy.item() == pytest.approx(0.75)  # head 1 right twice, head 2 wrong on the success


def test_the_single_state_critic_loss_sums_the_heads_and_is_half_of_a_pair_of_equal_states():
    logits = torch.tensor([[[0.0, 0.0], [2.0, 0.0]], [[0.0, math.log(3.0)], [0.0, 0.0]]])  # (2, 2, 2)
    outcome = t(1.0, 0.0)
    # head 1: ln 2 on the success, ln(1 + e^-2) on the failure; head 2: ln(4/3) and ln 2.
    expected = (math.log(2) + math.log(1 + math.exp(-2))) / 2 + (math.log(4 / 3) + math.log(2)) / 2
    loss, accuracy = critic_state_loss(logits, outcome)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert accuracy.item() == pytest.approx(0.75)  # a tie picks "failure": head 1 misses the success
    pair, _ = critic_loss(logits, logits, outcome)
    assert pair.item() == pytest.approx(2 * expected, rel=1e-6)


def test_orm_score_and_loss():
    logits = torch.tensor([[2.0, 0.0, 5.0, 1.0]])  # yes = 0, no = 1 (a third token is the argmax)
    assert yes_probability(logits, yes_id=0, no_id=1).item() == pytest.approx(1 / (1 + math.exp(-2)))
    log_z = math.log(math.exp(2) + 1 + math.exp(5) + math.exp(1))
    assert orm_loss(logits, t(1.0), 0, 1).item() == pytest.approx(log_z - 2.0, rel=1e-6)
    assert orm_loss(logits, t(0.0), 0, 1).item() == pytest.approx(log_z - 0.0, rel=1e-6)
