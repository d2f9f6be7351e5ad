"""Durable replay buffer of earlier phases' trajectories, and WebRL's experience filter.

The buffer lives on disk, one directory per phase (`phase_000/trajectories.jsonl`) plus a
`manifest.json` listing the phases that were completely written. Each phase file is written
atomically (`webrl.data.atomic_io`), then the manifest, so a crash leaves either the old buffer or
the new one, never a half-added phase; reopening the directory restores the buffer. Adding a phase
is keyed by the phase: a replayed stage rewrites that phase's file and entry and never duplicates
them. A buffer whose manifest is gone while phase files remain is rebuilt from those files (each
was complete before it was listed), with a warning. The trajectories keep all their labels (ORM
score and reward, evaluator reward, outcome).

The filter (docs/method.md §6.2, release `process_data.py` stage 2) decides which replayed steps join the
current phase's training data: successful trajectories only, the first success per task (by
intent string), then steps whose geometric-mean action-token probability under the current
actor lies in (0.5, 0.95] (too unlikely: the actor moved away from it; too likely: nothing
left to learn), shuffled by seed and capped at twice the current phase's step count.
"""

from __future__ import annotations

import json
import math
import os
import random
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webrl.config_checks import positive, require, within
from webrl.data.atomic_io import write_json_atomic
from webrl.data.step_values import replay_scores_record
from webrl.data.steps import DEFAULT_GAMMA, StepSample, trajectory_to_samples
from webrl.data.trajectory import SUCCESS_THRESHOLD, Trajectory, phase_name, read_trajectories, write_trajectories
from webrl.progress import progress_bar

MANIFEST_VERSION = 1

PHASE_FILE = "trajectories.jsonl"
"""A phase's trajectories, in the phase's directory (`phase_name`) of the buffer."""

Scorer = Callable[..., list[float]]
"""score(prompts, actions) -> geometric-mean action-token probability of each (prompt, action).

For a batch holding a response the engine cut at its token budget, `score_samples` adds a third argument, one
`StepSample.truncated` flag per action, so that the cut actions are scored without the end-of-sequence token they
never had (`webrl.modules.lm.actor_scorer` takes it); batches with no cut response get the two arguments alone."""

PromptFitter = Callable[[StepSample], str]
"""fit_prompt(sample) -> the prompt text a sample's action is scored after (the one the actor trains on)."""


@dataclass
class ReplayFilterConfig:
    """Experience-filter settings; defaults are the WebRL release's."""

    low: float = 0.5
    """Lower bound of the kept geometric-mean action probability."""
    high: float = 0.95
    """Upper bound of the kept geometric-mean action probability."""
    low_inclusive: bool = False
    """Keep a step whose probability equals `low` (the release keeps (0.5, 0.95])."""
    high_inclusive: bool = True
    """Keep a step whose probability equals `high`."""
    cap_ratio: float | None = 2.0
    """At most cap_ratio x (current phase's steps) replayed steps; null for no cap."""
    success_threshold: float = SUCCESS_THRESHOLD
    """A trajectory whose outcome is at least this is a success to replay (`Trajectory.succeeded_at`); 0.5 to 1,
    since training counts an outcome below 0.5 as a failure."""
    first_success_per_task: bool = True
    """Keep only the first successful trajectory of each intent string."""
    seed: int = 0
    """Seed of the shuffle that picks which kept steps survive the cap."""

    def validate(self, prefix: str) -> None:
        """Raise ConfigError naming `prefix.<key>`, its value and what is allowed (low >= high too)."""
        within(f"{prefix}.low", self.low, 0, 1)
        within(f"{prefix}.high", self.high, 0, 1)
        require(
            self.low < self.high,
            f"{prefix}.low",
            self.low,
            f"must be below {prefix}.high ({self.high})",
        )
        if self.cap_ratio is not None:
            positive(f"{prefix}.cap_ratio", self.cap_ratio)
        # Below the 0.5 that training's outcome uses (`trajectory_outcome`), a replayed "success" would be trained as
        # a failure: return 0, critic target 0.
        require(
            SUCCESS_THRESHOLD <= self.success_threshold <= 1,
            f"{prefix}.success_threshold",
            self.success_threshold,
            f"must be in [{SUCCESS_THRESHOLD}, 1]: training counts an outcome below {SUCCESS_THRESHOLD} as a failure",
        )

    def in_window(self, probability: float) -> bool:
        above = probability >= self.low if self.low_inclusive else probability > self.low
        below = probability <= self.high if self.high_inclusive else probability < self.high
        return above and below


