"""The Filtered BC recipe's run logic (recipes.filtered_bc.main) with the training, the evaluation and the browser
stubbed: which rank evaluates and writes, what a relaunch reuses or trains again, and what a failed launch leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import webrl.starting_models
from recipes import filtered_bc
from recipes import webrl as webrl_recipe
from recipes.filtered_bc_config import FilteredBCRunConfig
from tests.sample_records import build_trajectory
from webrl.cache_builds import DONE_MARKER
from webrl.config import load_config
from webrl.config_checks import ConfigError
from webrl.data.trajectory import write_trajectories
from webrl.run_config import check_run_config, keep_run_config
from webrl.run_layout import RunLayout

LOSS = {"filtered_bc/loss": 0.42, "filtered_bc/steps": 7.0}


class StubFabric:
    """One rank of `world_size` processes: the collectives the recipe reaches answer as rank 0 would."""

    def __init__(self, rank: int = 0, world_size: int = 1) -> None:
        self.global_rank, self.world_size, self.is_global_zero = rank, world_size, rank == 0

    def broadcast(self, value: object, src: int = 0) -> object:
        return value

    def barrier(self) -> None:
        pass

    def print(self, *args: object) -> None:
        if self.is_global_zero:
            print(*args)


class NoBrowser:
    def __init__(self, config: object) -> None:
        pass

    def __enter__(self) -> NoBrowser:
        return self

    def __exit__(self, *exc: object) -> bool:
        return False


class Recipe:
    """`filtered_bc.main` on a source run of 10 scored rollouts, recording what it trains and evaluates."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch, fabric: StubFabric | None = None) -> None:
        self.root, self.fabric = root, fabric or StubFabric()
        self.trained: list[int] = []  # trajectories per training
        self.evaluated: list[int] = []  # ranks that evaluated
        self.crash_evaluation = False
        source = RunLayout(root / "source")
        rollouts = [build_trajectory(f"t{i}", orm_score=i / 10, eval_reward=float(i > 5)) for i in range(10)]
        write_trajectories(source.labelled_path(1), rollouts)
        self.argv = [f"output_dir={root / 'out'}", f"filtered_bc.source_run={source.root}"]
        monkeypatch.setattr(webrl_recipe, "launch_fabric", lambda config, loggers=None: self.fabric)
        monkeypatch.setattr(filtered_bc, "WebEnvironment", NoBrowser)
        monkeypatch.setattr(webrl.starting_models, "ensure_sft", lambda config, fabric, env: (root / "sft", []))
        monkeypatch.setattr(webrl.starting_models, "train_sft", self.train_sft)
        monkeypatch.setattr(filtered_bc, "evaluate_checkpoint", self.evaluate_checkpoint)

    def train_sft(self, config, fabric, base, trajectories, target, **kwargs) -> dict[str, float]:
        """As `save_model_dir` does: rank 0 publishes the model with its metrics in the done marker."""
        self.trained.append(len(trajectories))
        if fabric.is_global_zero:
            target.mkdir(parents=True, exist_ok=True)
            (target / DONE_MARKER).write_text(json.dumps({"base": str(base), "metrics": LOSS}))
        return dict(LOSS)

    def evaluate_checkpoint(self, config, env, target, name) -> dict[str, float]:
        self.evaluated.append(self.fabric.global_rank)
        if self.crash_evaluation:
            raise KeyboardInterrupt("killed during the evaluation")
        return {"success_rate": 0.3}

    def run(self, *overrides: str) -> dict[str, float]:
        return filtered_bc.main([*self.argv, *overrides])

    @property
    def summary_path(self) -> Path:
        return self.root / "out" / "filtered_bc.json"


def test_with_several_ranks_every_rank_trains_and_rank_0_alone_evaluates_and_writes(tmp_path, monkeypatch):
    """`evaluate_checkpoint` is one process's work: on every rank it ran all test tasks into the same files."""
    other = Recipe(tmp_path / "rank1", monkeypatch, StubFabric(rank=1, world_size=2))
    result = other.run("fabric.devices=2")
    assert other.evaluated == [] and not other.summary_path.exists()
    assert other.trained == [3] and result == {}
    first = Recipe(tmp_path / "rank0", monkeypatch, StubFabric(rank=0, world_size=2))
    summary = first.run("fabric.devices=2")
    assert first.trained == [3] and first.evaluated == [0]
    assert json.loads(first.summary_path.read_text()) == summary and summary["test/success_rate"] == 0.3


