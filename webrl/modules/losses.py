"""WebRL's advantage and loss math as pure functions of tensors (no models, no state).

Every function cites what it implements: the paper (arXiv 2411.02337, "[P]") or the released
code's behaviour ("[C]"); `docs/method.md` §8 and §11 have both side by side. Where they differ,
both are here and a config field chooses.

Defaults follow the paper. Its actor objective trains on negative-advantage actions too, which
is WebRL's stated point against filtered BC and AWR (it explicitly lowers the probability of bad
actions), and because it regresses β·log(π/π_ref) onto a bounded target it cannot push a
log-ratio without limit in either direction. The release instead masks negatives out and only
pushes positives up to a capped per-token log-ratio; `ActorLossConfig.release()` reproduces it.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from webrl.data.trajectory import SUCCESS_THRESHOLD
from webrl.modules.settings import ActorLossConfig, AdvantageConfig


def paper_advantage(
    value: torch.Tensor,
    next_value: torch.Tensor,
    outcome: torch.Tensor,
    done: torch.Tensor,
    steps_to_end: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """[P] eq. 8: A = λ(r_t + γV(s_{t+1}) − V(s_t)) + (1−λ)(γ^{T−t} r_T − V(s_t)); all inputs (B,).

    The reward is sparse: r_t = r_T (the outcome) on the last step and 0 before it; after the
    last step there is no state, so its bootstrap V(s_{t+1}) is 0. `steps_to_end` = T − t counts
    the steps after this one (0 on the last step).
    """
    done = done.to(value.dtype)
    reward = outcome * done  # (B,)
    one_step = reward + gamma * (1.0 - done) * next_value - value  # (B,)
    monte_carlo = gamma ** steps_to_end.to(value.dtype) * outcome - value  # (B,)
    return lam * one_step + (1.0 - lam) * monte_carlo


def release_advantage(
    value: torch.Tensor,
    next_value: torch.Tensor,
    reward: torch.Tensor,
    mc_return: torch.Tensor,
    margin: float = 0.05,
    binarise: bool = True,
    positive: float = 1.0,
    negative: float = -0.6,
) -> torch.Tensor:
    """[C] trainer `actor_loss`: clamp(V(s') − V(s) − margin + r + G, −1, 1), then A ≥ 0 → +1, else −0.6.

    Steps of a success always get +1 (r + G ≥ 1); steps of a failure get the sign of the critic's
    rise beyond `margin`. All inputs (B,).
    """
    advantage = (next_value - value - margin + reward + mc_return).clamp(-1.0, 1.0)  # (B,)
    if binarise:
        advantage = torch.where(advantage >= 0, positive, negative).to(value.dtype)
    return advantage


ADVANTAGE_KEYS = {"paper": ("outcome", "done", "step_index", "num_steps"), "release": ("reward", "mc_return")}
"""The step labels each advantage form reads from a batch (`webrl.data.collate.ActorCollator` makes all six)."""


def compute_advantage(
    value: torch.Tensor, next_value: torch.Tensor, batch: Mapping[str, torch.Tensor], config: AdvantageConfig
) -> torch.Tensor:
    """Advantage (B,) for a batch carrying the step labels of `webrl.data.collate`.

    Paper form reads `outcome`, `done`, `step_index`, `num_steps`; release form reads `reward`
    (the broadcast outcome) and `mc_return`. A batch without them is a KeyError naming the missing keys and
    `ActorCollator`, which makes them.
    """
    missing = [key for key in ADVANTAGE_KEYS[config.form] if key not in batch]
    if missing:
        raise KeyError(
            f"the {config.form}-form advantage needs the step labels {missing}, which the batch lacks (it has "
            f"{sorted(batch)}): batch StepSamples with webrl.data.collate.ActorCollator, which makes them, or give "
            "each row its own 'advantage' (ActorModule.collate's triples)"
        )
    if config.form == "paper":
        steps_to_end = batch["num_steps"] - 1 - batch["step_index"]  # (B,)
        return paper_advantage(
            value, next_value, batch["outcome"], batch["done"], steps_to_end, gamma=config.gamma, lam=config.lam
        )
    return release_advantage(
        value,
        next_value,
        batch["reward"],
        batch["mc_return"],
        margin=config.margin,
        binarise=config.binarise,
        positive=config.positive,
        negative=config.negative,
    )


def actor_loss(
    logp_sum: torch.Tensor,
    ref_logp_sum: torch.Tensor,
    count: torch.Tensor,
    advantage: torch.Tensor,
    config: ActorLossConfig,
    *,
    rows: int | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The actor loss (KL-regularised unless `policy_gradient`); inputs (B,): Σ action-token log-probs under π
    and π_ref, token counts, A.

    Returns the scalar loss (mean over the batch, masked samples counting as zero, as [C] does)
    and detached statistics: logratio, beta, advantage_mean, masked_frac, ref_prob, sft_loss.
    [C] divides the log-ratio by the positive samples' total token count of its one-sample
    micro-batch; here each sample is divided by its own count, which is the same at batch 1.
    `rows` is the batch's size when the caller left out rows the mask zeroes (see `trainable_rows`): the loss and
    `masked_frac` stay those of the whole batch, the other statistics are over the rows given.
    """
    count = count.to(logp_sum.dtype).clamp(min=1.0)  # (B,)
    ref_logp_sum = ref_logp_sum.detach()
    logratio = logp_sum - ref_logp_sum  # (B,)
    if config.logratio == "mean":
        logratio = logratio / count
    ref_prob = torch.exp(ref_logp_sum / count)  # (B,) reference geometric-mean token probability
    beta = torch.full_like(logratio, config.beta)  # (B,)
    if config.adaptive_beta:
        confident = ((advantage >= 0) & (ref_prob >= config.positive_confidence)) | (
            (advantage < 0) & (ref_prob < config.negative_confidence)
        )
        beta = torch.where(confident, torch.full_like(beta, config.beta_confident), beta)
    if config.cap_beta:
        cap = (advantage / logratio).abs().detach()  # (B,); inf where logratio = 0 leaves β unchanged
        # A = 0 with logratio ≠ 0 would cap β to 0 and divide by it; binarised advantages never are 0.
        beta = torch.minimum(beta, torch.nan_to_num(cap, nan=float("inf"))).clamp(min=1e-6)
    beta = beta.detach()
    scaled = beta * logratio  # (B,)
    if config.objective == "policy_gradient":
        logp = logp_sum / count if config.logratio == "mean" else logp_sum  # (B,)
        per_sample = -advantage.to(logp.dtype) * logp  # (B,)
    elif config.objective == "squared":
        per_sample = (scaled - advantage) ** 2  # (B,)
    else:
        per_sample = F.smooth_l1_loss(scaled, advantage.to(scaled.dtype), reduction="none")  # (B,)
    if config.divide_by_beta:
        per_sample = per_sample / beta
    mask = torch.ones_like(per_sample) if config.train_negatives else (advantage > 0).to(per_sample.dtype)  # (B,)
    rows = per_sample.shape[0] if rows is None else rows
    loss = (per_sample * mask).sum() / rows
    sft = _sft_term(logp_sum, count, advantage, rows) if config.sft_weight else loss.new_zeros(())
    loss = loss + config.sft_weight * sft
    stats = {
        "logratio": logratio.detach().mean(),
        "beta": beta.mean(),
        "advantage_mean": advantage.detach().float().mean(),
        "masked_frac": 1.0 - mask.sum() / rows,
        "ref_prob": ref_prob.mean(),
        "sft_loss": sft.detach(),
    }
    return loss, stats


def _sft_term(logp_sum: torch.Tensor, count: torch.Tensor, advantage: torch.Tensor, rows: int) -> torch.Tensor:
    """[C] `add_sft_loss`: -log pi / |a| weighted by exp(1 - p), larger for unlikely actions, on positives only.

    Per action, then over rows like the main term: a mean over tokens made a step depend on the split.
    """
    weight = torch.exp(1.0 - torch.exp(logp_sum.detach() / count))  # (B,)
    positive = (advantage > 0).to(logp_sum.dtype)  # (B,)
    return -(logp_sum / count * weight * positive).sum() / rows


def trainable_rows(advantage: torch.Tensor, config: ActorLossConfig) -> torch.Tensor | None:
    """The rows of a batch that `actor_loss` can give a gradient, as a bool mask (B,); None when that is every row.

    Without `train_negatives` a row with A <= 0 adds exactly zero to the loss and its gradient, so its policy and
    reference forwards are wasted work (a fifth of the rows in a release-loss phase here). A batch with no trainable
    row keeps its first: every rank still runs a forward and a backward, which a sharded or all-reduced step needs.
    """
    if config.train_negatives:
        return None
    keep = advantage > 0  # (B,)
    if bool(keep.all()):
        return None
    if not bool(keep.any()):
        keep[0] = True
    return keep


def critic_values(logits: torch.Tensor) -> torch.Tensor:
    """[C] V(s) = min over heads of softmax(logits)[1] = P(success); logits (H, B, 2) → (B,)."""
    return torch.softmax(logits.float(), dim=-1)[..., 1].min(dim=0).values


def critic_state_loss(logits: torch.Tensor, outcome: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The double critic's loss on single states: Σ over heads of CE(head(s), y), y = 1[outcome ≥ 0.5].

    `logits` (H, B, 2); `outcome` (B,). Each head's cross-entropy is a mean over the batch, as in
    `critic_loss`, which is this loss on s plus this loss on s'. Returns the loss and the heads'
    mean accuracy.
    """
    target = (outcome >= SUCCESS_THRESHOLD).long()  # (B,)
    loss = logits.new_zeros((), dtype=torch.float32)
    for head_logits in logits:  # each (B, 2)
        loss = loss + F.cross_entropy(head_logits.float(), target)
    accuracy = (logits.argmax(-1) == target).float().mean()  # over (H, B)
    return loss, accuracy.detach()


def critic_loss(
    logits: torch.Tensor, next_logits: torch.Tensor, outcome: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """[C] double critic: Σ over heads of CE(head(s), y) + CE(head(s'), y), y = 1[outcome ≥ 0.5]; [P eq. 7] is its BCE.

    `logits`, `next_logits` (H, B, 2); `outcome` (B,). Returns the loss and the heads' mean
    accuracy on s (the release logs per-head accuracy on s).
    """
    loss, accuracy = critic_state_loss(logits, outcome)
    next_loss, _ = critic_state_loss(next_logits, outcome)
    return loss + next_loss, accuracy


def yes_probability(last_logits: torch.Tensor, yes_id: int, no_id: int) -> torch.Tensor:
    """ORM score [C]: e^yes / (e^yes + e^no) from next-token logits (B, V) → (B,)."""
    pair = last_logits[:, [yes_id, no_id]].float()  # (B, 2)
    return torch.softmax(pair, dim=-1)[:, 0]


def orm_loss(last_logits: torch.Tensor, label: torch.Tensor, yes_id: int, no_id: int) -> torch.Tensor:
    """ORM SFT [C: LLaMA-Factory SFT on "YES"/"NO"]: next-token CE over the whole vocabulary; (B, V), (B,)."""
    target = torch.where(label >= SUCCESS_THRESHOLD, yes_id, no_id).long()  # (B,)
    return F.cross_entropy(last_logits.float(), target)