class ReplayBuffer:
    """Trajectories of every finished phase, stored under `root`, reopened from disk on construction."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._manifest = self._read_manifest()

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def phases(self) -> list[int]:
        return sorted(int(phase) for phase in self._manifest["phases"])

    def phase_path(self, phase: int) -> Path:
        return self.root / phase_name(phase) / PHASE_FILE

    def add_phase(self, phase: int, trajectories: Iterable[Trajectory], *, overwrite: bool = False) -> Path:
        """Store `trajectories` as phase `phase`; re-adding a phase needs `overwrite=True` and replaces it whole."""
        if phase < 0:
            raise ValueError(f"phase must be >= 0, got {phase}")
        if str(phase) in self._manifest["phases"] and not overwrite:
            raise ValueError(f"{self.root}: phase {phase} is already stored (pass overwrite=True to replace it)")
        trajectories = list(trajectories)
        path = self.phase_path(phase)
        write_trajectories(path, trajectories)
        self._manifest["phases"][str(phase)] = self._entry(path, trajectories)
        self._write_manifest()
        return path

    def _entry(self, path: Path, trajectories: list[Trajectory]) -> dict[str, Any]:
        return {
            "file": path.relative_to(self.root).as_posix(),
            "trajectories": len(trajectories),
            "steps": sum(len(t.steps) for t in trajectories),
            "successes": sum(1 for t in trajectories if t.succeeded),
        }

    def trajectories(self, phase: int | None = None, *, before: int | None = None) -> list[Trajectory]:
        """The trajectories of one phase, or of every phase in phase order when `phase` is None.

        `before` keeps only the phases below it: what the buffer held when that phase began, even when
        a crash left that phase itself already added.
        """
        phases = self.phases() if phase is None else [phase]
        if before is not None:
            phases = [p for p in phases if p < before]
        out: list[Trajectory] = []
        for p in phases:
            entry = self._manifest["phases"].get(str(p))
            if entry is None:
                raise KeyError(f"{self.root}: no phase {p} in the replay buffer (phases: {self.phases()})")
            out.extend(read_trajectories(self.root / entry["file"]))
        return out

    def stats(self) -> dict[int, dict[str, Any]]:
        """Per-phase counts (trajectories, steps, successes) from the manifest."""
        return {int(p): dict(entry) for p, entry in self._manifest["phases"].items()}

    def __len__(self) -> int:
        return sum(entry["trajectories"] for entry in self._manifest["phases"].values())

    def _read_manifest(self) -> dict[str, Any]:
        if not self.manifest_path.exists():
            return self._rebuild_manifest()
        try:
            manifest = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{self.manifest_path}: not valid JSON ({err})") from err
        if manifest.get("version") != MANIFEST_VERSION or not isinstance(manifest.get("phases"), dict):
            raise ValueError(f"{self.manifest_path}: not a replay manifest of version {MANIFEST_VERSION}")
        return manifest

    def _rebuild_manifest(self) -> dict[str, Any]:
        """The manifest of the phase files on disk: none for a new buffer; a warning when there were some."""
        manifest: dict[str, Any] = {"version": MANIFEST_VERSION, "phases": {}}
        found = sorted(self.root.glob(f"phase_*/{PHASE_FILE}"))
        if not found:
            return manifest
        for path in found:
            phase = int(path.parent.name.removeprefix("phase_"))
            manifest["phases"][str(phase)] = self._entry(path, read_trajectories(path))
        warnings.warn(
            f"{self.manifest_path} is missing; rebuilt it from {len(found)} phase files "
            f"(phases {sorted(int(p) for p in manifest['phases'])})",
            stacklevel=3,
        )
        self._manifest = manifest
        self._write_manifest()
        return manifest

    def _write_manifest(self) -> None:
        write_json_atomic(self.manifest_path, self._manifest)


def select_successes(
    trajectories: Iterable[Trajectory], *, threshold: float = SUCCESS_THRESHOLD, first_per_task: bool = True
) -> list[Trajectory]:
    """Successful trajectories in input order; with `first_per_task`, only the first per intent string."""
    seen: set[str] = set()
    kept = []
    for trajectory in trajectories:
        if not trajectory.succeeded_at(threshold):
            continue
        if first_per_task:
            if trajectory.task.intent in seen:
                continue
            seen.add(trajectory.task.intent)
        kept.append(trajectory)
    return kept


def score_samples(
    samples: Sequence[StepSample],
    score: Scorer,
    *,
    batch_size: int = 8,
    fabric: Any = None,
    fit_prompt: PromptFitter | None = None,
) -> list[float]:
    """Score every sample, in batches; under data parallelism each rank scores a shard.

    The scorer gets `fit_prompt(sample)` as each sample's prompt (without it, the sample's prompt
    unchanged). With `fabric` (a `lightning.fabric.Fabric`) or an initialised `torch.distributed`
    group of world size W, rank r scores samples r, r+W, r+2W, ... and the scores are all-gathered,
    so every rank returns the full list in sample order. Every rank must call this.

    A rank whose shard fails (a sample too long for `max_length`, a scorer error) still joins the gather, marked as
    failed: it raises its own error, and every other rank `PeerScoringError`, instead of waiting in the gather for
    a rank that left.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    prompt_of = fit_prompt if fit_prompt is not None else _recorded_prompt
    world, rank = _world(fabric)
    shard = list(samples[rank::world])
    if world == 1:
        return _score_shard(shard, score, prompt_of, batch_size, rank)
    local: list[float] = []
    failure: Exception | None = None
    try:
        local = _score_shard(shard, score, prompt_of, batch_size, rank)
    except Exception as err:
        failure = err
    scores, failed = _gather_interleaved(local, len(samples), world, fabric, failed=failure is not None)
    if failure is not None:
        raise failure
    if failed:
        raise PeerScoringError(f"replay scoring failed on rank {', '.join(map(str, failed))} (its error is above)")
    return scores


