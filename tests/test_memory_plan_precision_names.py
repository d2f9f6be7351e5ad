"""A precision given by Lightning's short name is planned as the precision Lightning runs for it.

`fabric.precision=bf16` is accepted (`fabric_config.PRECISIONS`) and Lightning runs it as `bf16-mixed`:
fp32 weights, gradients and AdamW moments, bf16 weight copies and fp32 residuals. The plan read it as
`bf16-true` (half the bytes of every stored tensor, no copies), and `16` as full-precision compute
without copies, so both said a layout fits with less memory than its run takes.
"""

from __future__ import annotations

import pytest
from test_memory_plan import HAND

from webrl.memory_plan import GIB, MemoryPlan, count_on_meta


def plan(precision: str) -> MemoryPlan:
    return MemoryPlan(
        counts=count_on_meta(HAND),
        strategy="fsdp",
        ranks=2,
        precision=precision,
        actor_batch=2,
        critic_batch=1,
        seq_len=10,
        action_tokens=3,
        activation_checkpointing=False,
        device_bytes=10 * GIB,
    )


@pytest.mark.parametrize(("alias", "runs_as"), [("bf16", "bf16-mixed"), ("16", "16-mixed"), ("32", "32-true")])
def test_a_short_precision_name_is_planned_as_the_precision_lightning_runs(alias, runs_as):
    for stage in ("actor", "critic"):
        assert plan(alias).stage(stage) == plan(runs_as).stage(stage), stage


def test_64_true_keeps_eight_bytes_a_parameter_and_an_activation():
    double, single = plan("64-true").stage("actor"), plan("32-true").stage("actor")
    assert double["parameters"] == 2 * single["parameters"]
    assert double["activations"] == 2 * single["activations"]
