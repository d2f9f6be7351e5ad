"""The LightningModule contract shared by the actor, the critic and the ORM.

Each subclass computes its loss in `compute_loss(batch) -> (loss, metrics)`; `training_step` and
`validation_step` only call it and log. That keeps one loss path for both drivers: Lightning's
`Trainer.fit` (through the steps) and webrl's Fabric phase loop (which calls `compute_loss`
itself, after `fabric.setup`, marking it with `mark_forward_method` where a strategy wraps the
module). Optimisers are a plain AdamW over the trainable parameters, as the release uses.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import lightning as L
import torch

HPARAMS_IGNORED = ("model", "tokenizer", "critic")
"""Constructor arguments kept out of `hparams` as objects: the model is saved by its directory (`model_source`),
the tokenizer is the model directory's, and an actor's critic is attached again by the caller."""


class WebRLModule(L.LightningModule):
    """Base for webrl's trainable modules: AdamW, namespaced metrics, loss in `compute_loss`.

    Subclasses set `namespace` (the metric prefix, e.g. "actor") and implement `compute_loss`,
    returning metrics already named `"{namespace}/{name}"`.
    """

    namespace = "module"

    def __init__(self, lr: float, weight_decay: float = 0.0) -> None:
        super().__init__()
        if lr <= 0:
            raise ValueError(f"{self.namespace}.lr must be > 0, got {lr}")
        self.lr = lr
        self.weight_decay = weight_decay

    def save_init_arguments(self, model: Any) -> None:
        """`save_hyperparameters` of the subclass's constructor, with the model as its directory (`model_source`).

        Call it first thing in the subclass's `__init__` (it reads that frame), so that
        `Module.load_from_checkpoint(ckpt)` and Lightning's `Trainer` checkpoints rebuild the module.
        """
        self.save_hyperparameters(ignore=list(HPARAMS_IGNORED), frame=inspect.currentframe().f_back)
        self.hparams["model"] = model_source(model)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def loss_weight(self, batch: dict[str, Any]) -> float:
        """How many units `compute_loss(batch)` is the mean over: its rows, unless a subclass averages over tokens.

        The training loop weighs each micro-batch of an optimizer step by it (`webrl.training`), over every
        rank, so that a step's gradient is the mean over all its units rather than a mean of per-batch means.
        """
        return float(_batch_size(batch))

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Parameters the optimiser updates: frozen ones (a reference model, LoRA's base) are left out."""
        return [p for p in self.parameters() if p.requires_grad]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.trainable_parameters(), lr=self.lr, weight_decay=self.weight_decay)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss, metrics = self.compute_loss(batch)
        self.log_dict(metrics, batch_size=_batch_size(batch))
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss, metrics = self.compute_loss(batch)
        self.log_validation(metrics, batch)
        return loss

    def log_validation(self, metrics: dict[str, Any], batch: dict[str, Any]) -> None:
        """Log `metrics` as `{namespace}/val_{name}`; a torchmetrics object among them is computed over the epoch."""
        prefix = f"{self.namespace}/"
        renamed = {f"{prefix}val_{key.removeprefix(prefix)}": value for key, value in metrics.items()}
        self.log_dict(renamed, batch_size=_batch_size(batch))


def model_source(model: Any) -> str | None:
    """The directory `model` reloads from: the path given, or the local directory a model object was loaded from.

    None for a model built in memory: its checkpoint then needs `model=` and `tokenizer=` again on reload.
    """
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    name = getattr(model, "name_or_path", "")
    return str(name) if name and Path(name).is_dir() else None


def require_model(model: Any, module: str) -> Any:
    """`model` itself, or an error saying how to reload a checkpoint whose model was built in memory."""
    if model is None:
        raise ValueError(
            f"{module} has no model: its checkpoint was made from a model object with no local directory; "
            f"pass model= and tokenizer= to {module}.load_from_checkpoint"
        )
    return model


def _batch_size(batch: dict[str, Any]) -> int:
    """Rows in the batch, read from its first tensor (every webrl batch is a dict of (B, ...) tensors)."""
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    raise ValueError(f"batch has no tensor to take its size from (keys: {sorted(batch)})")