def test_a_relaunch_after_the_actor_was_trained_reports_its_training_metrics(tmp_path, monkeypatch):
    recipe = Recipe(tmp_path, monkeypatch)
    recipe.crash_evaluation = True
    with pytest.raises(KeyboardInterrupt):
        recipe.run()
    recipe.crash_evaluation = False
    summary = recipe.run()
    assert recipe.trained == [3], "the relaunch reuses the trained actor"
    assert json.loads(recipe.summary_path.read_text()) == summary
    assert {key: summary.get(key) for key in LOSS} == LOSS


def test_a_relaunch_that_changes_the_cut_trains_again_on_the_new_cut(tmp_path, monkeypatch):
    """The actor of the 70th percentile's 3 rollouts is not evaluated under the 30th percentile's 7."""
    recipe = Recipe(tmp_path, monkeypatch)
    recipe.run()
    summary = recipe.run("filtered_bc.percentile=30", "resume.allow_changes=[filtered_bc.percentile]")
    assert recipe.trained == [3, 7] and summary["kept_rollouts"] == 7.0
    recipe.run("filtered_bc.percentile=30", "resume.allow_changes=[filtered_bc.percentile]")
    assert recipe.trained == [3, 7], "the same settings again reuse the actor"


def test_an_actor_trained_before_its_settings_were_recorded_is_reused_until_a_change_is_accepted(tmp_path, monkeypatch):
    recipe = Recipe(tmp_path, monkeypatch)
    recipe.run()
    marker = tmp_path / "out" / "actor" / DONE_MARKER
    marker.write_text(json.dumps({"metrics": LOSS}))  # as an older version left it
    assert recipe.run()["filtered_bc/loss"] == LOSS["filtered_bc/loss"] and recipe.trained == [3]
    recipe.run("filtered_bc.percentile=30", "resume.allow_changes=[filtered_bc.percentile]")
    assert recipe.trained == [3, 7]


def test_a_failed_launch_leaves_no_config_to_refuse_the_corrected_relaunch(tmp_path, monkeypatch):
    recipe = Recipe(tmp_path, monkeypatch)

    def refuse(config: FilteredBCRunConfig, loggers: list | None = None) -> None:
        raise SystemExit("config error: fabric.*: this machine has no GPU")

    monkeypatch.setattr(webrl_recipe, "launch_fabric", refuse)
    with pytest.raises(SystemExit, match="no GPU"):
        recipe.run("fabric.accelerator=cuda")
    assert not (tmp_path / "out" / "config.json").exists()
    monkeypatch.setattr(webrl_recipe, "launch_fabric", lambda config, loggers=None: recipe.fabric)
    assert recipe.run()["test/success_rate"] == 0.3
    monkeypatch.setattr(webrl_recipe, "launch_fabric", refuse)
    with pytest.raises(SystemExit, match="filtered_bc.percentile"):  # a changed setting is refused before the launch
        recipe.run("filtered_bc.percentile=30")


def test_the_source_run_is_absolute_so_a_relaunch_from_another_folder_reads_the_same_run(tmp_path, monkeypatch):
    out, first_folder, second_folder = tmp_path / "out", tmp_path / "a", tmp_path / "b"
    first_folder.mkdir()
    second_folder.mkdir()
    argv = [f"output_dir={out}", "filtered_bc.source_run=runs/webrl"]
    monkeypatch.chdir(first_folder)
    config = load_config(FilteredBCRunConfig, argv)
    assert config.filtered_bc.source_run == str(first_folder / "runs" / "webrl")
    keep_run_config(out, config, [])
    monkeypatch.chdir(second_folder)
    with pytest.raises(ConfigError, match="filtered_bc.source_run"):
        check_run_config(out, load_config(FilteredBCRunConfig, argv), [])


def test_a_relative_source_run_of_an_older_config_json_is_read_from_the_current_folder(tmp_path, monkeypatch):
    """As `PATH_KEYS` are: the run's config.json, written before the path was made absolute, is not refused."""
    monkeypatch.chdir(tmp_path)
    config = load_config(FilteredBCRunConfig, [f"output_dir={tmp_path / 'out'}", "filtered_bc.source_run=runs/webrl"])
    config.filtered_bc.source_run = "runs/webrl"  # as an older version kept it
    keep_run_config(tmp_path / "out", config, [])
    relaunch = load_config(FilteredBCRunConfig, [f"output_dir={tmp_path / 'out'}", "filtered_bc.source_run=runs/webrl"])
    assert check_run_config(tmp_path / "out", relaunch, []) == {}
