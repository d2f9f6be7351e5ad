"""One training stage under Fabric: epochs over a dataloader, calling a module's `compute_loss`.

The critic, actor, ORM and SFT stages of the phase loop all run through `train_module`, so the
strategy (DDP, FSDP, FSDP2), gradient clipping, accumulation, progress and metric logging are
written once. Every rank runs the same number of steps (the DataModule pads its distributed
sampler), since a rank that stopped early would leave the others waiting in a collective.

What a stage trained is saved with `save_model_dir`: an HF model directory that appears whole or
not at all (`webrl.cache_builds`: staged, then renamed with its done marker), so a cache or a resumed
run never loads half a model.
"""

from __future__ import annotations

import glob
import itertools
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric

from webrl.cache_builds import publish_model_dir, staging_dir
from webrl.host_memory import release_freed_memory
from webrl.progress import progress_bar
from webrl.stage_checkpoint import SHARDED_STRATEGIES, StageCheckpoint, StageProgress, batches, stage_meta
from webrl.stage_settings import StageSettings
from webrl.tail_average import TailAverage

log = logging.getLogger(__name__)


def lr_factor(step: int, total: int, settings: StageSettings) -> float:
    """Multiplier of the base learning rate at optimiser step `step` of `total`."""
    warmup = int(total * settings.warmup_ratio)
    if warmup and step < warmup:
        return (step + 1) / warmup
    if settings.schedule == "cosine" and total > warmup:
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0


def setup_for_training(fabric: Fabric, module: Any, *, activation_checkpointing: bool = False) -> tuple[Any, Any]:
    """Set up `module` under the strategy, then an optimizer over its parameters as they are after that.

    The order matters: FSDP2's `fully_shard` replaces parameters with sharded ones in place, so an
    optimizer built before would step tensors the model no longer uses. `compute_loss` is marked
    as a forward method so that wrapping strategies (DDP) see it. With `activation_checkpointing`,
    every Hugging Face model inside `module` recomputes each decoder layer in backward (non-reentrant
    checkpoints, which FSDP and DDP both accept): at 16k tokens an 8B layer's saved activations are
    3 GiB, its input alone 0.1 GiB (`webrl.memory_plan`).
    """
    if activation_checkpointing:
        for model in module.modules():
            if getattr(model, "supports_gradient_checkpointing", False) and hasattr(
                model, "gradient_checkpointing_enable"
            ):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    wrapped = fabric.setup_module(module)
    optimizer = fabric.setup_optimizers(module.configure_optimizers())
    wrapped.mark_forward_method("compute_loss")
    return wrapped, optimizer


