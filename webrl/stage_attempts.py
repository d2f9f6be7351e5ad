"""A stage's attempts: every launch that ran it, so that a stage resumed after a crash reports the time of all of them.

The rollouts and evaluate stages resume (a relaunch runs only the episodes that no earlier launch wrote), and so do
the training stages (from their stage checkpoints). Timed by the launch that finished it alone, such a stage would
report that launch's share only: a kill after 47 of 48 episodes left a rollouts stage that "took" the seconds of the
last one, with its rates from that one episode, or from 48 over those seconds; and a stage redone after its metrics
were written but before it was marked done (`webrl.phase_record.finish_stage`) ran no episode at all, so it lost
every speed figure and "took" the milliseconds of reading its files. `time/phase_s` sums the stages' times, and the
comparisons read a run's wall time from it.

So each attempt of a stage appends to `phase_NNN/metrics/<stage>.attempts.jsonl` (`attempts_path`: beside the
stages' metrics files, out of the `*.json` that make the phase's record) a line as it starts (the wall-clock time)
and one as it ends (its seconds and the metrics it reported), and the stage reports the figures of all its attempts:
- `time/<stage>_s` is the sum of the attempts' seconds; `time/<stage>_attempts` their number, when more than one;
- the metrics are the attempts' own, a later attempt's over an earlier one's, so a redone stage that ran nothing
  keeps the figures of the attempt that did;
- the rollout rates are every episode on disk (every rank's) over the rollout time of every attempt
  (`webrl.inference.rollout_metrics.rollout_rates`), so that they agree with `rollout/episodes` and `rollout/steps`:
  one uninterrupted rank's are its rollout run's own, and several ranks' the stage's throughput rather than rank
  0's share of it;
- the figures of the engine and the browser (the wall time's split, busy seconds, calls, batch size, tokens, step
  latencies: `webrl.inference.rollout_metrics.engine_browser_figures`) are those of every attempt that ran
  episodes, once an attempt before the last one did: their sums added, and the latencies' mean and percentiles
  taken over every step they measured.

A killed attempt never reports its figures, so a rollouts attempt also records them as it goes (`tally`): as each
episode ends, just before its line, the rollout run appends its sums so far and the step latencies measured since its
previous tally line (`webrl.inference.rollout_metrics.Tally`), and once more as it ends, so that its last line holds
the figures a finished attempt reports. Every episode on disk has its share recorded, and a killed attempt counts
those of its last line: its work up to the end of its last episode (the episodes then in flight included), its
rollout time what its clock had measured by then rather than all its time, its engine's start included. What it did
after that line is lost, as its time after its last file is; a kill between a tally line and its episode's line
counts the work of an episode that the relaunch runs again, as the engine did it twice. A percentile cannot be merged
from each attempt's, so the latencies' are over every step measured up to each attempt's last line, steps of
episodes a kill lost included: no record says which episode a latency was of. (The evaluate stage reports no
engine or browser figures: nothing to tally.)

A killed attempt cannot write its end. The next attempt of the stage, which is the first thing its launch runs,
closes it, counting its time up to the newest file it left in the phase directory (its last episode, screenshot or
stage checkpoint): the work it lost after that is not counted, as nothing on disk says how long it went on. This
reads the files' modification times against the attempt's wall-clock start, so a clock that differs between the
two launches' machines shifts the estimate; it is never below zero.

The lines are appended, one fsynced line each; a torn last line is dropped when read (`read_jsonl`) and cut before
the next append, as the trajectory files are. An attempt's end line is written before the stage's metrics, and an
attempt is closed only once (by its end line, or by the line of the next attempt that found it open), so a crash at
any point counts each attempt once. Only rank 0 keeps the record, as only its metrics are saved. Once the stage is
marked done the record has served (its metrics hold the sum and the count) and `webrl.phase_record.finish_stage`
removes it, so a finished run directory holds the files it held before, which branches copy by stage
(`webrl.run_branch`); one that a crash right after the mark left behind is never read again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from webrl.data.atomic_io import append_jsonl_line, read_jsonl
from webrl.inference.rollout_metrics import Tally, add_sums, engine_browser_figures, rollout_rates
from webrl.run_layout import RunLayout


def attempts_path(layout: RunLayout, phase: int, stage: str) -> Path:
    """The record of phase `phase`'s `stage`'s attempts while it is not yet done."""
    return layout.metrics_dir(phase) / f"{stage}.attempts.jsonl"


def tally(layout: RunLayout, phase: int, stage: str) -> Tally:
    """Where the rollouts of phase `phase`'s `stage` give their figures as each episode ends: its attempts record."""
    return partial(append_jsonl_line, attempts_path(layout, phase, stage))


