"""Getting the trained actor's weights into the inference engine, behind one interface.

After each phase the actor has new weights and the next phase's rollouts must sample from them.
Two ways, chosen by config:
- "disk" (`DiskWeightSync`, the default, works for every engine that can reload): gather a full
  state dict, write it as safetensors with the model's config (`save_pretrained`), and ask the
  engine to reload from that directory. The directory is also a servable checkpoint.
- "push" (`PushWeightSync`): hand the tensors to the running engine in memory: vLLM's workers
  load them through `reload_weights` (reached via `collective_rpc`), `HFEngine` copies them with
  `load_state_dict`. No disk round trip.

Both start from `full_state_dict`, which turns whatever the trainer holds into plain tensors with
Hugging Face checkpoint names: it unwraps Fabric/DDP wrappers, gathers FSDP/FSDP2-sharded
parameters with `torch.distributed.checkpoint` (a collective: call `sync` on every rank; only rank 0
writes or pushes), and folds LoRA adapters into their base weights (W + scaling · B A) without
touching the trained model.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

log = logging.getLogger(__name__)

SYNC_METHODS = ("disk", "push")
_PEFT_PREFIX = "base_model.model."


class WeightSync(Protocol):
    """Copies a model's current weights into an inference engine."""

    def sync(self, model: nn.Module) -> None: ...


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's model inside Fabric's `_FabricModule` or DDP (both keep it in `.module`)."""
    while isinstance(getattr(model, "module", None), nn.Module):
        model = model.module
    return model


def full_state_dict(model: nn.Module, merge_lora: bool = True) -> dict[str, torch.Tensor]:
    """A full, unsharded CPU state dict; with `merge_lora`, LoRA folded in and base-model names.

    Collective when the model is sharded: every rank must call it; ranks other than 0 get {}.
    Pass `merge_lora=False` to checkpoint a LoRA module as it is (adapters kept, peft names).
    """
    model = unwrap_model(model)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
        return {}
    state = {name: tensor.detach().to("cpu") for name, tensor in state.items()}
    if merge_lora and any(".lora_A." in name for name in state):
        state = _merge_lora(model, state)
    return state


def _merge_lora(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fold every active LoRA adapter into its base weight and return base-model names only.

    `scaling` is read from each LoRA layer (it carries per-module rank/alpha patterns), so the
    merge matches peft's own `merge_and_unload`.
    """
    scalings = {name: dict(module.scaling) for name, module in model.named_modules() if hasattr(module, "lora_A")}
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if ".lora_" in name:
            continue
        module_name, _, param = name.rpartition(".")
        if module_name.endswith(".base_layer") and param == "weight":
            layer = module_name.removesuffix(".base_layer")
            tensor = tensor.clone()
            for adapter, scaling in scalings.get(layer, {}).items():
                a = state.get(f"{layer}.lora_A.{adapter}.weight")  # (r, in)
                b = state.get(f"{layer}.lora_B.{adapter}.weight")  # (out, r)
                if a is not None and b is not None:
                    tensor += scaling * (b.float() @ a.float()).to(tensor.dtype)  # (out, in)
        merged[name.replace(".base_layer.", ".").removeprefix(_PEFT_PREFIX)] = tensor
    return merged


def _is_rank_zero() -> bool:
    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


class DiskWeightSync:
    """Write the model as a `save_pretrained` directory and make the engine reload it.

    The engine lives on rank 0; other ranks pass `engine=None` and still call `sync` (the gather is
    a collective).

    Each sync writes `directory/v{N}` and, once the engine has reloaded, removes the previous one
    (`keep_last` directories are kept). `tokenizer`, when given, is saved beside the weights so
    that each directory is a complete model another process can serve.
    """

    def __init__(self, engine: Any, directory: str | Path, tokenizer: Any = None, keep_last: int = 1) -> None:
        if engine is not None and not hasattr(engine, "reload"):
            raise TypeError(f"{type(engine).__name__} cannot reload weights from disk; use another engine or sync")
        if keep_last < 1:
            raise ValueError(f"DiskWeightSync keep_last must be >= 1, got {keep_last}")
        self.engine = engine
        self.directory = Path(directory)
        self.tokenizer = tokenizer
        self.keep_last = keep_last
        self.version = 0
        self.written: list[Path] = []

    def sync(self, model: nn.Module) -> Path | None:
        """Returns the directory written (None on ranks other than 0)."""
        state = full_state_dict(model)
        if not _is_rank_zero():
            return None
        if self.engine is None:
            raise ValueError("DiskWeightSync on rank 0 needs the engine (None is only for the other ranks)")
        self.version += 1
        target = self.directory / f"v{self.version}"
        base = unwrap_model(model)
        base = base.get_base_model() if hasattr(base, "get_base_model") else base
        if not hasattr(base, "save_pretrained"):
            raise TypeError(f"DiskWeightSync needs a transformers model (save_pretrained); got {type(base).__name__}")
        base.save_pretrained(target, state_dict=state, safe_serialization=True)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(target)
        self.engine.reload(target)
        self.written.append(target)
        while len(self.written) > self.keep_last:
            shutil.rmtree(self.written.pop(0), ignore_errors=True)
        log.info("weights synced to the engine from %s", target)
        return target


class PushWeightSync:
    """Hand the tensors to the running engine in memory (vLLM `push_weights`, HF `load_state_dict`)."""

    def __init__(self, engine: Any) -> None:
        if engine is not None and not (hasattr(engine, "push_weights") or hasattr(engine, "load_state_dict")):
            raise TypeError(f"{type(engine).__name__} cannot take weights in memory; use DiskWeightSync")
        self.engine = engine

    def sync(self, model: nn.Module) -> None:
        state = full_state_dict(model)
        if not _is_rank_zero():
            return
        if self.engine is None:
            raise ValueError("PushWeightSync on rank 0 needs the engine (None is only for the other ranks)")
        if hasattr(self.engine, "push_weights"):
            self.engine.push_weights(state.items())
        else:
            self.engine.load_state_dict(state)
        log.info("pushed %d tensors into the engine", len(state))


def build_weight_sync(
    method: str, engine: Any, directory: str | Path | None = None, tokenizer: Any = None
) -> DiskWeightSync | PushWeightSync:
    """`method` is "disk" (needs `directory`) or "push"."""
    if method == "disk":
        if directory is None:
            raise ValueError("weight sync method 'disk' needs a directory to write the weights to")
        return DiskWeightSync(engine, directory, tokenizer=tokenizer)
    if method == "push":
        return PushWeightSync(engine)
    raise ValueError(f"unknown weight sync method {method!r}; choose one of {list(SYNC_METHODS)}")
