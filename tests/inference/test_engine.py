"""The engine protocol's shared pieces: sampling-parameter validation, stop-string cutting, the factory."""

from __future__ import annotations

import pytest

from webrl.inference.engine import SamplingParams, build_engine, truncate_at_stop


def test_sampling_params_reject_bad_values_naming_the_field() -> None:
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-0.1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams(max_tokens=0)
    with pytest.raises(TypeError, match="stop"):
        SamplingParams(stop="<|eot_id|>")
    with pytest.raises(ValueError, match="stop"):
        SamplingParams(stop=[""])


def test_truncate_at_stop_cuts_at_the_earliest_stop_string() -> None:
    assert truncate_at_stop('do(action="Click")\n\nRound 1', ["Round", "\n\n"]) == ('do(action="Click")', True)
    assert truncate_at_stop("abcabc", ["c"]) == ("ab", True)
    assert truncate_at_stop("no stop here", ["<|eot_id|>"]) == ("no stop here", False)
    assert truncate_at_stop("anything", []) == ("anything", False)


def test_build_engine_rejects_unknown_kinds_and_missing_paths() -> None:
    with pytest.raises(ValueError, match="unknown engine kind 'tgi'"):
        build_engine("tgi", "/some/dir")
    with pytest.raises(ValueError, match="model_path"):
        build_engine("hf")


def test_build_engine_hf_passes_options(tiny_model_dir) -> None:
    engine = build_engine("hf", tiny_model_dir, batch_size=2)
    assert engine.batch_size == 2
    with pytest.raises(TypeError, match="bogus"):
        build_engine("hf", tiny_model_dir, bogus=1)
