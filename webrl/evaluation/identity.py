"""What an evaluation's results were made by: the checkpoint (path and weights), the tasks, the sampling.

Evaluation resumes by task id from its trajectories file, so that file must never be shared by two
different evaluations: evaluating `phase_003/actor` into a file that `phase_001/actor` wrote would
run no episode and report phase 1's score as phase 3's. Results are therefore named by a short
digest of this identity, and the identity itself is written into the results.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from webrl.loop_config import WebRLConfig

WEIGHT_SUFFIXES = (".safetensors", ".bin")
CHUNK_BYTES = 1 << 24


def weights_sha256(checkpoint: Path) -> str | None:
    """SHA-256 over the checkpoint's weight files, in name order, each as `name NUL bytes`; None if it has none.

    The bytes, not the modification times: a checkpoint rewritten with the same weights keeps its
    identity, and one trained again in the same folder gets a new one. The digest is remembered per file
    size and modification time, so checking a comparison's methods again does not hash their weights again.
    """
    files = sorted(path for path in Path(checkpoint).glob("*") if path.suffix in WEIGHT_SUFFIXES and path.is_file())
    if not files:
        return None
    return _files_sha256(tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in files))


@functools.lru_cache(maxsize=32)
def _files_sha256(files: tuple[tuple[str, int, int], ...]) -> str:
    """The digest of `weights_sha256` over (path, size, mtime) entries; the size and time only key the cache."""
    digest = hashlib.sha256()
    for name, _, _ in files:
        path = Path(name)
        digest.update(path.name.encode() + b"\0")
        _digest_file(digest, path)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of one file's bytes (a critic's `critic.pt`), read in chunks: a SmolLM2 critic is half a gigabyte."""
    return _digest_file(hashlib.sha256(), path).hexdigest()


def _digest_file(digest: Any, path: Path) -> Any:
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest


def weights_unchanged(identity: dict[str, Any]) -> bool:
    """Whether the checkpoint an evaluation's `identity` names still holds the weights it evaluated.

    A result is reused by its settings, but the folder it evaluated can be trained again in place (an SFT
    cache rebuilt after its folder was deleted, a Filtered BC run redone): its old score is then not the
    checkpoint's. A checkpoint that is gone does not match either.
    """
    checkpoint = identity.get("checkpoint")
    return checkpoint is not None and weights_sha256(Path(checkpoint)) == identity.get("weights_sha256")


CHECKPOINT_KEYS = ("checkpoint", "weights_sha256")
"""The keys of an identity that name the weights; the others are the evaluation's settings."""


def evaluation_identity(config: WebRLConfig, checkpoint: Path) -> dict[str, Any]:
    """Everything that decides an evaluation's outcomes: which weights, on which tasks, sampled how."""
    return {
        "checkpoint": str(Path(checkpoint).resolve()),
        "weights_sha256": weights_sha256(checkpoint),
        **evaluation_settings(config),
    }


def evaluation_settings(config: WebRLConfig) -> dict[str, Any]:
    """The part of an evaluation's identity that the config decides: the tasks and the sampling, not the weights.

    A comparison finds a run's evaluation by these, so it never reads one made on other tasks.
    """
    env = config.env
    # Where the sites are, who judges fuzzy answers, the login, the server's URL and the episode limits that were
    # fixed in code before (`EPISODE_LIMIT_KEYS`) decide outcomes too. They count only away from their defaults, so
    # that an embedded run's identity (and its file names) stays what it was.
    defaults = type(env)()
    outside = {
        "url_map": env.url_map,
        "judge_url": env.judge_url,
        "judge_model": env.judge_model,
        "storage_state_dir": env.storage_state_dir,
    }
    outside = {key: value for key, value in outside.items() if value != getattr(defaults, key)}
    outside.update(env.changed_limits())
    if config.rollout.engine == "openai":
        outside["openai_url"] = config.rollout.openai_url
    return {
        "suite": env.suite,
        "split": env.test_split,
        "test_tasks": env.test_tasks,
        "seed": config.seed,
        "engine": config.rollout.engine,
        "temperature": config.rollout.eval_temperature,
        "max_tokens": config.rollout.max_tokens,
        "max_steps": env.max_steps,
        "html_chars": env.html_chars,
        "observe_region": env.observe_region,
        **outside,
    }


def identity_tag(identity: dict[str, Any]) -> str:
    """A short digest of `identity`, for file names."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
