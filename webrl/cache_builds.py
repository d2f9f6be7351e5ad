"""Cache entries and model directories built once, whole, and never half-read.

A build is written in a `staging_dir` of its own and renamed into place with its `DONE_MARKER` (`publish_model_dir`),
so a cache or a resumed run never loads half a model (`is_built`). An entry that two processes may build at once
(two runs sharing `model.cache_dir`) is built once (`build_once`, under `build_lock`). This module needs no model
code: the SmolLM2 conversion (`webrl.modules`) and the training stages (`webrl.training`) both build through it.
"""

from __future__ import annotations

import fcntl
import glob
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from webrl.code_version import code_version
from webrl.data.atomic_io import publish_dir, write_json_atomic

if TYPE_CHECKING:
    from lightning.fabric import Fabric

DONE_MARKER = "webrl_done.json"
LOCK_POLL_S = 5.0
"""Seconds between the tries of a run of several processes to take a build lock another run holds."""

log = logging.getLogger(__name__)


def is_built(path: Path) -> bool:
    """A model directory (or other build) is complete: its done marker is in."""
    return (path / DONE_MARKER).exists()


def build_metrics(target: Path) -> dict[str, float]:
    """The metrics a build kept in its done marker (an SFT actor's `sft/seconds`); {} where it kept none."""
    metrics = _marker_record(target / DONE_MARKER).get("metrics")
    return metrics if isinstance(metrics, dict) else {}


def _marker_record(marker: Path) -> dict[str, Any]:
    """A done marker's JSON object; {} for a marker that is missing, unreadable or not an object (older entries)."""
    try:
        record = json.loads(marker.read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def staging_dir(target: Path) -> Path:
    """A new empty directory beside `target` to build it in (`.<name>.tmp-<random>`), then renamed to it.

    A fixed name (`<target>.tmp`) would be shared by two processes building the same target, each deleting and
    overwriting the other's half-written files; beside the target, the final rename stays on one filesystem.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would make a shared cache's entries unreadable to other users
    return staging


def build_once(
    target: Path,
    build: Callable[[], object],
    fabric: Fabric | None = None,
    *,
    done: Callable[[Path], bool] = is_built,
    marker: Callable[[Path], Path] = lambda target: target / DONE_MARKER,
) -> None:
    """Run `build()` unless `done(target)`: under `build_lock`, asking `done` again once the lock is held, so that of
    two processes that need `target` at once one builds it and the other reuses it.

    Under several processes of one run (`fabric`), every rank goes by rank 0's answers, and `build` runs on all of
    them: were a rank to see another run's entry appear a moment before rank 0 does, it would skip a build whose
    collectives the others wait in. An entry reused as it was found is checked against the code that built it
    (`marker(target)`'s JSON, see `warn_if_built_by_other_code`).
    """
    if _agreed(done(target), fabric):
        if fabric is None or fabric.is_global_zero:
            warn_if_built_by_other_code(target, marker(target))
        return
    with build_lock(target, fabric):
        if not _agreed(done(target), fabric):  # built by another process while this one waited
            build()


def warn_if_built_by_other_code(target: Path, marker: Path) -> bool:
    """Warn (and return True) where the code recorded in `marker` (`{"code": code_version()}`) is not this code's.

    Cache keys hold the settings and data an entry depends on, not the code: keying by commit would rebuild a
    two-hour SFT actor after every commit. A change to the code that records demonstrations or trains a model
    therefore reuses what older code built; this says so, naming both commits, so that it is never silent. A
    marker without a record (older entries) or a checkout without git says nothing.
    """
    built = _marker_record(marker).get("code") or {}
    if not built:
        return False
    current = code_version()
    field = "commit" if built.get("commit") and current["commit"] else "webrl"
    if not built.get(field) or not current[field] or built[field] == current[field]:
        return False
    log.warning(
        "%s: reusing a cache entry built by %s %s, not by this code (%s): caches are keyed by settings and data, "
        "not code; delete it to rebuild it with this code",
        target,
        field,
        built[field],
        current[field],
    )
    return True


def _agreed(answer: bool, fabric: Fabric | None) -> bool:
    """Rank 0's `answer`, on every rank of a run of several processes; `answer` itself on one."""
    if fabric is not None and fabric.world_size > 1:
        return bool(fabric.broadcast(answer, src=0))
    return answer


@contextmanager
def build_lock(target: Path, fabric: Fabric | None = None) -> Iterator[None]:
    """Hold `<target>.lock` while `target` is built, so that two processes never build the same entry at once.

    The caller checks again whether `target` is built once it holds the lock (`build_once`): a process that
    waited then reuses what the other one built. The lock is an `fcntl.flock`, which the kernel drops when its
    holder dies, so a killed build leaves no stale lock, and the next holder resumes from what it left
    (`<target>.resume`); the staging directories it left are removed once the lock is held, as no one else can be
    writing them. `fabric`: the processes of one run, of which rank 0 takes the lock for all (see `_acquire`); None
    for one process alone. The lock file stays (removing it would let a third process lock a file the second one
    no longer sees).
    """
    lead = fabric is None or fabric.is_global_zero
    handle = None
    if lead:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle = target.with_name(target.name + ".lock").open("a")
    try:
        _acquire(handle, target, fabric)
        if lead:
            for stale in target.parent.glob(glob.escape(f".{target.name}.tmp-") + "*"):
                shutil.rmtree(stale, ignore_errors=True)
        yield
    finally:
        if handle is not None:
            handle.close()  # releases the lock


def _acquire(handle: IO[str] | None, target: Path, fabric: Fabric | None) -> None:
    """Take the lock on `handle` (rank 0's; None on the other ranks), waiting while another process holds it.

    One process blocks in `flock`. The processes of one run cannot: a rank waiting in a collective for rank 0
    would time out while another run builds for an hour. So rank 0 tries without blocking and every rank learns
    its answer by a broadcast, every `LOCK_POLL_S` seconds, until it holds the lock.
    """
    together = fabric is not None and fabric.world_size > 1
    announced = False
    while True:
        if _agreed(handle is None or _try_lock(handle), fabric):
            return
        if not announced and handle is not None:
            log.warning("%s: another process is building it; waiting for it to finish", target)
            announced = True
        if not together:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            return
        time.sleep(LOCK_POLL_S)


def _try_lock(handle: IO[str]) -> bool:
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def publish_model_dir(tmp: Path, target: Path, info: dict[str, Any]) -> Path:
    """Mark `tmp` complete and move it to `target` in one rename (files fsynced): a half-built dir is never used.

    The marker holds `info` and the code that built the directory (`webrl.code_version`).
    """
    write_json_atomic(tmp / DONE_MARKER, {**info, "code": code_version()})
    return publish_dir(tmp, target)
