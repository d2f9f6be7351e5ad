"""A stage's attempts record (`webrl.stage_attempts`): each attempt counted once, whatever point a crash ended it at.

The stages here are functions that sleep, write and return figures; a killed attempt is a forked child that the
stage function ends with `os._exit`, as `WEBRL_FAULT` ends a run. The whole loop killed and relaunched in a real
stage is tests/test_resumed_stage_figures.py.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.single_process import SingleProcess
from webrl.data.atomic_io import FAULT_EXIT_CODE, read_jsonl, write_json_atomic
from webrl.inference.rollout_metrics import rollout_metrics, rollout_rates
from webrl.phase_record import finish_stage, phase_record
from webrl.run_layout import RunLayout
from webrl.run_state import RunState
from webrl.stage_attempts import Attempt, StageAttempt, stage_figures, tally

EPISODES = {"rollout/episodes": 4.0, "rollout/steps": 12.0}


def _attempt(layout: RunLayout, keep: bool = True) -> StageAttempt:
    return StageAttempt(layout, 1, "rollouts", keep=keep)


def _log(layout: RunLayout) -> list[dict]:
    return [record for _, record in read_jsonl(_attempt(layout).path)[0]]


def _rolled_out(wall_s: float, episodes: float, **process: float):
    """A stage function that takes `wall_s`, and reports that rollout time over `episodes` and `process` figures."""

    def stage(phase: int) -> dict[str, float]:
        time.sleep(wall_s)
        counts = {**EPISODES, "rollout/episodes": episodes, "rollout/steps": 3 * episodes}
        return {**rollout_rates(counts, wall_s), **process, **EPISODES}

    return stage


def _killed(layout: RunLayout, seconds: float, *tallies: dict) -> None:
    """An attempt in a forked child that writes an episode after `seconds`, its rollouts giving `tallies` before it
    (`webrl.inference.rollout_metrics.Tally`), then dies as a kill would."""

    def stage(phase: int) -> dict[str, float]:
        time.sleep(seconds)
        for record in tallies:
            tally(layout, phase, "rollouts")(record)
        episodes = layout.rollouts_path(phase, 0)
        episodes.write_text('{"episode": 1}\n', encoding="utf-8")
        time.sleep(0.2)  # lost work: nothing on disk says it happened
        os._exit(FAULT_EXIT_CODE)

    pid = os.fork()
    if pid == 0:
        try:
            _attempt(layout).run(stage)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == FAULT_EXIT_CODE


def test_an_uninterrupted_stage_reports_its_own_figures_and_its_time(tmp_path):
    layout = RunLayout(tmp_path)
    metrics = _attempt(layout).run(_rolled_out(0.05, 4.0, **{"rollout/engine_calls": 12.0}))
    assert metrics["rollout/wall_s"] == 0.05 and metrics["rollout/episodes_per_min"] == pytest.approx(4800.0)
    assert metrics["rollout/engine_calls"] == 12.0
    assert metrics["time/rollouts_s"] >= 0.05 and "time/rollouts_attempts" not in metrics
    assert [sorted(record) for record in _log(layout)] == [["started"], ["metrics", "seconds"]]


def test_a_killed_attempt_counts_up_to_the_last_file_it_left(tmp_path):
    layout = RunLayout(tmp_path)
    _killed(layout, seconds=0.3)
    metrics = _attempt(layout).run(_rolled_out(0.1, 1.0, **{"rollout/engine_calls": 3.0}))
    killed = _log(layout)[1]
    assert killed["killed"] and 0.3 <= killed["seconds"] < 0.45, "its episode counted, its lost work not"
    assert metrics["time/rollouts_attempts"] == 2.0
    assert metrics["time/rollouts_s"] == pytest.approx(killed["seconds"] + _log(layout)[-1]["seconds"])
    # Every episode on disk (the stage's counts) over both attempts' rollout time.
    assert metrics["rollout/wall_s"] == pytest.approx(killed["seconds"] + 0.1)
    assert metrics["rollout/episodes_per_min"] == pytest.approx(60 * 4.0 / metrics["rollout/wall_s"])
    assert metrics["rollout/steps_per_s"] == pytest.approx(12.0 / metrics["rollout/wall_s"])
    assert metrics["rollout/engine_calls"] == 3.0, "the killed attempt tallied none"


def test_files_from_before_the_attempt_or_from_the_next_one_do_not_stretch_a_killed_one(tmp_path):
    layout = RunLayout(tmp_path)
    write_json_atomic(layout.tasks_path(1), [])  # the stage before's
    _killed(layout, seconds=0.1)
    later = layout.phase_dir(1) / "rollouts.rank1.jsonl"  # another rank's, written as the relaunch starts
    later.write_text("{}\n", encoding="utf-8")
    os.utime(later, (time.time() + 60, time.time() + 60))
    _attempt(layout).run(lambda phase: dict(EPISODES))
    assert 0.1 <= _log(layout)[1]["seconds"] < 0.25


def test_a_stage_redone_after_its_end_was_written_keeps_the_figures_of_the_attempt_that_ran_the_episodes(tmp_path):
    """The end line comes before the metrics file; a crash after it (or after the metrics) redoes the stage, which
    finds every episode on disk and runs none: each attempt counted once, the rollout time the first's alone."""
    layout = RunLayout(tmp_path)
    first = _attempt(layout).run(_rolled_out(0.2, 4.0, **{"rollout/engine_calls": 12.0}))
    again = _attempt(layout).run(lambda phase: dict(EPISODES))
    ends = [record["seconds"] for record in _log(layout) if "seconds" in record]
    assert len(ends) == 2 and again["time/rollouts_s"] == pytest.approx(sum(ends))
    assert again["time/rollouts_attempts"] == 2.0
    for key in ("rollout/wall_s", "rollout/episodes_per_min", "rollout/steps_per_s", "rollout/engine_calls"):
        assert again[key] == pytest.approx(first[key]), key


