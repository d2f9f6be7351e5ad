"""Progress of the long stages (rollouts, demonstrations, ORM labelling, replay scoring, training steps).

On a terminal a stage draws a tqdm bar. When the output goes elsewhere (a log file, a job scheduler,
`nohup`), a bar would fill the log with carriage-return frames, so the stage writes one plain line
every `interval` seconds instead, and one when it ends. Every stage gets its bar from `progress_bar`,
so the choice is made in one place.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from tqdm.auto import tqdm

LOG_INTERVAL_S = 30.0
"""Seconds between two progress lines when no terminal shows a bar: often enough to see a stage is alive."""


def on_terminal(stream: IO[str]) -> bool:
    """Whether a bar would be seen: both stdout and the bar's stream are terminals (a redirected stdout
    means the run is being logged, and a log holds lines, not bar frames)."""
    return _isatty(sys.stdout) and _isatty(stream)


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class ProgressLog:
    """tqdm's `update`/`set_postfix`/`close` as a line every `interval` seconds and one at the end.

    `clock` is the time source (seconds, monotonic); tests pass their own.
    """

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        *,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        stream: IO[str] | None = None,
        interval: float = LOG_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable = iterable
        self.total = total
        self.desc = desc
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        self.n = 0
        self.postfix = ""
        self.started = self.last_line = clock()
        self.closed = False

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("ProgressLog was given no iterable to walk")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> ProgressLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last_line >= self.interval:
            self._write(now, "")

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def close(self) -> None:
        """The closing line, once, if anything was done."""
        if not self.closed and self.n:
            self._write(self.clock(), " done")
        self.closed = True

    def _write(self, now: float, suffix: str) -> None:
        self.last_line = now
        of = f"/{self.total}" if self.total is not None else ""
        share = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        postfix = f", {self.postfix}" if self.postfix else ""
        line = f"{self.desc}:{suffix} {self.n}{of} {self.unit}{share} in {now - self.started:.0f}s{postfix}"
        print(line, file=self.stream, flush=True)


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    total: int | None = None,
    desc: str,
    unit: str = "it",
    enabled: bool = True,
    stream: IO[str] | None = None,
    interval: float = LOG_INTERVAL_S,
) -> Any:
    """A tqdm bar on a terminal, a `ProgressLog` elsewhere, nothing (a disabled bar) when not `enabled`.

    `enabled` is for the caller's own reasons (a rank other than 0, a quiet sub-step); whether a
    terminal is there is decided here. Both results iterate, `update`, `set_postfix` and `close`.
    """
    stream = stream if stream is not None else sys.stderr
    if enabled and not on_terminal(stream):
        return ProgressLog(iterable, total=total, desc=desc, unit=unit, stream=stream, interval=interval)
    return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, file=stream, disable=not enabled)
