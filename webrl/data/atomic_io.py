"""Crash-consistent files: atomic writes, torn-line-tolerant JSONL reads, and the fault-injection hook.

Every result a run keeps goes through `atomic_write` (or its JSON, JSONL, text and directory forms):
the content goes to a temp file in the target's own directory, is flushed and fsynced, renamed over
the target, and then the directory itself is fsynced (and the parent of any directory created for it),
so that after a crash or a power loss a reader finds the old file or the new one, never a mix, and a file
renamed into place stays there. Appended JSONL files (rollouts, one fsynced line per episode) can still
end in a torn line; `read_jsonl` drops it, undecodable bytes included (a multibyte character cut in
half), warns and says how many lines it dropped, and an appender cuts it first (`repair_jsonl_tail`,
`append_jsonl_line`).

The module sits in `webrl.data`, the lowest layer, because the records are written there; it imports
nothing of webrl and not torch (`webrl.env` runs without torch): a torch state goes through
`atomic_write(path, partial(torch.save, state))`.

Fault injection, for the crash tests: with `WEBRL_FAULT=<point>` set, the process ends at once with
`os._exit(FAULT_EXIT_CODE)` (no cleanup, no flush: a kill -9 at a known place) when it reaches that
point. The points are
- `write:<path>`: inside an atomic write of a file whose path ends with `<path>`
  (`write:phase_001/critic.pt`, `write:run_state.json`), after the temp file is complete and fsynced
  and before it is renamed into place; the first matching write in the process faults;
- `stage:<phase>:<stage>:written`: the stage's outputs and metrics are written, the stage is not yet
  marked done in run_state.json (`webrl.phase_record`);
- `stage:<phase>:<stage>:marked`: the stage is marked done and the next one has not started.
With `WEBRL_FAULT_LOG=<file>` set, every point reached is appended to that file, one per line, so a
test can list the points of a whole run and then fault at each in turn. With neither set, a point
costs one environment lookup.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

FAULT_ENV = "WEBRL_FAULT"
"""The environment variable naming the point at which to end the process (see the module docstring)."""

FAULT_LOG_ENV = "WEBRL_FAULT_LOG"
"""The environment variable naming a file that every fault point reached is appended to."""

FAULT_EXIT_CODE = 86
"""The exit status of a process ended by an injected fault, told apart from a crash or a clean exit."""


def fault_point(name: str) -> None:
    """End the process here, hard, when `WEBRL_FAULT` names this point; log it when `WEBRL_FAULT_LOG` is set."""
    spec = os.environ.get(FAULT_ENV)
    log_path = os.environ.get(FAULT_LOG_ENV)
    if not spec and not log_path:
        return
    if log_path:
        with open(log_path, "a", encoding="utf-8") as handle:
            handle.write(name + "\n")
    if spec and _matches(spec, name):
        sys.stderr.write(f"{FAULT_ENV}={spec}: injected fault at {name}\n")
        sys.stderr.flush()
        os._exit(FAULT_EXIT_CODE)


def _matches(spec: str, name: str) -> bool:
    if spec == name:
        return True
    if not (spec.startswith("write:") and name.startswith("write:")):
        return False
    suffix, path = spec[len("write:") :], name[len("write:") :]
    return path == suffix or path.endswith("/" + suffix)


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory, so that the renames and creations in it survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: str | os.PathLike) -> Path:
    """Create `directory` and its missing parents, fsyncing the parent of each one created.

    A new directory's entry lives in its parent: fsyncing only the directory a file is renamed into leaves
    that entry, and with it the file, at the mercy of a power loss (`phase_001/metrics/` created for a
    stage's metrics, lost after `run_state.json` had marked the stage done).
    """
    directory = Path(directory)
    missing = [d for d in (directory, *directory.parents) if not d.exists()]
    for created in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process (a rank, a run) made it meanwhile
            created.mkdir()
        fsync_dir(created.parent)
    return directory


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Call `write(handle)` on a temp file beside `path`, fsync it, rename it over `path`, fsync the directory
    (and the parent of each directory created for it: `make_dirs`)."""
    path = Path(path)
    make_dirs(path.parent)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        fault_point(f"write:{path.as_posix()}")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)
    return path


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    return atomic_write(path, lambda handle: handle.write(data))


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, data: Any, *, indent: int = 2, sort_keys: bool = True) -> Path:
    """JSON (UTF-8, non-ASCII kept) written atomically: readers see the old document or the new one."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, ensure_ascii=False)
    return write_text_atomic(path, text + "\n")


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> Path:
    """JSON records one per line, the whole file written atomically (a rewrite, never an append)."""

    def write(handle: IO[bytes]) -> None:
        for record in records:
            handle.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))

    return atomic_write(path, write)


def moved_aside(target: str | os.PathLike) -> Path:
    """Where `publish_dir` keeps the earlier `target` between its two renames (and a crash may leave it)."""
    target = Path(target)
    return target.with_name(f".{target.name}.old")


def publish_dir(tmp: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Move the finished directory `tmp` to `target` in one rename, its files fsynced first.

    An earlier `target` is moved aside before the rename and removed after it, so that a crash leaves
    either directory complete under `target` or `target` absent and the earlier one whole beside it
    (`moved_aside`). A copy a crash left aside is removed only while a whole `target` stands: after such
    a crash it may be the only finished one.
    """
    tmp, target = Path(tmp), Path(target)
    for file in sorted(p for p in tmp.rglob("*") if p.is_file()):
        with file.open("rb") as handle:
            os.fsync(handle.fileno())
    for directory in sorted((p for p in tmp.rglob("*") if p.is_dir()), reverse=True):
        fsync_dir(directory)
    fsync_dir(tmp)
    fault_point(f"write:{target.as_posix()}")
    old = moved_aside(target)
    if target.exists():
        if old.exists():
            shutil.rmtree(old)
        target.rename(old)
    tmp.rename(target)
    fsync_dir(target.parent)
    if old.exists():
        shutil.rmtree(old)
    return target