def train_micro_batch(
    fabric: Fabric,
    module: Any,
    optimizer: torch.optim.Optimizer,
    batch: Any,
    settings: StageSettings,
    *,
    optimizer_step: bool,
    loss_scale: float = 1.0,
    step_nonfinite: list[str] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Forward and backward on one micro-batch; with `optimizer_step`, sync the gradients, clip them and step.

    The loss is multiplied by `loss_scale`, this micro-batch's share of its optimizer step (`step_loss_scales`),
    so that the step follows the mean gradient over every unit (row or token) of the step on every rank.

    The gradients of an optimizer step's earlier micro-batches accumulate locally: the strategy's
    all-reduce runs once per step, on its last micro-batch. The loss is computed under the precision's
    autocast here: Fabric enters it only when a marked method goes through a wrapper's forward (DDP,
    FSDP1), and a module sharded in place (FSDP2, `model_parallel`) or left unwrapped (one device) has
    none, so `bf16-mixed` would otherwise train in fp32 (measured on an H200: twice the activation memory).

    A non-finite loss raises `FloatingPointError` on every rank before any weight changes (`_check_finite`). The
    caller that passes `step_nonfinite` (a list of its own per optimizer step) lets the ranks agree once per step,
    on its last micro-batch, instead of once per micro-batch.
    """
    with fabric.no_backward_sync(module, enabled=not optimizer_step):
        with fabric.autocast():
            loss, metrics = module.compute_loss(batch)
        if _check_finite(fabric, module, loss, metrics, optimizer_step=optimizer_step, pending=step_nonfinite):
            fabric.backward(loss * loss_scale)
    if optimizer_step:
        if settings.grad_clip > 0:
            fabric.clip_gradients(module, optimizer, max_norm=settings.grad_clip, error_if_nonfinite=False)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if fabric.device.type == "cpu":  # freed activations back to the OS, or the heap grows (webrl.host_memory)
            release_freed_memory()
    return loss, metrics


def step_loss_scales(fabric: Fabric, module: Any, step_batches: list[Any]) -> list[float]:
    """Each micro-batch's loss multiplier in one optimizer step: its units over the step's units on all ranks.

    A module's loss is a mean over units (rows, or an SFT batch's action tokens; `WebRLModule.loss_weight`;
    a module without that method counts each micro-batch as one unit). Dividing each loss by the number of
    micro-batches instead would weigh a token of a short micro-batch above one of a long one, and a rank with
    few tokens above one with many. The strategy averages gradients over ranks, so the scales are multiplied
    by the world size. On one process with one micro-batch a step, every scale is exactly 1.
    """
    raw = getattr(module, "_original_module", module)
    weigh = getattr(raw, "loss_weight", None)
    weights = [float(weigh(batch)) if weigh is not None else 1.0 for batch in step_batches]
    total = sum(weights)
    if fabric.world_size > 1:
        local = torch.tensor(total, dtype=torch.float64, device=fabric.device)
        total = float(fabric.all_reduce(local, reduce_op="sum"))
    if total <= 0:
        return [0.0 for _ in weights]
    return [weight * fabric.world_size / total for weight in weights]


def _check_finite(
    fabric: Fabric,
    module: Any,
    loss: torch.Tensor,
    metrics: dict[str, Any],
    *,
    optimizer_step: bool,
    pending: list[str] | None,
) -> bool:
    """Whether the loss is finite; raise `FloatingPointError` on every rank, before any step, if it is not on one.

    A NaN or infinite loss would make every gradient, then (through the clip and AdamW) every weight NaN, and the
    stage would go on to save and sync that model. Under several processes the ranks agree through an all-reduce
    of one flag per rank: a rank that raised alone would leave the others waiting in the gradient all-reduce until
    the process group's timeout (30 minutes with NCCL). With `pending`, a micro-batch that does not step only notes
    its non-finite loss there (its backward is skipped: no collective runs in it) and the ranks agree on the step's
    last micro-batch, which syncs them anyway: an all-reduce on every micro-batch would add a sync where the ranks
    otherwise run free (2 gloo ranks, tiny model: 12.4 instead of 8.8 ms a micro-batch at `accumulate=4`).
    Every rank raises the same message; the rank whose loss it was logs its value and metrics.
    """
    owner = type(getattr(module, "_original_module", module)).__name__
    if bool(torch.isfinite(loss.detach()).all()):
        problem = None
    else:
        problem = f"the loss is {loss.detach().float().item()} on this micro-batch (its other metrics: "
        problem += f"{_finite_view(metrics)})"
    if fabric.world_size == 1:
        if problem:
            raise FloatingPointError(f"{owner}: {problem}; no gradient of it was applied")
        return True
    local = pending if pending is not None else []
    local.extend([problem] if problem else [])
    if not optimizer_step and pending is not None:
        return problem is None
    flags = torch.zeros(fabric.world_size, dtype=torch.float32, device=fabric.device)
    flags[fabric.global_rank] = 1.0 if local else 0.0
    failed = [rank for rank, flag in enumerate(fabric.all_reduce(flags, reduce_op="sum").tolist()) if flag]
    if not failed:
        return True
    for seen in local:
        log.error("%s on rank %d: %s", owner, fabric.global_rank, seen)
    raise FloatingPointError(
        f"{owner}: the loss is not finite on rank {', '.join(map(str, failed))} of {fabric.world_size} (logged "
        "there); no gradient of it was applied on any rank"
    )


def _finite_view(metrics: dict[str, Any]) -> dict[str, float]:
    """The scalar metrics of a micro-batch, rounded, for an error message."""
    return {key: round(float(value), 4) for key, value in metrics.items() if getattr(value, "numel", lambda: 1)() == 1}


def train_module(
    fabric: Fabric,
    module: Any,
    optimizer: torch.optim.Optimizer,
    dataloader: Any,
    settings: StageSettings,
    *,
    name: str,
    step_offset: int = 0,
    progress: bool = True,
    checkpoint: StageCheckpoint | None = None,
) -> dict[str, float]:
    """Train `module` (already `fabric.setup`) for `settings.epochs`; returns the stage's mean metrics.

    `step_offset` continues the global step count across phases so that logged curves line up. With a
    `checkpoint`, the stage resumes from the state saved there by an interrupted launch and saves its
    own state as often as the checkpoint says (`webrl.stage_checkpoint`); the caller discards it once
    the stage's product is saved. With `settings.average_tail`, the weights it leaves are the mean over its last
    optimiser steps (`webrl.tail_average`).
    """
    batches_per_epoch = len(dataloader)
    if batches_per_epoch == 0:  # the stage's batch stream would loop over the empty loader for ever
        raise ValueError(f"stage {name!r}: the dataloader has no batch to train on")
    total_batches = max(1, int(round(batches_per_epoch * settings.epochs)))
    total_steps = max(1, math.ceil(total_batches / settings.accumulate))
    meta = stage_meta(name, settings, total_batches, batches_per_epoch, fabric.world_size)
    base_lrs = [group["lr"] for group in optimizer.param_groups]  # before a resume loads the scheduled ones
    tail = TailAverage(total_steps, settings.average_tail)
    if checkpoint and tail.steps and isinstance(fabric.strategy, SHARDED_STRATEGIES):
        # The mean lives in the optimiser's state, and a sharded load restores only the keys the optimiser has.
        log.warning("stage %r: no saves within the stage, whose running weight mean a sharded save would lose", name)
        checkpoint = None
    done = (checkpoint and checkpoint.load(fabric, module, optimizer, meta)) or StageProgress()
    started = time.perf_counter() - done.seconds
    bar = progress_bar(total=total_batches, desc=name, unit="batch", enabled=progress and fabric.is_global_zero)
    bar.update(done.batch_index)
    module.train()
    stream = batches(dataloader, done, total_batches)
    while done.batch_index < total_batches:
        step = done.batch_index // settings.accumulate
        _set_lrs(optimizer, base_lrs, lr_factor(step, total_steps, settings))
        group_size = min(settings.accumulate, total_batches - step * settings.accumulate)
        step_batches = list(itertools.islice(stream, group_size))
        first = done.batch_index + 1
        try:
            _train_step(fabric, module, optimizer, step_batches, settings, done, name=name, offset=step_offset, bar=bar)
        except FloatingPointError as err:
            where = f"optimizer step {step + 1} of {total_steps}, batches {first}-{first + group_size - 1}"
            raise FloatingPointError(f"stage {name!r}, {where} of {total_batches}: {err}") from err
        tail.after_step(optimizer, step)
        if checkpoint and done.batch_index < total_batches and checkpoint.due(fabric):
            done.seconds = time.perf_counter() - started
            checkpoint.save(fabric, module, optimizer, done, meta)
    bar.close()
    _set_lrs(optimizer, base_lrs, 1.0)
    summary = _summary(name, done, time.perf_counter() - started, optimizer_steps=total_steps)
    if averaged := tail.finish(optimizer):
        summary[f"{name}/averaged_steps"] = float(averaged)
    return summary


def _train_step(
    fabric: Fabric,
    module: Any,
    optimizer: torch.optim.Optimizer,
    step_batches: list[Any],
    settings: StageSettings,
    done: StageProgress,
    *,
    name: str,
    offset: int,
    bar: Any,
) -> None:
    """One optimizer step over its micro-batches, each logged at its global batch index and added to `done`."""
    scales = step_loss_scales(fabric, module, step_batches)
    nonfinite: list[str] = []
    for index, (batch, scale) in enumerate(zip(step_batches, scales, strict=True)):
        is_last_micro = index == len(step_batches) - 1
        loss, metrics = train_micro_batch(
            fabric,
            module,
            optimizer,
            batch,
            settings,
            optimizer_step=is_last_micro,
            loss_scale=scale,
            step_nonfinite=nonfinite,
        )
        values = _record(done, batch, metrics)
        fabric.log_dict({**values, f"{name}/lr": optimizer.param_groups[0]["lr"]}, step=offset + done.batch_index)
        bar.update(1)
        bar.set_postfix(loss=f"{values.get(f'{name}/loss', float(loss.detach())):.4f}")
        done.batch_index += 1


def _set_lrs(optimizer: torch.optim.Optimizer, base_lrs: list[float], factor: float) -> None:
    for group, base in zip(optimizer.param_groups, base_lrs, strict=True):
        group["lr"] = base * factor


def _record(done: StageProgress, batch: Any, metrics: dict[str, Any]) -> dict[str, float]:
    """Add one micro-batch's metrics and tokens to the stage's running totals; its metrics as floats."""
    values = {key: float(value) for key, value in metrics.items()}
    for key, value in values.items():
        done.sums[key] = done.sums.get(key, 0.0) + value
    done.count += 1
    if "attention_mask" in batch:
        done.tokens += int(batch["attention_mask"].sum())
    return values


def _summary(name: str, done: StageProgress, elapsed: float, optimizer_steps: int) -> dict[str, float]:
    """The stage's mean metrics, its micro-batches (`steps`, the x-axis of its logged curves) and, apart, its
    optimiser steps: they differ by `accumulate`, and the schedule and the paper's step counts are in the latter."""
    summary = {key: value / max(1, done.count) for key, value in done.sums.items()}
    summary[f"{name}/steps"] = float(done.count)
    summary[f"{name}/optimizer_steps"] = float(optimizer_steps)
    summary[f"{name}/seconds"] = elapsed
    if done.tokens:
        summary[f"{name}/tokens_per_s"] = done.tokens / max(elapsed, 1e-9)
    return summary


