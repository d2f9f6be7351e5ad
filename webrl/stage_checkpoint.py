"""A training stage's state saved while it runs, so that an interrupted stage continues where it stopped.

Phases resume stage by stage (`webrl.run_state`), but a stage itself restarted from its first batch: on a
2-core CPU the two-epoch SmolLM2 SFT takes over two hours and its ORM one, so a crash, a Ctrl-C or the end
of a machine's lease lost all of it. `train_module` now saves, every `resume.stage_checkpoint_minutes`,
what the rest of the stage depends on: the weights, the optimiser's state, how many batches were
trained, the running sums of the stage's metrics, the global RNG and the precision plugin's state (under
`16-mixed`, its gradient scaler's scale and growth tracker). A relaunch with the same settings
loads it, draws the dataloader's batches up to that point again without training on them (the samplers
are seeded by epoch, so the order is the same), and goes on; on CPU the result is the same weights as an
uninterrupted stage (tests/test_stage_checkpoint.py).

The state is written through `fabric.save` (any strategy: FSDP saves shards) into a folder that replaces
the last one in one rename (`publish_dir`), beside a `meta.json` of the stage's shape and of the settings
its result depends on (`StageCheckpoint.inputs`); a checkpoint of a stage with another shape (other settings,
data or world size) or other inputs is set aside with a line that names them, and the stage starts over, so
that no stage trains half under one config and half under another. So is a state saved in shards (`fsdp`,
`model_parallel`) found by a launch whose strategy reads only a whole one (one device, `ddp`): Fabric would
open the shards' folder as a file, and every relaunch stopped on an `IsADirectoryError` naming no setting (the
SFT and ORM caches are keyed by the world size, not the strategy). A whole state loads under any strategy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from lightning.fabric import Fabric
from lightning.fabric.strategies import FSDPStrategy, ModelParallelStrategy

from webrl.config_checks import flatten
from webrl.data.atomic_io import fault_point, moved_aside, publish_dir, write_json_atomic
from webrl.stage_settings import StageSettings

STATE_NAME = "state.ckpt"
META_NAME = "meta.json"
PRECISION_KEY = "precision"
"""The key of the precision plugin's state (its gradient scaler's, under `16-mixed`) in the saved state."""
SHARDED_STRATEGIES = (FSDPStrategy, ModelParallelStrategy)
"""Strategies that save a stage's state in shards (a folder) and read it back."""


@dataclass
class StageProgress:
    """How far a stage got: batches trained, metric sums over them, tokens seen, seconds spent, and the global
    RNG's state when the current epoch's batches began to be drawn (`epoch_rng`) and when the state was saved (`rng`).
    """

    batch_index: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    count: int = 0
    tokens: int = 0
    seconds: float = 0.0
    epoch_rng: torch.Tensor | None = None
    rng: torch.Tensor | None = None
    cuda_rng: list[torch.Tensor] | None = None
    """The CUDA generators' states at the save (dropout on a GPU draws from them), restored as the state loads."""


