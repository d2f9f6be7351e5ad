"""Engine placement: tasks dealt to engines (one per rank or one per node), browser pools sized by cores, options,
and how trained weights reach the engines."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lightning.fabric.utilities.rank_zero import rank_zero_only
from lightning_utilities.core.rank_zero import rank_zero_only as utils_rank_zero_only

from recipes import webrl
from webrl.config import ConfigError, load_config
from webrl.distributed import build_fabric
from webrl.engine_placement import EnginePlacement, engine_device, node_cpus
from webrl.fabric_config import FabricConfig
from webrl.loop_config import WebRLConfig
from webrl.web_environment import WebEnvironment

TWO_NODES = FabricConfig(accelerator="cuda", strategy="fsdp", devices=2, num_nodes=2)
TASKS = list(range(11))
BLOCK = [SimpleNamespace(global_rank=rank, node_rank=rank // 2, local_rank=rank % 2) for rank in range(4)]
"""The processes of TWO_NODES as torchrun (or srun's default block distribution) numbers them."""


def test_one_engine_per_rank_deals_task_i_to_rank_i_mod_the_world():
    placement = EnginePlacement(placement="rank")
    shards = [placement.shard(TASKS, process, TWO_NODES) for process in BLOCK]
    assert shards == [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7]]
    assert [placement.engine_index(process) for process in BLOCK] == [0, 1, 2, 3]


def test_one_engine_per_node_gives_each_node_one_share_on_its_local_rank_zero():
    placement = EnginePlacement(placement="node")
    assert placement.engines(TWO_NODES) == 2
    assert [placement.engine_index(process) for process in BLOCK] == [0, None, 1, None]
    shards = [placement.shard(TASKS, process, TWO_NODES) for process in BLOCK]
    assert shards == [[0, 2, 4, 6, 8, 10], [], [1, 3, 5, 7, 9], []]
    assert sorted(task for shard in shards for task in shard) == TASKS  # every task once


SRUN_CYCLIC = [(0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1)]
"""(SLURM_PROCID, SLURM_NODEID, SLURM_LOCALID) of 2 nodes x 2 tasks under `srun --distribution=cyclic`: global
ranks go round-robin over the nodes, so node 1's local rank 0 is global rank 1, not 2."""


def test_under_srun_cyclic_each_nodes_engine_is_on_its_local_rank_zero(monkeypatch):
    # Building a DDP Fabric sets Lightning's process-wide rank; left at 3, later tests' loggers would log nothing.
    monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)
    monkeypatch.setattr(utils_rank_zero_only, "rank", utils_rank_zero_only.rank)
    for name in ("TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    slurm = {"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "webrl"}
    for name, value in {**slurm, "SLURM_DISTRIBUTION": "cyclic"}.items():
        monkeypatch.setenv(name, value)
    config = FabricConfig(accelerator="cpu", strategy="ddp", devices=2, num_nodes=2)
    placement, engines, shards = EnginePlacement(placement="node"), [], []
    for rank, node, local in SRUN_CYCLIC:
        monkeypatch.setenv("SLURM_PROCID", str(rank))
        monkeypatch.setenv("SLURM_NODEID", str(node))
        monkeypatch.setenv("SLURM_LOCALID", str(local))
        process = build_fabric(config)  # placed by the launcher's variables, not yet launched
        engines.append(placement.engine_index(process))
        shards.append(placement.shard(TASKS, process, config))
    assert engines == [0, 1, None, None]  # node 1's engine on rank 1, none on rank 2 (node 0's second process)
    assert shards == [[0, 2, 4, 6, 8, 10], [1, 3, 5, 7, 9], [], []]


def test_browser_pools_share_the_cores_of_a_node():
    assert EnginePlacement(episodes_per_core=0).concurrency(6, TWO_NODES, cpus=64) == 6  # as configured
    assert EnginePlacement(placement="rank", episodes_per_core=0.5).concurrency(6, TWO_NODES, cpus=64) == 16
    assert EnginePlacement(placement="node", episodes_per_core=0.5).concurrency(6, TWO_NODES, cpus=64) == 32
    assert EnginePlacement(episodes_per_core=0.1).concurrency(6, TWO_NODES, cpus=2) == 1  # never below one


def test_the_node_cores_come_from_slurm_when_it_says(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_ON_NODE", raising=False)
    here = node_cpus()
    assert here >= 1
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "96")
    assert node_cpus() == 96


def test_vllm_on_cuda_gets_its_budget_sleep_mode_and_tensor_parallelism():
    per_node = EnginePlacement(placement="node", gpu_memory_utilization=0.6, sleep=False)
    assert per_node.engine_options("vllm", TWO_NODES) == {
        "gpu_memory_utilization": 0.6,
        "enable_sleep_mode": False,
        "tensor_parallel_size": 2,
    }
    assert EnginePlacement().engine_options("vllm", TWO_NODES)["tensor_parallel_size"] == 1
    assert EnginePlacement().engine_options("vllm", FabricConfig()) == {}  # CPU: vLLM's CPU defaults
    assert EnginePlacement().engine_options("hf", TWO_NODES, local_rank=1) == {"device": "cuda:1"}