def save_model_dir(
    fabric: Fabric,
    model: Any,
    tokenizer: Any,
    target: Path,
    info: dict[str, Any],
    state: dict[str, Any] | None = None,
) -> Path:
    """Write `model` as an HF model directory at `target`, atomically, under any strategy.

    The full weights are gathered first, a collective under FSDP/FSDP2 that every rank joins; a
    rank-0-only `save_pretrained` of sharded weights would start a gather the other ranks never
    join and pair it with their next barrier instead. A caller that keeps the weights (to push them
    into an engine) gathers them itself and passes that `full_state_dict(model)` as `state`. The
    directory is written in a `staging_dir` of its own, removed if the save fails.
    """
    from webrl.inference.weight_sync import full_state_dict

    if state is None:
        state = full_state_dict(model)
    if fabric.is_global_zero:
        # A save that crashed left its staging directory (a model's size): its writer is gone, since a target has
        # one writer at a time (a run's rank 0, or the holder of a cache entry's `build_lock`).
        for stale in target.parent.glob(glob.escape(f".{target.name}.tmp-") + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = staging_dir(target)
        try:
            base = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA: merged into base
            base.save_pretrained(tmp, state_dict=dict(state))  # a copy: it deletes a tied weight's second name
            tokenizer.save_pretrained(tmp)
            publish_model_dir(tmp, target, info)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone already once published
    fabric.barrier()
    return target
