"""How a run's training processes are laid out (`fabric.*` in the run config), apart from Fabric itself.

The run config is read by `--help`, `--print-config` and `--dry-run` without loading torch or
Lightning, which `webrl.distributed` (the code that builds Fabric from these settings) needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from webrl.config_checks import at_least, one_of, require
from webrl.hardware import cpu_computes_bf16

STRATEGIES = ("auto", "ddp", "fsdp", "model_parallel")
ACCELERATORS = ("cpu", "cuda", "gpu", "mps", "auto")
PRECISIONS = ("auto", "32-true", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true", "32", "bf16", "16", "64")
"""Lightning's precision strings (its short aliases included) that these runs can use, and `auto`."""
PRECISION_ALIASES = {"32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "64": "64-true"}
MODEL_PARALLEL_PRECISIONS = ("auto", "32-true", "32", "bf16-mixed", "bf16", "bf16-true", "16-true")
"""The precisions Lightning's ModelParallelStrategy (FSDP2) takes: it refuses 16-mixed (no sharded gradient scaler)
and 64-true at start, in words that name no config key."""
"""What Lightning runs for each short alias: `bf16` and `16` are mixed precisions (fp32 weights), not `-true`."""


@dataclass
class FabricConfig:
    """How training processes are laid out."""

    strategy: str = "auto"
    """auto | ddp | fsdp (FSDP1, GPU only) | model_parallel (FSDP2 fully_shard; runs on CPU too)"""
    accelerator: str = "cpu"
    """cpu | cuda | gpu | mps | auto"""
    devices: int = 1
    """processes (GPUs) per node"""
    num_nodes: int = 1
    """nodes"""
    precision: str = "32-true"
    """Lightning precision string: 32-true, bf16-mixed, bf16-true, 16-mixed, 16-true, 64-true (or 32, bf16, 16, 64);
    or auto: bf16-mixed on CUDA and on a CPU with bf16 instructions, else 32-true, decided as the config is read
    (config.json keeps the outcome, so a resume on another kind of machine names the change); auto does not ask
    which card it gets, so on one older than Ampere (V100, T4), which emulates bf16, set 16-mixed or 32-true"""
    activation_checkpointing: bool = False
    """recompute each decoder layer in backward instead of keeping its activations (long sequences on GPUs)"""

    def concrete_precision(self, cpu_bf16: bool | None = None) -> str:
        """`precision`, with `auto` decided for this machine (`cpu_bf16`: whether its CPU computes bf16; default: ask).

        bf16 is emulated on a CPU without AVX512-BF16/AMX/BF16, where a SmolLM2 step took 3.7 times as long as in
        fp32 (webrl.hardware). `auto` with accelerator auto or mps stays in fp32: which device Lightning picks
        is not known before torch loads.
        """
        if self.precision != "auto":
            return self.precision
        if self.accelerator in ("cuda", "gpu"):
            return "bf16-mixed"
        if self.accelerator != "cpu":
            return "32-true"
        native = cpu_computes_bf16() if cpu_bf16 is None else cpu_bf16
        return "bf16-mixed" if native else "32-true"

    def validate(self) -> None:
        """Raise ConfigError naming the `fabric.<key>` at fault, its value and what is allowed."""
        one_of("fabric.strategy", self.strategy, STRATEGIES)
        one_of("fabric.accelerator", self.accelerator, ACCELERATORS)
        at_least("fabric.devices", self.devices, 1)
        at_least("fabric.num_nodes", self.num_nodes, 1)
        one_of("fabric.precision", self.precision, PRECISIONS)
        require(
            not (self.strategy == "fsdp" and self.accelerator == "cpu"),
            "fabric.strategy",
            self.strategy,
            "FSDP1 needs GPUs (fabric.accelerator=cuda); on CPU use fabric.strategy=model_parallel (FSDP2)",
        )
        require(
            not (self.precision in ("16-mixed", "16") and self.accelerator == "cpu"),
            "fabric.precision",
            self.precision,
            "fp16 mixed precision needs a GPU (Lightning would run bf16-mixed instead, which config.json and the "
            "cache keys would not say); on CPU use bf16-mixed, 32-true or auto",
        )
        require(
            self.strategy != "model_parallel" or self.precision in MODEL_PARALLEL_PRECISIONS,
            "fabric.precision",
            self.precision,
            f"fabric.strategy=model_parallel (FSDP2) takes one of {', '.join(MODEL_PARALLEL_PRECISIONS)}",
        )