class PeerScoringError(RuntimeError):
    """Another rank's shard of `score_samples` failed; that rank raises (and reports) the error itself."""


def _score_shard(
    shard: list[StepSample], score: Scorer, prompt_of: PromptFitter, batch_size: int, rank: int
) -> list[float]:
    """The shard's scores in shard order, computed in batches of neighbours in length.

    A step's score does not depend on its batch (positions come from the attention mask), so scoring the steps
    sorted by prompt and action length only spares the padding: in input order, a batch of 8 steps whose prompts
    run from 100 to 900 tokens pads every row to the longest.
    """
    prompts = [prompt_of(s) for s in shard]
    order = sorted(range(len(shard)), key=lambda i: len(prompts[i]) + len(shard[i].action))
    local = [0.0] * len(shard)
    starts = range(0, len(shard), batch_size)
    # Progress on rank 0 only: a bar on a terminal, a periodic line elsewhere.
    for start in progress_bar(starts, desc="replay scoring", unit="batch", enabled=rank == 0):
        chosen = order[start : start + batch_size]
        batch = [shard[i] for i in chosen]
        actions, cut = [s.action for s in batch], [s.truncated for s in batch]
        texts = [prompts[i] for i in chosen]
        scores = score(texts, actions, cut) if any(cut) else score(texts, actions)
        if len(scores) != len(batch):
            raise ValueError(f"scorer returned {len(scores)} scores for a batch of {len(batch)}")
        for i, x in zip(chosen, scores, strict=True):
            local[i] = float(x)
    return local


def _recorded_prompt(sample: StepSample) -> str:
    return sample.prompt


