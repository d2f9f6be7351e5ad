"""A Fabric is never built to run another precision than the config names.

Lightning runs `16-mixed` as `bf16-mixed` on a CPU, with a warning only. `FabricConfig.validate` refuses
`16-mixed` with `accelerator=cpu`, but with `accelerator=auto` on a machine without a GPU Lightning picked
the CPU and switched: config.json and the SFT and ORM cache keys said fp16 while every stage trained in bf16.
"""

from __future__ import annotations

import pytest
import torch

from webrl.config import ConfigError
from webrl.distributed import build_fabric
from webrl.fabric_config import FabricConfig

no_gpu = pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(), reason="accelerator auto picks the CPU only here"
)


@no_gpu
@pytest.mark.parametrize("precision", ["16-mixed", "16"])
def test_fp16_mixed_with_accelerator_auto_on_a_cpu_only_machine_is_refused_naming_the_key(precision):
    with pytest.raises(ConfigError, match=r"fabric\.precision.*Lightning would run bf16-mixed instead"):
        build_fabric(FabricConfig(accelerator="auto", precision=precision))


@no_gpu
@pytest.mark.parametrize(
    ("precision", "runs"), [("32-true", "32-true"), ("bf16", "bf16-mixed"), ("bf16-true", "bf16-true")]
)
def test_a_precision_the_cpu_runs_builds_as_named(precision, runs):
    fabric = build_fabric(FabricConfig(accelerator="auto", precision=precision))
    assert fabric.device.type == "cpu" and fabric.strategy.precision.precision == runs
