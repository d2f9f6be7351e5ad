"""Averaged model directories hold the element-wise mean of their sources' weights, load as a model, and refuse
sources that do not match, naming the culprit."""

from __future__ import annotations

import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from recipes import average_weights
from webrl.cache_builds import is_built
from webrl.modules.lm import load_model_and_tokenizer
from webrl.modules.weight_average import average_model_dirs


def _shifted_copy(tiny_dir, target, shift: float):
    """A copy of the tiny model whose every floating weight is moved by `shift`."""
    shutil.copytree(tiny_dir, target)
    weights = load_file(str(target / "model.safetensors"))
    save_file(
        {k: v + shift if v.is_floating_point() else v for k, v in weights.items()}, str(target / "model.safetensors")
    )
    return target


def test_the_average_is_the_mean_of_each_weight_and_loads_as_a_model(tiny_dir, tmp_path):
    sources = [_shifted_copy(tiny_dir, tmp_path / f"m{i}", shift) for i, shift in enumerate((0.0, 0.25, 1.25))]
    target = average_model_dirs(sources, tmp_path / "mean")
    base, mean = load_file(str(tiny_dir / "model.safetensors")), load_file(str(target / "model.safetensors"))
    assert mean.keys() == base.keys()
    for key, tensor in base.items():
        assert mean[key].dtype == tensor.dtype
        assert torch.allclose(mean[key], tensor + 0.5, atol=1e-6), key  # (0 + 0.25 + 1.25) / 3
    assert is_built(target) and (target / "tokenizer.json").read_bytes() == (tiny_dir / "tokenizer.json").read_bytes()
    model, _ = load_model_and_tokenizer(target)
    assert model(torch.tensor([[1, 2, 3]])).logits.isfinite().all()


def test_sources_that_do_not_match_are_refused_by_name_and_leave_nothing(tiny_dir, tmp_path):
    good = _shifted_copy(tiny_dir, tmp_path / "good", 0.0)
    odd = _shifted_copy(tiny_dir, tmp_path / "odd", 0.0)
    weights = load_file(str(odd / "model.safetensors"))
    name = next(iter(weights))
    save_file({**weights, name: torch.zeros(3)}, str(odd / "model.safetensors"))
    with pytest.raises(ValueError, match=rf"{odd}/model.safetensors: tensor {name} has shape \(3,\)"):
        average_model_dirs([good, odd], tmp_path / "mean")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["good", "odd"], "no half-written directory left"
    with pytest.raises(ValueError, match="two model directories or more"):
        average_model_dirs([good], tmp_path / "mean")
    with pytest.raises(FileExistsError, match="exists"):
        average_model_dirs([good, good], odd)
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path} has no \*.safetensors"):
        average_model_dirs([good, tmp_path], tmp_path / "mean")


def test_the_command_writes_the_average_and_names_an_error_in_one_line(tiny_dir, tmp_path, capsys):
    sources = [str(_shifted_copy(tiny_dir, tmp_path / f"m{i}", 0.5 * i)) for i in range(2)]
    assert average_weights.main([str(tmp_path / "mean"), *sources]) == 0
    assert f"averaged 2 models into {tmp_path / 'mean'}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"^average_weights: .* exists"):
        average_weights.main([str(tmp_path / "mean"), *sources])