def test_a_torn_last_line_is_cut_and_the_attempt_it_was_closing_counted_as_killed(tmp_path):
    layout = RunLayout(tmp_path)
    path = _attempt(layout).path
    path.parent.mkdir(parents=True)
    path.write_bytes(json.dumps({"started": time.time() - 5}).encode() + b'\n{"seconds": 4.9, "metr')
    with pytest.warns(UserWarning, match="torn last line"):
        metrics = _attempt(layout).run(lambda phase: dict(EPISODES))
    assert [sorted(record) for record in _log(layout)] == [
        ["started"],
        ["killed", "seconds"],
        ["started"],
        ["metrics", "seconds"],
    ]
    assert metrics["time/rollouts_attempts"] == 2.0 and _log(layout)[1]["seconds"] == 0.0, "no file: no time"


def test_a_whole_last_record_that_lost_its_newline_is_kept(tmp_path):
    layout = RunLayout(tmp_path)
    path = _attempt(layout).path
    path.parent.mkdir(parents=True)
    closed = {"seconds": 2.0, "metrics": {"rollout/wall_s": 1.5, **EPISODES}}
    path.write_text(json.dumps({"started": 1.0}) + "\n" + json.dumps(closed), encoding="utf-8")
    metrics = _attempt(layout).run(lambda phase: dict(EPISODES))
    assert metrics["time/rollouts_s"] >= 2.0 and metrics["rollout/wall_s"] == 1.5
    assert len(_log(layout)) == 4


def test_a_rank_that_keeps_no_record_reports_its_own_attempt(tmp_path):
    layout = RunLayout(tmp_path)
    _killed(layout, seconds=0.05)
    metrics = _attempt(layout, keep=False).run(lambda phase: dict(EPISODES))
    assert "time/rollouts_attempts" not in metrics and len(_log(layout)) == 1


def test_a_stage_without_episodes_gets_no_rates_and_the_attempt_count_stays_out_of_the_phase_time(tmp_path):
    figures = stage_figures("evaluate", [Attempt(3.0, None), Attempt(2.0, {"test/success_rate": 0.5})])
    assert figures == {"test/success_rate": 0.5, "time/evaluate_s": 5.0, "time/evaluate_attempts": 2.0}
    layout = RunLayout(tmp_path)
    _attempt(layout).run(lambda phase: dict(EPISODES))  # an attempts file beside the phase's metrics files
    write_json_atomic(layout.metrics_path(1, "evaluate"), figures)
    record = phase_record(layout, 1)
    assert record == {"phase": 1, **figures}, "the attempts files are not stage metrics"
    assert sum(v for k, v in record.items() if k.startswith("time/") and k.endswith("_s")) == 5.0


def test_the_record_goes_once_the_stage_is_marked_done(tmp_path):
    layout = RunLayout(tmp_path)
    metrics = _attempt(layout).run(lambda phase: dict(EPISODES))
    state = finish_stage(SingleProcess(), RunState(phase=1), layout, 1, "rollouts", metrics)
    assert state.is_done(1, "rollouts") and not _attempt(layout).path.exists()
    assert json.loads(layout.metrics_path(1, "rollouts").read_text(encoding="utf-8")) == metrics


