"""Lightning Fabric from config: the strategy (auto, ddp, fsdp, model_parallel) and object collectives.

Measured on CPU here: DDP over gloo works; FSDP1 refuses CPU ("FSDP is only available on GPU");
`ModelParallelStrategy` with FSDP2's `fully_shard` runs on CPU, sharded checkpoints included. So
`fsdp` is the GPU config and `model_parallel` is how CPU tests exercise sharding.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from lightning.fabric import Fabric
from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

from webrl.config_checks import require
from webrl.fabric_config import PRECISION_ALIASES, FabricConfig


def shard_with_fully_shard(module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
    """FSDP2: shard each transformer block, then each network the module holds, over the data-parallel mesh.

    The module itself (an actor, critic, ORM or SFT module) is not sharded: FSDP2 gathers a unit's
    parameters in a hook on that unit's `forward`, and the loop calls `compute_loss`, not the
    module's `forward` (Fabric only redirects such calls through `forward` for wrapping strategies
    like DDP, not for in-place ones like FSDP2). Its child networks (`model`, `trunk`, each value
    head) are what `compute_loss` calls, so each becomes a unit and its hooks fire. Tied
    input/output embeddings stay in one unit because the whole causal LM is one.
    """
    from torch.distributed.fsdp import fully_shard

    mesh = device_mesh["data_parallel"]
    for submodule in module.modules():
        if type(submodule).__name__.endswith("DecoderLayer"):
            fully_shard(submodule, mesh=mesh)
    for child in module.children():
        units = list(child) if isinstance(child, torch.nn.ModuleList) else [child]  # a list is never called whole
        for unit in units:
            if any(True for _ in unit.parameters()):
                fully_shard(unit, mesh=mesh)
    return module


def build_fabric(config: FabricConfig, loggers: list[Any] | None = None) -> Fabric:
    """A Fabric for `config`; call `fabric.launch()` before using it.

    A Fabric that would run another precision than the config names is refused: Lightning turns `16-mixed` into
    `bf16-mixed` on a CPU with a warning only, and `FabricConfig.validate` can refuse that only where the config
    says `cpu`; with `accelerator=auto` on a machine without a GPU, config.json and the cache keys said fp16 while
    every stage trained in bf16.
    """
    config.validate()
    check_launcher(config)
    strategy: Any = config.strategy
    if config.strategy == "model_parallel":
        from lightning.fabric.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(
            parallelize_fn=shard_with_fully_shard,
            data_parallel_size=config.devices * config.num_nodes,
            tensor_parallel_size=1,
        )
    elif config.strategy == "fsdp":
        from lightning.fabric.strategies import FSDPStrategy

        strategy = FSDPStrategy(auto_wrap_policy=_decoder_layer_classes, state_dict_type="sharded")
    precision = config.concrete_precision()
    fabric = Fabric(
        accelerator=config.accelerator,
        strategy=strategy,
        devices=config.devices,
        num_nodes=config.num_nodes,
        precision=precision,
        loggers=loggers,
    )
    runs = fabric.strategy.precision.precision
    require(
        runs == PRECISION_ALIASES.get(precision, precision),
        "fabric.precision",
        config.precision,
        f"Lightning would run {runs} instead on this machine's {fabric.device.type}, which config.json and the cache "
        "keys would not say; set fabric.accelerator=cuda where a GPU is meant, or a precision that this device runs "
        "(on CPU: bf16-mixed, 32-true or auto)",
    )
    return fabric


def _launcher() -> TorchElasticEnvironment | SLURMEnvironment | None:
    """The launcher that started this process, asked in Fabric's own order (torchrun first, since it also runs
    inside SLURM jobs); None when Fabric starts the processes itself (or it is one plain process)."""
    for environment in (TorchElasticEnvironment, SLURMEnvironment):
        if environment.detect():
            return environment()
    return None


def launch_rank(config: FabricConfig) -> int:
    """This process's global rank as its launcher set it, known before `fabric.launch()`.

    A recipe writes the run's shared files (config.json, the W&B run id) before it launches, and
    under torchrun or srun every rank of every node starts at once on the one shared run directory:
    only the future rank 0 may write them. Fabric's own launcher starts a node's other processes with
    LOCAL_RANK and each node with NODE_RANK.
    """
    launcher = _launcher()
    if launcher is not None:
        return launcher.global_rank()
    return int(os.environ.get("NODE_RANK", 0)) * config.devices + launch_local_rank()


def launch_local_rank() -> int:
    """This process's rank on its node as its launcher set it (0 for Fabric's first process): the GPU it trains on,
    and the one its engine decodes on, for a recipe that has no launched Fabric to ask (`recipes.evaluate`)."""
    launcher = _launcher()
    return launcher.local_rank() if launcher is not None else int(os.environ.get("LOCAL_RANK", 0))


def launcher_layout() -> tuple[str, int, int] | None:
    """(launcher, processes per node, processes in all) that torchrun or srun started; None without either."""
    launcher = _launcher()
    if isinstance(launcher, TorchElasticEnvironment):
        world = launcher.world_size()
        return "torchrun", int(os.environ.get("LOCAL_WORLD_SIZE", world)), world
    if isinstance(launcher, SLURMEnvironment):
        world = launcher.world_size()
        per_node = os.environ.get("SLURM_NTASKS_PER_NODE", "")
        nodes = int(os.environ.get("SLURM_NNODES", 1))
        return "srun", int(per_node) if per_node.isdigit() else world // max(nodes, 1), world
    return None


def check_launcher(config: FabricConfig) -> None:
    """Stop, naming `fabric.devices` or `fabric.num_nodes`, when torchrun or srun started another layout.

    Under such a launcher Fabric starts no process of its own and checks the layout only for `ddp`: with the
    default `auto` and `devices=1` every process ran alone as rank 0, each rolling out every task into the same
    run directory; `model_parallel` failed with an IndexError or a mesh-size error naming no key; `fsdp` with more
    devices than processes would deal tasks to engines no process builds. Every process reads the same launcher
    variables, so all stop alike, before any collective.
    """
    layout = launcher_layout()
    if layout is None:
        return
    launcher, per_node, world = layout
    started = f"{launcher} started {per_node} process(es) per node, {world} in all"
    require(per_node == config.devices, "fabric.devices", config.devices, f"{started}: set fabric.devices={per_node}")
    nodes = f"set fabric.num_nodes={world // per_node}"
    require(world == config.devices * config.num_nodes, "fabric.num_nodes", config.num_nodes, f"{started}: {nodes}")


def _decoder_layer_classes(module: torch.nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
    """FSDP1 auto-wrap policy: wrap every `*DecoderLayer` (Llama, Qwen, Mistral, SmolLM...)."""
    return recurse or type(module).__name__.endswith("DecoderLayer")


def gather_objects(fabric: Fabric, items: list[Any]) -> list[Any]:
    """Concatenate a picklable list from every rank, in rank order, on every rank."""
    if fabric.world_size == 1 or not dist.is_initialized():
        return list(items)
    gathered: list[list[Any] | None] = [None] * fabric.world_size
    dist.all_gather_object(gathered, items)
    return [item for part in gathered for item in (part or [])]


def broadcast_object(fabric: Fabric, value: Any) -> Any:
    """Rank 0's `value` on every rank."""
    if fabric.world_size == 1 or not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def close_process_group(fabric: Fabric | None) -> None:
    """Let every rank reach the end, then tear the process group down, before the process exits.

    A rank that leaves right after its last collective (a broadcast it sent) can exit while a peer still
    receives; gloo's threads are then destroyed at interpreter exit with work in flight, and the process
    aborts ("terminate called without an active exception", exit -6) after the run has succeeded.
    """
    if fabric is None or fabric.world_size == 1 or not dist.is_initialized():
        return
    fabric.barrier()
    dist.destroy_process_group()