@dataclass
class StageCheckpoint:
    """Where a stage keeps its running state (`path`, a folder) and how often it saves it (`every_s`; 0 = never).

    The state includes the precision plugin's (`fabric.strategy.precision.state_dict()`), which `fabric.save`
    leaves out: under `16-mixed` it is the gradient scaler's scale and growth tracker. A stage resumed without
    them would start again from the initial scale of 65536 and skip, on overflow, optimiser steps that the
    uninterrupted stage took at its lowered scale, or scale the gradients differently, so the weights would
    part from an uninterrupted stage's. Precisions without a scaler save an empty dict.
    """

    path: Path
    every_s: float
    inputs: dict[str, Any] = field(default_factory=dict)
    """Settings beyond the stage's optimiser settings that its result depends on (a loss's beta, LoRA's rank,
    the seed), where the stage's output path does not already encode them (a run directory's critic and actor)."""

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.inputs = json.loads(json.dumps(self.inputs))  # as meta.json holds them: tuples become lists
        self._last_save = time.monotonic()

    @classmethod
    def beside(cls, target: Path, minutes: float, inputs: dict[str, Any] | None = None) -> StageCheckpoint:
        """The checkpoint of the stage that will publish `target`: `<target>.resume`, next to it."""
        return cls(Path(target).with_name(Path(target).name + ".resume"), 60.0 * minutes, inputs or {})

    def _meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        return meta | {"inputs": self.inputs} if self.inputs else meta

    @property
    def _tmp(self) -> Path:
        """Where a save is written before it replaces the last one."""
        return self.path.with_name(self.path.name + ".tmp")

    def due(self, fabric: Fabric) -> bool:
        """Rank 0's clock says a save is due; every rank gets its answer, since saving is a collective."""
        due = self.every_s > 0 and time.monotonic() - self._last_save >= self.every_s
        if fabric.world_size > 1:
            due = bool(fabric.broadcast(due, src=0))
        return due

    def save(self, fabric: Fabric, module: Any, optimizer: Any, progress: StageProgress, meta: dict[str, Any]) -> None:
        """Write the state into `<path>.tmp`, then put it in place of the last one in one rename.

        The precision plugin's state is saved after the step's scaler update, as the next step will find it.
        """
        started = time.monotonic()
        tmp = self._tmp
        if fabric.is_global_zero:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        fabric.barrier()
        progress.rng = torch.get_rng_state()
        progress.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        state = {"module": module, "optimizer": optimizer, "progress": dataclasses.asdict(progress)}
        fabric.save(tmp / STATE_NAME, state | {PRECISION_KEY: fabric.strategy.precision.state_dict()})
        if fabric.is_global_zero:
            write_json_atomic(tmp / META_NAME, self._meta(meta))
            publish_dir(tmp, self.path)
        fabric.barrier()
        self._last_save = time.monotonic()
        fabric.print(f"{meta['name']}: state saved at batch {progress.batch_index} in {self._last_save - started:.1f}s")
        fault_point(f"stage_checkpoint:{meta['name']}")

    def load(self, fabric: Fabric, module: Any, optimizer: Any, meta: dict[str, Any]) -> StageProgress | None:
        """The saved progress, with `module` and `optimizer` restored; None when there is none that fits.

        The precision plugin's saved state (the gradient scaler's) is restored here; the global RNG is restored
        by `batches` as it reaches the saved place in the data.
        """
        folder = self._complete_folder()
        if folder is None:
            return None
        saved, meta = flatten(json.loads((folder / META_NAME).read_text(encoding="utf-8"))), flatten(self._meta(meta))
        if saved != meta:
            differing = sorted(key for key in meta.keys() | saved.keys() if meta.get(key) != saved.get(key))
            fabric.print(
                f"{meta['name']}: the checkpoint at {self.path} is of another stage ({', '.join(differing)}"
                + " differ); starting the stage over"
            )
            return None
        if (folder / STATE_NAME).is_dir() and not isinstance(fabric.strategy, SHARDED_STRATEGIES):
            fabric.print(
                f"{meta['name']}: the checkpoint at {self.path} was saved in shards (fabric.strategy fsdp or "
                f"model_parallel), which {type(fabric.strategy).__name__} cannot read; starting the stage over"
            )
            return None
        state = {"module": module, "optimizer": optimizer}
        # A module that keeps a copy of its starting self (the actor's π_ref) says how to load over it.
        loading = getattr(getattr(module, "module", module), "loading_mid_stage", contextlib.nullcontext)
        with loading():
            rest = fabric.load(folder / STATE_NAME, state)
        _restore_precision(fabric, rest.get(PRECISION_KEY))
        progress = StageProgress(**rest["progress"])
        if progress.cuda_rng is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(progress.cuda_rng)
        fabric.print(f"{meta['name']}: resuming at batch {progress.batch_index} of {meta['total_batches']} ({folder})")
        self._last_save = time.monotonic()
        return progress

    def _complete_folder(self) -> Path | None:
        """The last state saved whole: `path`, or the one `publish_dir` had moved aside when a crash came
        between its two renames (the new one not yet in place)."""
        for folder in (self.path, moved_aside(self.path)):
            if (folder / META_NAME).exists():
                return folder
        return None

    def discard(self, fabric: Fabric) -> None:
        """Remove the state once the stage's product is saved: a later launch of it starts afresh."""
        if fabric.is_global_zero:
            for folder in (self.path, self._tmp, moved_aside(self.path)):
                shutil.rmtree(folder, ignore_errors=True)
        fabric.barrier()


def _restore_precision(fabric: Fabric, state: dict[str, Any] | None) -> None:
    """Put the saved precision plugin's state back into `fabric`'s plugin, where there is one to put back.

    A checkpoint written before the precision plugin's state was saved has no such entry (None), and one saved
    under a precision without a scaler has an empty dict; loading an empty dict into an enabled GradScaler is an
    error, so both leave the plugin as it was built.
    """
    if state:
        fabric.strategy.precision.load_state_dict(state)


def stage_meta(name: str, settings: StageSettings, total_batches: int, batches_per_epoch: int, world_size: int) -> dict:
    """What a saved state must match to be resumed: the stage, its settings and the shape of its data."""
    return {
        "name": name,
        "settings": dataclasses.asdict(settings),
        "total_batches": total_batches,
        "batches_per_epoch": batches_per_epoch,
        "world_size": world_size,
    }


def batches(dataloader: Any, progress: StageProgress, total_batches: int) -> Iterator[Any]:
    """The stage's batches from `progress.batch_index` (which the caller advances) until `total_batches`.

    A resumed stage draws the batches it trained before again, without yielding them, so that every
    sampler is where it was (seeded per epoch, or by a generator that each epoch advances). The global
    RNG, which a loader without a generator of its own draws from when an epoch's iterator starts (its
    shuffle seed), is set back to where it was then, and to where it was at the save once the place is
    reached, so that the rest of the stage draws what the interrupted launch would have.
    """
    resume_at, epoch_rng, save_rng = progress.batch_index, progress.epoch_rng, progress.rng
    drawn = 0
    while progress.batch_index < total_batches:
        if resume_at and drawn == resume_at:
            torch.set_rng_state(save_rng)
        elif resume_at and drawn < resume_at < drawn + len(dataloader):
            torch.set_rng_state(epoch_rng)
        progress.epoch_rng = torch.get_rng_state()
        for batch in dataloader:
            drawn += 1
            if drawn <= resume_at:
                if drawn == resume_at:
                    torch.set_rng_state(save_rng)
                continue
            if progress.batch_index >= total_batches:
                break
            yield batch
