"""Two nodes simulated on this machine: two `torchrun --nnodes 2 --node-rank i` launches of `python -m recipes.webrl`.

Each launch is one node of one process (gloo on CPU), started as README's "Several machines" says,
with a static rendezvous on localhost; both share the run directory and the model cache as nodes
share a filesystem. Node 1 is killed in the middle of phase 1's rollouts (kill -9 of its torchrun and
everything below it: torchrun starts its worker in a session of its own, so killing its process group
would leave the worker running); node 0 must then stop by itself at its next collective, and the same
two commands started again must finish the run with every task rolled out once, both nodes' rollouts
in the labels, and one checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from recipes import webrl
from webrl.config import ConfigError
from webrl.data.replay import ReplayBuffer
from webrl.data.trajectory import read_trajectories
from webrl.distributed import build_fabric, check_launcher, launch_local_rank, launch_rank
from webrl.fabric_config import FabricConfig
from webrl.run_layout import RunLayout

REPO = Path(__file__).resolve().parents[2]
NODE = ("fabric.strategy=ddp", "fabric.num_nodes=2", "fabric.devices=1")
"""The Fabric settings of 2 nodes x 1 process; Fabric checks them against torchrun's world size."""


LAUNCHER_VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "RANK",
    "SLURM_NTASKS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_PROCID",
    "NODE_RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "SLURM_NNODES",
    "SLURM_LOCALID",
)


@pytest.fixture
def no_launcher(monkeypatch):
    for name in (*LAUNCHER_VARIABLES, "SLURM_JOB_NAME"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_rank_before_launch_comes_from_the_launcher_that_started_the_process(no_launcher):
    config = FabricConfig(num_nodes=2, devices=2)
    assert launch_rank(config) == 0  # a plain `python -m recipes.webrl`
    no_launcher.setenv("NODE_RANK", "1")
    no_launcher.setenv("LOCAL_RANK", "1")
    assert launch_rank(config) == 3  # Fabric's own launcher: node 1's second process
    no_launcher.setenv("SLURM_NTASKS", "4")
    no_launcher.setenv("SLURM_NTASKS_PER_NODE", "2")
    no_launcher.setenv("SLURM_PROCID", "2")
    assert launch_rank(config) == 2  # srun
    no_launcher.setenv("TORCHELASTIC_RUN_ID", "run")
    no_launcher.setenv("RANK", "1")
    assert launch_rank(config) == 1  # torchrun, inside a SLURM job too


def test_the_local_rank_comes_from_the_launcher_too(no_launcher):
    assert launch_local_rank() == 0
    no_launcher.setenv("LOCAL_RANK", "1")
    assert launch_local_rank() == 1  # Fabric's own launcher
    no_launcher.setenv("SLURM_NTASKS", "4")
    no_launcher.setenv("SLURM_NTASKS_PER_NODE", "2")
    no_launcher.setenv("SLURM_LOCALID", "0")
    assert launch_local_rank() == 0  # srun, which sets no LOCAL_RANK of its own
    no_launcher.setenv("TORCHELASTIC_RUN_ID", "run")
    no_launcher.setenv("LOCAL_RANK", "1")
    assert launch_local_rank() == 1  # torchrun


def _torchrun(monkeypatch, per_node: int, world: int) -> None:
    """The variables torchrun gives the last process it started."""
    for name, value in {"TORCHELASTIC_RUN_ID": "run", "RANK": world - 1, "LOCAL_RANK": per_node - 1}.items():
        monkeypatch.setenv(name, str(value))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(per_node))


def test_a_torchrun_layout_other_than_the_configs_is_an_error_naming_the_key(no_launcher):
    _torchrun(no_launcher, per_node=2, world=4)
    check_launcher(FabricConfig(devices=2, num_nodes=2))
    with pytest.raises(ConfigError, match=r"fabric\.devices=1: torchrun started 2 process\(es\) per node, 4 in all"):
        check_launcher(FabricConfig(devices=1, num_nodes=4))
    with pytest.raises(ConfigError, match=r"fabric\.num_nodes=1: .*set fabric\.num_nodes=2"):
        check_launcher(FabricConfig(devices=2, num_nodes=1))


