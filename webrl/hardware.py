"""Whether this machine's CPU computes bf16 natively, read from /proc/cpuinfo without importing torch.

bf16 only pays on a CPU that multiplies in it: with AVX512-BF16 (or AMX) a SmolLM2 training step of 8 x 512
tokens took 16.5 s in `bf16-mixed`; on an AVX-512 CPU without it, 53 s against 14.5 s in fp32, and vLLM generated
1.6 times slower in bf16 than in fp32 there (docs/experiments.md, "Speed levers measured").
`fabric.precision=auto` and the CPU vLLM engine ask this module which to use. It reads a text file, so that
`--help` and `--dry-run` stay fast.
"""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""x86's AVX512-BF16 and AMX-BF16 flags, and aarch64's BF16 feature (BFDOT/BFMMLA)."""


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The feature flags of the first processor in `cpuinfo` (default: this machine's; none where it is unreadable).

    x86 lists them on a `flags` line, aarch64 on a `Features` line.
    """
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def cpu_computes_bf16(flags: frozenset[str] | None = None) -> bool:
    """True when the CPU (with `flags`, default this machine's) has a bf16 matrix instruction."""
    return bool(NATIVE_BF16_FLAGS & (cpu_flags() if flags is None else flags))


def cpu_engine_dtype(requested: str, native_bf16: bool) -> str:
    """The dtype a CPU vLLM engine loads weights in: `auto` becomes float32 where bf16 is emulated.

    On a CPU without bf16 instructions vLLM's `auto` loaded an fp32 checkpoint and the converted SmolLM2 (no
    dtype in its config) in bf16 alike; an explicit dtype is kept as asked.
    """
    return "float32" if requested == "auto" and not native_bf16 else requested
