"""The trained model's weights as one plain state dict, the form every checkpoint and engine reload starts from.

`full_state_dict` turns whatever the trainer holds into plain CPU tensors with Hugging Face
checkpoint names: it unwraps Fabric/DDP wrappers, gathers FSDP/FSDP2-sharded parameters with
`torch.distributed.checkpoint` (a collective: every rank calls it; only rank 0 gets the tensors),
and folds LoRA adapters into their base weights (W + scaling · B A) without touching the trained
model. The phase loop saves that state as a model directory and the engine reloads it
(`ReloadableEngine.reload`); `VLLMEngine.push_weights` and `HFEngine.load_state_dict` take it in
memory instead.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

_PEFT_PREFIX = "base_model.model."


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
