"""Progress of long stages: a tqdm bar on a terminal, a plain line every `interval` seconds elsewhere."""

from __future__ import annotations

import io
import sys

import pytest
import torch
from lightning.fabric import Fabric
from tqdm.auto import tqdm

from webrl.data.replay import score_samples
from webrl.data.steps import StepSample
from webrl.progress import ProgressLog, progress_bar
from webrl.stage_settings import StageSettings
from webrl.training import setup_for_training, train_module


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Clock:
    """A settable time source."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_a_line_every_interval_and_one_at_the_end():
    stream, clock = io.StringIO(), Clock()
    log = ProgressLog(total=10, desc="rollouts", unit="ep", stream=stream, interval=30.0, clock=clock)
    for now in (10.0, 31.0, 45.0, 62.0):  # lines at 31 s and 62 s: 30 s after the start, then after the last line
        clock.now = now
        log.update(2)
        log.set_postfix(success="1/2")
    clock.now = 70.0
    log.close()
    log.close()  # closing twice writes nothing more
    assert stream.getvalue().splitlines() == [
        "rollouts: 4/10 ep (40%) in 31s, success=1/2",
        "rollouts: 8/10 ep (80%) in 62s, success=1/2",
        "rollouts: done 8/10 ep (80%) in 70s, success=1/2",
    ]


def test_an_iterable_without_a_total_counts_and_a_stage_with_nothing_done_says_nothing():
    stream = io.StringIO()
    assert list(ProgressLog(iter("abc"), desc="labelling", stream=stream)) == ["a", "b", "c"]
    assert stream.getvalue() == "labelling: done 3 it in 0s\n"
    empty = io.StringIO()
    assert list(ProgressLog([], desc="labelling", stream=empty)) == []
    assert empty.getvalue() == ""


def test_on_a_terminal_a_tqdm_bar(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "stdout", Terminal())
    stream = Terminal()
    bar = progress_bar(range(3), desc="ORM scoring", unit="batch", stream=stream)
    assert isinstance(bar, tqdm) and list(bar) == [0, 1, 2]
    drawn = stream.getvalue()
    # Frames drawn in place (carriage returns), the bar wiped at the end (leave=False), no log line.
    assert drawn.startswith("\rORM scoring:   0%") and "0/3 [" in drawn and drawn.endswith("\r") and "done" not in drawn


@pytest.mark.parametrize("stdout_is_terminal", [False, True])
def test_a_redirected_stream_or_stdout_gets_lines_not_a_bar(monkeypatch: pytest.MonkeyPatch, stdout_is_terminal: bool):
    monkeypatch.setattr(sys, "stdout", Terminal() if stdout_is_terminal else io.StringIO())
    stream = io.StringIO() if stdout_is_terminal else Terminal()
    assert list(progress_bar(range(2), desc="replay scoring", unit="batch", stream=stream, interval=0.0)) == [0, 1]
    assert "\r" not in stream.getvalue()
    assert stream.getvalue().splitlines()[-1].startswith("replay scoring: done 2/2 batch (100%) in ")


@pytest.mark.parametrize("terminal", [False, True])
def test_a_disabled_bar_writes_nothing(monkeypatch: pytest.MonkeyPatch, terminal: bool):
    monkeypatch.setattr(sys, "stdout", Terminal() if terminal else io.StringIO())
    stream = Terminal() if terminal else io.StringIO()
    bar = progress_bar(total=2, desc="training", enabled=False, stream=stream)
    bar.update(2)
    bar.set_postfix(loss="0.5")
    bar.close()
    assert stream.getvalue() == ""


def test_replay_scoring_reports_its_progress_in_a_log(capsys: pytest.CaptureFixture[str]):
    samples = [
        StepSample(
            task_id="t",
            intent="open the forum",
            trajectory_id="t-0",
            phase=0,
            step_index=i,
            num_steps=3,
            prompt=f"state {i}",
            next_prompt=f"state {i + 1}",
            action="do()",
            history=[],
            html="",
            next_html="",
            reward=0.0,
            mc_return=0.0,
            done=i == 2,
            trajectory_reward=0.0,
        )
        for i in range(3)
    ]
    scores = score_samples(samples, lambda prompts, actions: [0.5] * len(prompts), batch_size=2)
    assert scores == [0.5, 0.5, 0.5]
    assert capsys.readouterr().err.splitlines()[-1].startswith("replay scoring: done 2/2 batch (100%) in ")


class Quadratic(torch.nn.Module):
    """loss = (w - 1)^2 from w = 0; SGD at lr 0.25 halves the distance to 1 each step: losses 1, 0.25, 0.0625."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss = (self.w - batch["target"]) ** 2
        return loss, {"probe/loss": loss.detach()}

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.25)


def test_training_steps_report_their_progress_and_last_loss_in_a_log(capsys: pytest.CaptureFixture[str]):
    fabric = Fabric(accelerator="cpu", devices=1)
    module, optimizer = setup_for_training(fabric, Quadratic())
    batches = [{"target": torch.tensor(1.0)}] * 3
    summary = train_module(fabric, module, optimizer, batches, StageSettings(grad_clip=0.0), name="probe")
    assert summary["probe/loss"] == pytest.approx((1.0 + 0.25 + 0.0625) / 3)
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("probe: done 3/3 batch (100%) in ") and last.endswith(", loss=0.0625")
