"""The starting models' cache keys: a setting that changes the trained weights must change the directory."""

from __future__ import annotations

from pathlib import Path

from webrl.loop_config import WebRLConfig
from webrl.starting_models import sft_dir


def _sft_dir(**changes) -> Path:
    config = WebRLConfig()
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        setattr(getattr(config, section), key, value)
    return sft_dir(config, Path("/models/base"), Path("demos-abc.jsonl"))


def test_sft_cache_is_stable_for_equal_settings():
    assert _sft_dir() == _sft_dir()


def test_precision_and_batching_change_the_sft_cache_dir():
    plain = _sft_dir()
    assert _sft_dir(fabric__precision="bf16-mixed") != plain
    assert _sft_dir(model__max_length=512) != plain
    grouped = WebRLConfig()
    grouped.sft.train.group_by_length = True
    assert sft_dir(grouped, Path("/models/base"), Path("demos-abc.jsonl")) != plain
