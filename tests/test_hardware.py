"""`fabric.precision=auto` and the CPU vLLM engine's dtype follow whether the CPU has bf16 instructions.

The cpuinfo texts are shortened to the lines that matter: the Xeon without BF16 from this project's machine, the
Xeon with AVX512-BF16/AMX and the aarch64 Neoverse V1 written in the same format with their processors' flags.
"""

from __future__ import annotations

import pytest

from recipes.webrl import CONFIG_DIR, recipe_config
from webrl.fabric_config import FabricConfig
from webrl.hardware import cpu_computes_bf16, cpu_engine_dtype, cpu_flags

XEON_WITH_BF16 = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C
flags\t\t: fpu vme sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
flags\t\t: fpu vme sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
XEON_WITHOUT_BF16 = """processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu vme sse2 fma avx2 avx512f avx512dq avx512bw avx512vl avx512_vnni avx512_bitalg
"""
NEOVERSE_V1 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm sve i8mm bf16 dgh rng
CPU implementer\t: 0x41
"""


def test_flags_are_read_from_the_flags_or_features_line():
    assert {"avx512_bf16", "amx_bf16", "avx512f"} <= cpu_flags(XEON_WITH_BF16)
    assert "avx512_bf16" not in cpu_flags(XEON_WITHOUT_BF16)
    assert {"bf16", "sve", "i8mm"} <= cpu_flags(NEOVERSE_V1)
    assert cpu_flags("processor\t: 0\nmodel name\t: something\n") == frozenset()


@pytest.mark.parametrize(
    ("cpuinfo", "native"), [(XEON_WITH_BF16, True), (XEON_WITHOUT_BF16, False), (NEOVERSE_V1, True), ("", False)]
)
def test_bf16_counts_as_native_only_with_a_bf16_instruction(cpuinfo, native):
    assert cpu_computes_bf16(cpu_flags(cpuinfo)) is native


@pytest.mark.parametrize(
    ("accelerator", "cpu_bf16", "expected"),
    [
        ("cpu", True, "bf16-mixed"),
        ("cpu", False, "32-true"),
        ("cuda", False, "bf16-mixed"),
        ("gpu", False, "bf16-mixed"),
        ("auto", True, "32-true"),  # the device is not known before torch loads
        ("mps", True, "32-true"),
    ],
)
def test_auto_precision_is_bf16_mixed_only_where_bf16_is_computed_natively(accelerator, cpu_bf16, expected):
    assert FabricConfig(accelerator=accelerator, precision="auto").concrete_precision(cpu_bf16) == expected


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true", "16-mixed"])
def test_an_explicit_precision_is_kept_on_any_cpu(precision):
    for cpu_bf16 in (True, False):
        assert FabricConfig(precision=precision).concrete_precision(cpu_bf16) == precision


def test_the_loaded_config_holds_this_machines_precision_not_auto():
    """config.json and the SFT/ORM cache keys then name the precision that ran."""
    expected = "bf16-mixed" if cpu_computes_bf16() else "32-true"
    assert recipe_config(["fabric.precision=auto"]).fabric.precision == expected
    assert recipe_config(["--config", str(CONFIG_DIR / "webrl_smollm2.yaml")]).fabric.precision == expected
    assert recipe_config([]).fabric.precision == "32-true"  # the tiny default stays in fp32 everywhere


def test_a_cpu_engine_loads_in_fp32_for_auto_where_bf16_is_emulated():
    assert cpu_engine_dtype("auto", native_bf16=False) == "float32"
    assert cpu_engine_dtype("auto", native_bf16=True) == "auto"
    assert cpu_engine_dtype("bfloat16", native_bf16=False) == "bfloat16"
    assert cpu_engine_dtype("float32", native_bf16=True) == "float32"