class JsonlError(ValueError):
    """A JSONL line that cannot be read and is not a torn last line; the message names the file and line."""


def read_jsonl(path: str | os.PathLike) -> tuple[list[tuple[int, Any]], int]:
    """The (line number, record) pairs of a JSONL file, and how many torn lines were dropped (0 or 1).

    Only the last line can be torn (the writers append whole fsynced lines): when it has no newline
    and is not a whole JSON object (a half line, a multibyte character cut short; `is_torn_tail`) it
    is dropped with a warning. Any other line that does not decode is an error naming the file and
    the line, since skipping data silently would bias training.
    """
    path = Path(path)
    lines = path.read_bytes().split(b"\n")
    tail = lines.pop()  # what follows the last newline: b"" for a whole file, else an unterminated line
    records: list[tuple[int, Any]] = []
    for number, raw in enumerate(lines, start=1):
        if raw.strip():
            records.append((number, _decode(path, number, raw)))
    if not tail.strip():
        return records, 0
    number = len(lines) + 1
    if is_torn_tail(tail):
        warnings.warn(
            f"{path}:{number}: dropping a torn last line ({len(tail)} bytes) left by an interrupted write",
            stacklevel=2,
        )
        return records, 1
    records.append((number, _decode(path, number, tail)))
    return records, 0


def repair_jsonl_tail(path: Path) -> None:
    """End a JSONL file on a newline before appending to it: complete a whole last record, cut a torn one.

    Whether the tail is torn is `is_torn_tail`'s answer, the one `read_jsonl` gives, so a record the reader counts
    as written is kept here too.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        if is_torn_tail(data[keep:]):
            warnings.warn(
                f"{path}: dropping a torn last line ({len(data) - keep} bytes) left by an interrupted write",
                stacklevel=2,
            )
            handle.truncate(keep)
        else:
            handle.write(b"\n")
        handle.flush()
        os.fsync(handle.fileno())


def append_jsonl_line(path: Path, record: dict[str, Any]) -> None:
    """Append `record` as one fsynced line (its folder and a new file's entry fsynced too), after `repair_jsonl_tail`:
    a crash loses at most the line being written, which readers then drop as torn."""
    make_dirs(path.parent)
    created = not path.exists()
    repair_jsonl_tail(path)
    with path.open("ab") as handle:
        handle.write((json.dumps(record) + "\n").encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    if created:
        fsync_dir(path.parent)


def is_torn_tail(tail: bytes) -> bool:
    """Whether the bytes after a JSONL file's last newline are a torn line that readers and appenders drop.

    A tail that decodes as a whole JSON object is not torn: the crash came after the record and before its
    newline, so the record is kept. `read_jsonl` and `repair_jsonl_tail` (the appenders') both ask here, so
    that a resumed rollout never deletes an episode its resume logic has counted as finished.
    """
    if not tail.strip():
        return False
    try:
        record = json.loads(tail.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return True
    return not isinstance(record, dict)


def _decode(path: Path, number: int, raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise JsonlError(f"{path}:{number}: not UTF-8 ({err})") from err
    except json.JSONDecodeError as err:
        raise JsonlError(f"{path}:{number}: not valid JSON ({err})") from err