def _world(fabric: Any) -> tuple[int, int]:
    if fabric is not None:
        return fabric.world_size, fabric.global_rank
    # torch loads only where scores are shared across processes: the run config that holds
    # ReplayFilterConfig is read (by --help and --dry-run) without it.
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _gather_interleaved(
    local: list[float], total: int, world: int, fabric: Any, *, failed: bool = False
) -> tuple[list[float], list[int]]:
    """Every rank's shard, in sample order, and the ranks that marked their shard `failed`."""
    import torch
    import torch.distributed as dist

    # Shards differ in length by at most one: pad to the longest so every rank sends the same shape. One more
    # column says whether the rank failed, so that no rank needs another collective to learn it.
    width = -(-total // world) + 1
    padded = torch.full((width,), float("nan"), dtype=torch.float64)
    padded[0] = float(failed)
    padded[1 : 1 + len(local)] = torch.tensor(local, dtype=torch.float64)
    if fabric is not None:
        gathered = fabric.all_gather(padded.to(fabric.device)).reshape(world, width).cpu()  # (W, L)
    else:
        # NCCL only moves GPU tensors; gloo takes CPU ones.
        on_gpu = dist.get_backend() == "nccl"
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        parts = [torch.empty_like(padded, device=device) for _ in range(world)]
        dist.all_gather(parts, padded.to(device))
        gathered = torch.stack(parts).cpu()  # (W, L)
    failed_ranks = [r for r in range(world) if gathered[r, 0] != 0]
    # Sample j was scored by rank j % W at position j // W (column 0 is the failure flag).
    return [float(gathered[j % world, 1 + j // world]) for j in range(total)], failed_ranks


_CAP_TOLERANCE = 1e-9
"""Added to `cap_ratio x current steps` before flooring, so that float rounding (0.29 x 100 = 28.999…) loses no step."""


def _replay_cap(cap_ratio: float | None, current_steps: int) -> int | None:
    """How many replayed steps the filter keeps at most: `cap_ratio` x `current_steps`, floored; None for no cap."""
    if cap_ratio is None:
        return None
    return math.floor(cap_ratio * current_steps + _CAP_TOLERANCE)


def filter_by_perplexity(
    experience: Iterable[Trajectory],
    score: Scorer,
    *,
    current_steps: int,
    config: ReplayFilterConfig | None = None,
    gamma: float = DEFAULT_GAMMA,
    batch_size: int = 8,
    fabric: Any = None,
    chat_template_tokenizer: Any = None,
    scores_path: str | os.PathLike | None = None,
    fit_prompt: PromptFitter | None = None,
) -> list[StepSample]:
    """WebRL's experience filter: the replayed steps that join this phase's training data.

    `experience` holds earlier phases' trajectories in the order they were stored; `score`
    returns geometric-mean action probabilities under the current actor; `current_steps` is
    the number of steps collected in the current phase (the cap is `cap_ratio` times that).
    Returns the kept samples, each with its `score`, in a seeded random order. With `scores_path`,
    rank 0 also writes every scored step's probability and the window there (the report's histogram).

    `fit_prompt` gives the prompt each action is scored after; without it, the step's recorded
    prompt. The window is meant to judge the sequence the actor will train on, so a run whose
    prompts can exceed the token limit passes `webrl.data.collate.StepTokenizer.actor_prompt`:
    a prompt that is too long then loses the end of its page, as in the actor's batches, where a
    scorer given the whole prompt would cut it from the left and lose the instruction and history.
    """
    config = config or ReplayFilterConfig()
    successes = select_successes(
        experience, threshold=config.success_threshold, first_per_task=config.first_success_per_task
    )
    samples = [
        sample
        for trajectory in successes
        for sample in trajectory_to_samples(trajectory, gamma=gamma, chat_template_tokenizer=chat_template_tokenizer)
    ]
    scores = score_samples(samples, score, batch_size=batch_size, fabric=fabric, fit_prompt=fit_prompt)
    kept = []
    for sample, probability in zip(samples, scores, strict=True):
        sample.score = probability
        if config.in_window(probability):
            kept.append(sample)
    random.Random(config.seed).shuffle(kept)
    cap = _replay_cap(config.cap_ratio, current_steps)
    if cap is not None:
        kept = kept[:cap]
    if scores_path is not None and _world(fabric)[1] == 0:
        window = {
            "low": config.low,
            "high": config.high,
            "low_inclusive": config.low_inclusive,
            "high_inclusive": config.high_inclusive,
            "cap": cap,
        }
        write_json_atomic(scores_path, replay_scores_record(samples, scores, kept, window), indent=None)
    return kept


def current_phase_samples(
    trajectories: Iterable[Trajectory], *, gamma: float = DEFAULT_GAMMA, chat_template_tokenizer: Any = None
) -> list[StepSample]:
    """All steps of the current phase's labelled trajectories (successes and failures alike)."""
    samples = []
    for trajectory in trajectories:
        samples.extend(trajectory_to_samples(trajectory, gamma=gamma, chat_template_tokenizer=chat_template_tokenizer))
    return samples