@dataclass(frozen=True)
class Attempt:
    """One launch's run of a stage: its seconds, the metrics it reported (None: killed before its end), and what
    its rollouts tallied: their sums at the last line (None: no episode ended) and every step latency of the lines."""

    seconds: float
    metrics: dict[str, float] | None
    sums: dict[str, float] | None = None
    latencies: tuple[float, ...] = ()

    @property
    def rollout_seconds(self) -> float:
        """Its time rolling out: what its rollout clock measured (a killed attempt's by its last tally line, else
        all its time, its engine's start included), nothing for one that ran no episode."""
        if self.metrics is not None:
            return float(self.metrics.get("rollout/wall_s", 0.0))
        return float(self.sums["wall_s"]) if self.sums is not None else self.seconds


@dataclass
class _Tallied:
    """The tally lines of an attempt not yet closed in the record: its sums at the last, the latencies of all."""

    sums: dict[str, float] | None = None
    latencies: list[float] = field(default_factory=list)

    def add(self, record: dict[str, Any]) -> None:
        self.sums = record["sums"]
        self.latencies.extend(record["latencies"])

    def attempt(self, seconds: float, metrics: dict[str, float] | None) -> Attempt:
        return Attempt(seconds, metrics, self.sums, tuple(self.latencies))


def stage_figures(stage: str, attempts: list[Attempt]) -> dict[str, float]:
    """The metrics of a stage run in `attempts`, in their order (see the module docstring)."""
    metrics: dict[str, float] = {}
    for attempt in attempts:
        metrics.update(attempt.metrics or {})
    # Only then: a lone attempt's figures (or those of a rank that keeps no record) are its run's own as they are.
    if any(attempt.sums is not None for attempt in attempts[:-1]):
        metrics.update(_engine_and_browser(attempts))
    rollout_s = sum(attempt.rollout_seconds for attempt in attempts)
    if "rollout/episodes" in metrics and rollout_s > 0:
        metrics.update(rollout_rates(metrics, rollout_s))
    metrics[f"time/{stage}_s"] = sum(attempt.seconds for attempt in attempts)
    if len(attempts) > 1:
        metrics[f"time/{stage}_attempts"] = float(len(attempts))
    return metrics


def _engine_and_browser(attempts: list[Attempt]) -> dict[str, float]:
    """The engine's and the browser's figures of every attempt that tallied its rollouts, as one run's."""
    sums = add_sums([attempt.sums for attempt in attempts if attempt.sums is not None])
    return engine_browser_figures(sums, [latency for attempt in attempts for latency in attempt.latencies])


class StageAttempt:
    """One more attempt of phase `phase`'s `stage`, recorded in the phase's attempts file when `keep` (rank 0)."""

    def __init__(self, layout: RunLayout, phase: int, stage: str, *, keep: bool) -> None:
        self.phase_dir = layout.phase_dir(phase)
        self.path = attempts_path(layout, phase, stage)
        self.phase, self.stage, self.keep = phase, stage, keep

    def run(self, run_stage: Callable[[int], dict[str, float] | None]) -> dict[str, float]:
        """Run the stage; its metrics over all its attempts (over this one alone where no record is kept)."""
        earlier = self._begin() if self.keep else []
        started = time.perf_counter()
        metrics = run_stage(self.phase) or {}
        seconds = time.perf_counter() - started
        if not self.keep:
            return stage_figures(self.stage, [Attempt(seconds, metrics)])
        this = self._read()[2].attempt(seconds, metrics)
        self._append({"seconds": this.seconds, "metrics": metrics})
        return stage_figures(self.stage, [*earlier, this])

    def _begin(self) -> list[Attempt]:
        """The attempts before this one, a killed one closed first; then this one's start line."""
        now = time.time()
        earlier, open_since, tallied = self._read()
        if open_since is not None:
            killed = tallied.attempt(self._last_output(open_since, now) - open_since, None)
            self._append({"seconds": killed.seconds, "killed": True})
            earlier.append(killed)
        self._append({"started": now})
        return earlier

    def _read(self) -> tuple[list[Attempt], float | None, _Tallied]:
        """The closed attempts; the start of one left open (killed, or this one), if any, and its tally lines."""
        closed: list[Attempt] = []
        open_since: float | None = None
        tallied = _Tallied()
        if self.path.exists():
            for _, record in read_jsonl(self.path)[0]:
                if "started" in record:
                    open_since, tallied = float(record["started"]), _Tallied()
                elif "sums" in record:
                    tallied.add(record)
                else:
                    closed.append(tallied.attempt(float(record["seconds"]), record.get("metrics")))
                    open_since, tallied = None, _Tallied()
        return closed, open_since, tallied

    def _last_output(self, since: float, until: float) -> float:
        """The newest modification time in the phase directory between `since` and `until` (else `since`)."""
        newest = since
        for path in self.phase_dir.rglob("*"):
            with contextlib.suppress(FileNotFoundError):  # a temp file renamed away by another rank meanwhile
                if path != self.path and path.is_file() and since < (modified := path.stat().st_mtime) < until:
                    newest = max(newest, modified)
        return newest

    def _append(self, record: dict[str, Any]) -> None:
        append_jsonl_line(self.path, record)