def test_an_engine_decodes_on_the_gpu_of_the_rank_that_builds_it():
    assert engine_device("cuda", 1) == "cuda:1"
    assert engine_device("gpu", 0) == "cuda:0"
    assert engine_device("auto", 3, cuda_available=True) == "cuda:3"  # Lightning's auto picks CUDA there too
    assert engine_device("auto", 3, cuda_available=False) == "cpu"
    assert engine_device("cpu", 1) == "cpu"
    assert engine_device("mps", 0) == "mps"


def test_the_hf_engine_of_a_cuda_run_is_built_on_its_ranks_gpu(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    monkeypatch.setenv("LOCAL_RANK", "1")  # Fabric's own launcher: the node's second process
    config = load_config(WebRLConfig, ["rollout.engine=hf", "fabric.accelerator=cuda", "fabric.devices=2"])
    assert webrl.engine_options(config) == {"batch_size": config.rollout.concurrency, "device": "cuda:1"}
    assert webrl.engine_options(config, local_rank=0)["device"] == "cuda:0"
    default = load_config(WebRLConfig, [])
    assert webrl.engine_options(default) == {"batch_size": default.rollout.concurrency, "device": "cpu"}


def test_accelerator_auto_on_a_gpu_machine_places_the_engines_as_cuda_does(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    auto = FabricConfig(accelerator="auto", devices=2)
    assert EnginePlacement().engine_options("vllm", auto)["gpu_memory_utilization"] == 0.9
    assert EnginePlacement().engine_options("hf", auto, local_rank=1) == {"device": "cuda:1"}
    assert EnginePlacement().syncs_in_memory("vllm", auto)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_hf_engine_of_a_cuda_run_decodes_on_the_gpu(tmp_path):
    from webrl.inference.engine import SamplingParams, build_engine
    from webrl.modules.lm import build_tiny_model

    model_dir = build_tiny_model(tmp_path, ["click the blue button"], vocab_size=300, hidden_size=32, num_layers=1)
    config = load_config(WebRLConfig, ["rollout.engine=hf", "fabric.accelerator=cuda"])
    engine = build_engine("hf", model_dir, **webrl.engine_options(config, local_rank=0))
    assert next(engine.model.parameters()).device == torch.device("cuda", 0)
    assert len(engine.generate(["click"], SamplingParams(temperature=0.0, max_tokens=2))) == 1
    engine.close()


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("engines.placement=gpu", "engines.placement"),
        ("engines.gpu_memory_utilization=0", "engines.gpu_memory_utilization"),
        ("engines.gpu_memory_utilization=1.2", "engines.gpu_memory_utilization"),
        ("engines.episodes_per_core=-1", "engines.episodes_per_core"),
        ("engines.weight_sync=nccl", "engines.weight_sync"),
    ],
)
def test_a_bad_placement_setting_names_its_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(WebRLConfig, [override])


def test_weights_go_in_memory_to_vllm_on_cuda_one_engine_per_rank_and_through_disk_otherwise():
    auto = EnginePlacement()
    assert auto.weight_sync == "auto"
    assert auto.syncs_in_memory("vllm", TWO_NODES)
    assert not auto.syncs_in_memory("vllm", FabricConfig())  # CPU
    assert not auto.syncs_in_memory("hf", TWO_NODES)
    assert not EnginePlacement(placement="node").syncs_in_memory("vllm", TWO_NODES)  # tensor-parallel workers
    assert EnginePlacement(weight_sync="memory").syncs_in_memory("hf", FabricConfig())
    assert not EnginePlacement(weight_sync="disk").syncs_in_memory("vllm", TWO_NODES)
    assert load_config(WebRLConfig, []).engines.syncs_in_memory("hf", FabricConfig()) is False  # the default run


def test_weights_in_memory_need_an_engine_in_the_training_processes():
    in_memory = load_config(WebRLConfig, ["engines.weight_sync=memory", "rollout.engine=vllm"])
    assert in_memory.engines.weight_sync == "memory"
    server = ["rollout.engine=openai", "rollout.openai_url=http://127.0.0.1:8000/v1"]
    assert load_config(WebRLConfig, server).engines.weight_sync == "auto"
    with pytest.raises(ConfigError, match=r"engines\.weight_sync='memory': needs rollout\.engine hf or vllm"):
        load_config(WebRLConfig, ["engines.weight_sync=memory", *server])


def test_the_environment_sizes_its_pool_from_the_placement(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "8")
    config = load_config(WebRLConfig, ["rollout.concurrency=3", "fabric.devices=2", "engines.episodes_per_core=1"])
    environment = WebEnvironment(config)
    assert environment.concurrency == 4
    assert environment.browser_config().max_concurrency == 4
    assert WebEnvironment(load_config(WebRLConfig, ["rollout.concurrency=3"])).concurrency == 3