def _sums(wall: float, engine_only: float, browser_only: float, both: float, calls: int, prompts: int, tokens: int):
    """A rollout run's `rollout_sums`: its wall time (idle what its buckets leave), engine calls, prompts, tokens."""
    idle = wall - engine_only - browser_only - both
    buckets = {"engine_only_s": engine_only, "browser_only_s": browser_only, "both_s": both, "idle_s": idle}
    return {"wall_s": wall, **buckets, "engine_calls": calls, "engine_prompts": prompts, "generated_tokens": tokens}


KILLED_TALLIES = (
    {"sums": _sums(4.0, 1.0, 1.0, 1.0, calls=2, prompts=3, tokens=90), "latencies": [1.0, 2.0]},
    {"sums": _sums(10.0, 4.0, 3.0, 2.0, calls=6, prompts=9, tokens=300), "latencies": [6.0]},
)
"""A killed attempt's tally lines after its two episodes: sums so far, and the latencies measured since the last."""


def test_a_killed_attempts_engine_and_browser_figures_count_in_the_resumed_stage(tmp_path):
    """Killed after two episodes (their figures tallied), then resumed: the stage's engine and browser figures are
    the sums of both attempts' and the latencies of every step, not the relaunch's alone."""
    layout = RunLayout(tmp_path)
    _killed(layout, 0.1, *KILLED_TALLIES)
    relaunch = _sums(5.0, 2.0, 1.0, 1.0, calls=2, prompts=3, tokens=100)

    def stage(phase: int) -> dict[str, float]:
        record = tally(layout, phase, "rollouts")
        record({"sums": relaunch, "latencies": [3.0, 4.0]})  # its one episode
        record({"sums": relaunch, "latencies": []})  # its end
        return {**rollout_metrics([], relaunch, [3.0, 4.0]), **EPISODES}

    metrics = _attempt(layout).run(stage)
    # Both: 15 s of rollouts (the killed one's clock at its last episode, 10 s, not its time), 6 s engine only,
    # 4 s browser only, 3 s both, 2 s idle; 8 calls of 12 prompts, 400 tokens; latencies 1 2 6 (killed) 3 4.
    expected = {
        "rollout/wall_s": 15.0,
        "rollout/engine_only_s": 6.0,
        "rollout/browser_only_s": 4.0,
        "rollout/overlap_s": 3.0,
        "rollout/idle_s": 2.0,
        "rollout/engine_busy_s": 9.0,
        "rollout/browser_busy_s": 7.0,
        "rollout/engine_busy_frac": 9.0 / 15.0,
        "rollout/browser_only_frac": 4.0 / 15.0,
        "rollout/engine_calls": 8.0,
        "rollout/mean_batch_size": 12.0 / 8.0,
        "rollout/generated_tokens": 400.0,
        "rollout/gen_tokens_per_s": 400.0 / 9.0,
        "rollout/step_latency_mean_s": 16.0 / 5.0,
        "rollout/step_latency_p50_s": 3.0,  # sorted 1 2 3 4 6: index floor(0.5 * 5) = 2
        "rollout/step_latency_p95_s": 6.0,  # index floor(0.95 * 5) = 4
        "rollout/episodes_per_min": 60.0 * 4.0 / 15.0,  # every episode on disk over both attempts' rollout time
        "rollout/steps_per_s": 12.0 / 15.0,
    }
    assert {key: metrics[key] for key in expected} == pytest.approx(expected)
    assert metrics["time/rollouts_attempts"] == 2.0 and _log(layout)[-1]["metrics"]["rollout/engine_calls"] == 2


def test_a_stage_redone_after_a_kill_that_left_every_episode_keeps_the_killed_attempts_figures(tmp_path):
    """Killed after its last episode and before its end line: the relaunch runs no episode and reports the figures
    the killed attempt tallied, where before it reported no engine or browser figure at all."""
    layout = RunLayout(tmp_path)
    _killed(layout, 0.1, *KILLED_TALLIES)
    metrics = _attempt(layout).run(lambda phase: dict(EPISODES))
    assert metrics["rollout/wall_s"] == 10.0 and metrics["rollout/engine_calls"] == 6
    assert metrics["rollout/gen_tokens_per_s"] == pytest.approx(300.0 / 6.0)
    assert metrics["rollout/mean_batch_size"] == 1.5 and metrics["rollout/step_latency_mean_s"] == 3.0
