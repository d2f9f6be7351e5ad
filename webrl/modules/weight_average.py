"""One model from several: the element-wise mean of the weights of model directories trained from the same start.

Three batch orders of the same SmolLM2 actor stage solved 25, 25 and 34 of 60 validation tasks; the mean of their
three sets of weights solved 32 (`docs/experiments.md`). Runs that start from the same weights and move little from
them stay close enough for their mean to be a model of its own (a "model soup"): most of what one run wins and the
others lose is noise, which the mean removes. `recipes.average_weights` writes such a mean as an ordinary model
directory that every engine and recipe loads; `webrl.tail_average` does the same within one stage.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from webrl.cache_builds import DONE_MARKER, publish_model_dir, staging_dir

WEIGHT_GLOB = "*.safetensors"


def average_model_dirs(sources: Sequence[Path], target: Path) -> Path:
    """Write to `target` a model directory whose weights are the mean of the `sources`' (each weight in float64,
    stored in the first source's dtype), with the first source's config and tokenizer; returns `target`.

    The sources must hold the same weight files with the same tensors of the same shapes: anything else is a
    ValueError naming the source and the tensor. `target` must not exist; it appears whole or not at all.
    """
    sources = [Path(source) for source in sources]
    if len(sources) < 2:
        raise ValueError(f"averaging needs two model directories or more, got {len(sources)}")
    if target.exists():
        raise FileExistsError(f"{target} exists: give a new directory for the averaged model")
    files = _weight_files(sources[0])
    for source in sources[1:]:
        if (names := _weight_files(source)) != files:
            raise ValueError(f"{source} holds the weight files {names}, {sources[0]} holds {files}")
    tmp = staging_dir(target)
    try:
        for name in files:
            save_file(_mean_of(sources, name), str(tmp / name), metadata={"format": "pt"})
        for path in sources[0].iterdir():
            if path.is_file() and path.suffix != ".safetensors" and path.name != DONE_MARKER:
                shutil.copy2(path, tmp / path.name)
        return publish_model_dir(tmp, target, {"averaged_from": [str(source) for source in sources]})
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _weight_files(source: Path) -> list[str]:
    names = sorted(path.name for path in source.glob(WEIGHT_GLOB))
    if not names:
        raise FileNotFoundError(f"{source} has no {WEIGHT_GLOB} weights: give model directories (with config.json)")
    return names


def _mean_of(sources: list[Path], name: str) -> dict[str, torch.Tensor]:
    """The mean of the weight file `name` over `sources`, tensor by tensor."""
    first = load_file(str(sources[0] / name))
    total = {key: tensor.double() for key, tensor in first.items()}
    for source in sources[1:]:
        other = load_file(str(source / name))
        if other.keys() != first.keys():
            odd = sorted(set(other) ^ set(first))[:3]
            raise ValueError(f"{source / name}: its tensors differ from {sources[0] / name}'s (e.g. {odd})")
        for key, tensor in other.items():
            if tensor.shape != first[key].shape:
                raise ValueError(
                    f"{source / name}: tensor {key} has shape {tuple(tensor.shape)}, {tuple(first[key].shape)} in "
                    f"{sources[0]}"
                )
            total[key] += tensor.double()
    return {key: (value / len(sources)).to(first[key].dtype).contiguous() for key, value in total.items()}