def test_an_srun_layout_other_than_the_configs_is_an_error_naming_the_key(no_launcher):
    for name, value in {"SLURM_NTASKS": 4, "SLURM_NTASKS_PER_NODE": 2, "SLURM_NNODES": 2, "SLURM_PROCID": 3}.items():
        no_launcher.setenv(name, str(value))
    no_launcher.setenv("SLURM_JOB_NAME", "webrl")
    check_launcher(FabricConfig(devices=2, num_nodes=2))
    with pytest.raises(ConfigError, match=r"fabric\.devices=4: srun started 2 process\(es\) per node"):
        check_launcher(FabricConfig(devices=4, num_nodes=1))
    no_launcher.setenv("SLURM_JOB_NAME", "interactive")  # Lightning leaves such a job to Fabric's own launcher
    check_launcher(FabricConfig(devices=4, num_nodes=1))


def test_the_default_strategy_under_a_torchrun_of_two_processes_stops_before_it_runs_as_two_rank_zeros(
    no_launcher, tmp_path
):
    """Lightning checks the layout for ddp only: `auto` with devices=1 ran each process as a world of one."""
    _torchrun(no_launcher, per_node=2, world=2)
    config = webrl.recipe_config([f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(SystemExit, match=r"config error: fabric\.devices=1: torchrun started 2 process"):
        webrl.launch_fabric(config)
    with pytest.raises(ConfigError, match=r"fabric\.devices"):
        build_fabric(FabricConfig(strategy="model_parallel", devices=1))


def test_only_rank_zero_writes_the_run_config(no_launcher, tmp_path):
    run_dir = tmp_path / "run"
    config = webrl.recipe_config([f"output_dir={run_dir}", "fabric.num_nodes=2"])
    no_launcher.setenv("TORCHELASTIC_RUN_ID", "run")
    no_launcher.setenv("RANK", "1")
    assert webrl.keep_config(run_dir, config) is None
    assert not (run_dir / "config.json").exists()
    no_launcher.setenv("RANK", "0")
    webrl.keep_config(run_dir, config)
    no_launcher.setenv("RANK", "1")
    assert webrl.keep_config(run_dir, config) == {}  # the other ranks check against rank 0's file
    stopped = webrl.recipe_config([f"output_dir={run_dir}", "fabric.num_nodes=2", "env.test_tasks=20"])
    with pytest.raises(SystemExit, match=r"env\.test_tasks 60 → 20"):
        webrl.keep_config(run_dir, stopped)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch_nodes(argv: list[str], log_dir: Path, attempt: str) -> list[subprocess.Popen]:
    """Both nodes' torchrun, each with its worker, browser and sites server below it."""
    port = _free_port()
    nodes = []
    for node_rank in (0, 1):
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"]
        torchrun += ["--node-rank", str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port)]
        log = (log_dir / f"{attempt}.node{node_rank}.log").open("w")
        env = {**os.environ, "WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
        nodes.append(subprocess.Popen([*torchrun, *argv], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT))
    return nodes


def _kill_node(node: subprocess.Popen) -> None:
    """kill -9 a node: its torchrun and everything below it (torchrun starts its workers in their own sessions)."""
    try:
        tree = [psutil.Process(node.pid), *psutil.Process(node.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for process in tree:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    node.wait()


def _wait(process: subprocess.Popen, timeout: float, log: Path) -> int:
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_node(process)
        raise AssertionError(f"{log.name} still running after {timeout:.0f} s:\n{log.read_text()[-4000:]}") from None


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_two_nodes_kill_one_then_relaunch_both(tmp_path, model_cache, quick):
    run_dir = tmp_path / "run"
    argv = ["-m", "recipes.webrl", f"output_dir={run_dir}", f"model.cache_dir={model_cache}", *quick, *NODE]
    nodes: list[subprocess.Popen] = []
    try:
        _kill_and_relaunch(run_dir, argv, tmp_path, nodes)
    finally:
        for node in nodes:
            if node.poll() is None:
                _kill_node(node)
    _check_run(RunLayout(run_dir))


def _kill_and_relaunch(run_dir: Path, argv: list[str], log_dir: Path, nodes: list[subprocess.Popen]) -> None:
    """Both nodes until node 1 is in phase 1's rollouts; kill -9 node 1; then both again to the end."""
    layout = RunLayout(run_dir)
    started = time.perf_counter()
    nodes += _launch_nodes(argv, log_dir, "first")
    node0, node1 = nodes
    deadline = time.monotonic() + 2400
    while _lines(layout.rollouts_path(1, 1)) < 1:
        assert node0.poll() is None and node1.poll() is None, (log_dir / "first.node0.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "node 1 never started phase 1's rollouts"
        time.sleep(0.5)
    _kill_node(node1)
    # The survivor is not left waiting for the dead node: its next collective fails and its torchrun exits.
    assert _wait(node0, 600, log_dir / "first.node0.log") != 0
    assert json.loads(layout.state_path.read_text())["phase"] == 1, "killed in phase 1"

    nodes += _launch_nodes(argv, log_dir, "again")
    for rank, node in enumerate(nodes[2:]):
        log = log_dir / f"again.node{rank}.log"
        assert _wait(node, 2400, log) == 0, log.read_text()[-4000:]
    print(f"\n2 nodes x 1 process, kill of node 1 and relaunch: {time.perf_counter() - started:.0f} s")


def _check_run(layout: RunLayout) -> None:
    """Every task rolled out once across the nodes, every node's rollouts labelled once, one checkpoint."""
    state = json.loads(layout.state_path.read_text())
    assert [record["phase"] for record in state["history"]] == [0, 1]
    for phase in (0, 1):
        shards = [read_trajectories(layout.rollouts_path(phase, rank)) for rank in (0, 1)]
        assert all(shards), f"phase {phase}: both nodes rolled out"
        ids = [t.task.task_id for shard in shards for t in shard]
        assert sorted(ids) == sorted(task.task_id for task in layout.tasks(phase)), "each task once, across nodes"
        labelled = Counter(t.task.task_id for t in layout.labelled(phase))
        assert max(labelled.values()) == 1, f"phase {phase}: a label written twice"
        for rank, shard in enumerate(shards):
            kept = {t.task.task_id for t in shard if not t.infra_error}
            assert kept <= labelled.keys(), f"phase {phase}: node {rank}'s rollouts missing from the labels"
        evaluated = [t.task.task_id for rank in (0, 1) for t in read_trajectories(layout.eval_path(phase, rank))]
        assert len(evaluated) == len(set(evaluated)) == 6
    buffered = Counter((t.task.task_id, t.phase) for t in ReplayBuffer(layout.replay_dir).trajectories())
    assert buffered and max(buffered.values()) == 1, "a replay row added twice"
    # One checkpoint of the phase, written by rank 0: no per-rank copies beside the per-rank episode files.
    assert sorted(path.name for path in layout.phase_dir(1).iterdir()) == [
        "actor",
        "advantages.jsonl",
        "critic.pt",
        "critic_values.json",
        "curriculum_state.json",
        "eval.rank0.jsonl",
        "eval.rank1.jsonl",
        "eval_tasks.json",
        "labelled.jsonl",
        "metrics",
        "replay_samples.jsonl",
        "replay_scores.json",
        "rollouts.rank0.jsonl",
        "rollouts.rank1.jsonl",
        "screenshots",
        "tasks.json",
    ]
    assert (layout.actor_dir(1) / "config.json").exists()
    assert "critic/loss" in state["history"][1] and "actor/loss" in state["history"][1]
