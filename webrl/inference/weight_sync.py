"""The trained model's weights as one plain state dict, the form every checkpoint and engine reload starts from.

`full_state_dict` turns whatever the trainer holds into plain CPU tensors with Hugging Face
checkpoint names: it unwraps Fabric/DDP wrappers, gathers FSDP/FSDP2-sharded parameters with
`torch.distributed.checkpoint` (a collective: every rank calls it; only rank 0 gets the tensors),
and folds LoRA adapters into their base weights (W + scaling · B A; DoRA and `modules_to_save` as
peft merges them) without touching the trained model. The phase loop always saves that state as a
model directory (checkpoints and resume read it); an engine then either reloads the directory
(`ReloadableEngine.reload`) or, with `engines.weight_sync=memory`, takes the same tensors in memory
(`ReloadableEngine.push_weights`): `broadcast_state` streams rank 0's tensors to every rank, one at a
time, so a rank with an engine but no gathered state (any rank but 0) gets them too without ever
holding a second full copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

_PEFT_PREFIX = "base_model.model."
_UNMERGED_MARKER = ".token_adapter."
"""In the name of a weight that peft's trainable tokens (`trainable_token_indices`) wrap, which this merge does not
fold in."""


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
    if merge_lora and any(".lora_" in name for name in state):
        state = _merge_lora(model, state)
    return state


def broadcast_state(state: dict[str, torch.Tensor], src: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """Rank `src`'s `(name, tensor)` pairs on every rank, in its order, one broadcast per tensor.

    A collective: every rank must iterate it to the end (ranks other than `src` pass {} as `state`).
    Rank `src` yields its own tensors (on the broadcast's device); the others get fresh ones. Under
    NCCL the tensors travel on this rank's CUDA device, under gloo on CPU. Without an initialised
    process group (one process) it yields `state` as it is.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        yield from state.items()
        return
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    sender = dist.get_rank() == src
    layout = [[(name, tensor.shape, tensor.dtype) for name, tensor in state.items()] if sender else None]
    dist.broadcast_object_list(layout, src=src, device=device)
    for name, shape, dtype in layout[0]:
        tensor = state[name].to(device).contiguous() if sender else torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(tensor, src=src)
        yield name, tensor


def _merge_lora(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Fold every active adapter into its base weight and return base-model names only, as peft's `merge_and_unload`.

    `scaling` is read from each LoRA layer (it carries per-module rank/alpha patterns). An adapted embedding
    (`target_modules` naming `embed_tokens`) keeps its factors under other names (`lora_embedding_A/B`, no
    `.weight`), and its delta is (B A)ᵀ; a GPT-2-style layer that stores its weight transposed (`fan_in_fan_out`)
    gets the delta transposed. A DoRA layer (`use_dora`) rescales each output row of W + s·B A to its learnt
    magnitude, the row norm taken with the unmerged base weight, as peft does; a layer trained whole
    (`modules_to_save`) replaces its original. A weight the model ties to another (a tied LM head and embedding) is
    one tensor, which peft's merge updates once for both names: each name here gets the updates of all. Any other
    adapter kind (another LoRA variant, DoRA on a non-Linear layer, trainable tokens) is refused, naming the layer:
    served unmerged, it would decode with other weights than the trained model's.
    """
    layers = {name: module for name, module in model.named_modules() if hasattr(module, "lora_A")}
    ties = _tied_names(model)
    updates: dict[str, list[_Update]] = {}
    for name in state:
        module_name, _, param = name.rpartition(".")
        if module_name.endswith(".base_layer") and param == "weight":
            layer = module_name.removesuffix(".base_layer")
            module = layers.get(layer)
            layer_updates = [_layer_update(state, layer, module, adapter) for adapter in _active(module)]
            for tied in ties.get(name, [name]):
                updates.setdefault(tied, []).extend(layer_updates)
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if ".lora_" in name or ".original_module." in name:
            continue
        if ".modules_to_save." in name:
            wrapper, _, rest = name.partition(".modules_to_save.")
            adapter, _, param = rest.partition(".")
            if adapter not in _active(model.get_submodule(wrapper)):
                continue
            name = f"{wrapper}.{param}"
        if name in updates:
            tensor = _apply(tensor, updates[name])
        merged[name.replace(".base_layer.", ".").removeprefix(_PEFT_PREFIX)] = tensor
    left = [name for name in merged if _UNMERGED_MARKER in name]
    if left:
        raise ValueError(
            f"cannot merge {left[0]}: trainable tokens are not merged (only LoRA, DoRA and modules_to_save)"
        )
    return merged


@dataclass(frozen=True)
class _Update:
    """One adapter's change to a base weight: W + scaling · delta, then, with DoRA, each row scaled to `magnitude`."""

    scaling: float
    delta: torch.Tensor
    magnitude: torch.Tensor | None = None


def _active(module: nn.Module | None) -> list[str]:
    """The adapters `module` applies in its forward (none for a layer peft did not wrap)."""
    return list(getattr(module, "active_adapters", [])) if module is not None else []


def _layer_update(state: dict[str, torch.Tensor], layer: str, module: nn.Module, adapter: str) -> _Update:
    """`adapter`'s update of the LoRA layer `layer`, or an error naming it when it is not one this merge knows."""
    magnitude = state.get(f"{layer}.lora_magnitude_vector.{adapter}.weight")
    variant = getattr(module, "lora_variant", {}).get(adapter)
    transposed = bool(getattr(module, "fan_in_fan_out", False))
    plain_linear = isinstance(module.get_base_layer(), nn.Linear) and not transposed
    if (variant is not None and magnitude is None) or (magnitude is not None and not plain_linear):
        kind = type(variant).__name__ if variant is not None else "DoRA"
        raise ValueError(f"cannot merge {layer}'s adapter {adapter!r} ({kind}): only LoRA and DoRA on Linear layers")
    delta = _lora_delta(state, layer, adapter)
    return _Update(float(module.scaling[adapter]), delta.T if transposed else delta, magnitude)


def _apply(weight: torch.Tensor, updates: list[_Update]) -> torch.Tensor:
    """`weight` with `updates` applied in turn (peft's order), computed in float32 and returned in its dtype."""
    base = weight.float()
    merged = base
    for update in updates:
        merged = merged + update.scaling * update.delta
        if update.magnitude is not None:
            norm = torch.linalg.norm(base + update.scaling * update.delta, dim=1)
            merged = (update.magnitude.float() / norm).view(-1, 1) * merged
    return merged.to(weight.dtype)


def _tied_names(model: nn.Module) -> dict[str, list[str]]:
    """For each parameter registered under several names (tied weights), all of its names."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    return {name: group for group in names.values() if len(group) > 1 for name in group}


def _lora_delta(state: dict[str, torch.Tensor], layer: str, adapter: str) -> torch.Tensor:
    """`layer`'s unscaled LoRA update for `adapter`, shaped as its base weight (0 when it has no factors)."""
    a = state.get(f"{layer}.lora_A.{adapter}.weight")  # (r, in)
    b = state.get(f"{layer}.lora_B.{adapter}.weight")  # (out, r)
    if a is not None and b is not None:
        return b.float() @ a.float()  # (out, in)
    a = state.get(f"{layer}.lora_embedding_A.{adapter}")  # (r, vocab)
    b = state.get(f"{layer}.lora_embedding_B.{adapter}")  # (dim, r)
    if a is not None and b is not None:
        return (b.float() @ a.float()).T  # (vocab, dim)
    return torch.zeros(())
