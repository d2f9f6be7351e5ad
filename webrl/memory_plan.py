"""Per-GPU memory of the training stages and the colocated vLLM engine, computed from a model's shape.

The 8B config cannot be started here (no GPUs), but whether it fits 8 x 80 GB is arithmetic: the
model is built on the meta device (shapes, no weights, no download) to count its parameters, and
each rank's bytes follow from the sharding, the precision, the optimizer and the micro-batch.
`bench/memory_plan.py` prints the table for a config; what each row assumes:

- parameters, gradients, AdamW's two moments: the master dtype (fp32 under `32-true`, `bf16-mixed`,
  `16-mixed`; bf16 or fp16 under the `-true` low precisions; a short alias as Lightning reads it, so
  `bf16` is `bf16-mixed`), FULL_SHARD over every rank of every node under `fsdp`/`model_parallel`,
  whole on each rank otherwise;
- the actor stage also holds pi_ref, a frozen copy of the policy sharded like it (`ActorModule`'s
  registered reference); the critic stage holds neither pi_ref nor an LM head (its trunk and two MLP heads);
- LoRA (`actor.lora`, `critic.lora`): peft's adapters, counted on the meta model (r x (in + out) per targeted
  Linear), are stored, trained and given AdamW moments in the master dtype beside the frozen base weights, which
  have no gradient and no moments but are stored (sharded under FSDP) and gathered as before; only the adapters
  (and the critic's heads) have unsharded gradients. The actor holds no pi_ref: under LoRA the reference is the
  same network with its adapters disabled. Weight casts add the adapters' bf16 copies; the activations leave out
  what the adapters save for backward (per adapted Linear and token: r elements, and a compute-dtype copy of its
  input where that input is fp32), which nothing has measured;
- gathered units (sharded strategies, a single rank too: FSDP2 gathers into buffers of its own): no
  MixedPrecisionPolicy is set, so a unit's parameters are gathered in the master dtype and autocast casts
  them per operation; the root unit (embeddings, final norm, LM head) stays gathered from forward to
  backward while one decoder layer is in use; over several ranks a unit's unsharded gradient also exists
  until its reduce-scatter;
- weight casts (mixed precision): autograd keeps the bf16 copy of each weight a matmul used until its
  backward: every decoder layer's and the LM head's, or one layer's and the head's with activation
  checkpointing. They are copies of gathered weights, so sharding does not divide them;
- activations, per token and decoder layer, the tensors a Llama layer saves for backward with an SDPA
  (flash or memory-efficient) kernel, so no T x T scores: 10 h + 2 kv + 4 i elements of the compute
  dtype (q, k, v, the attention output, the inputs of the projections; the MLP's gate, up, SiLU and
  product), plus, under autocast, 18 h bytes of the residual stream and the RMSNorms, which stay fp32.
  With activation checkpointing only each layer's input (h) is kept, plus one layer's full set while it
  is recomputed. One layer's backward holds 8 i bytes per token of gradient buffers. The actor's logits
  are formed only over the action span (`action_token_logprobs`): bf16 logits, their fp32 copy and fp32
  log-softmax;
- the optimizer step: AdamW (foreach) holds one temporary the size of the local shard; the step's peak
  (gradients and that temporary) counts only where it exceeds the forward/backward's;
- a fixed reserve per process for the CUDA context, NCCL buffers and allocator fragmentation;
- vLLM colocated on the same GPU: `gpu_memory_utilization` of the device while it rolls out (its own
  per-instance budget: weights, KV cache, activations); while the actor and critic train it either
  sleeps (level 1: weights to host memory, KV cache released), keeping a residual, or keeps its budget.

The fp32 residual bytes, the backward buffers and the gathered copy on a single rank were measured, not
derived: `bench/gpu_memory_check.py` trains SmolLM2-135M and Llama-3.1-8B cut to 2 and 4 layers on one
H200 and compares `torch.cuda.max_memory_allocated` with this plan (within 2.4 %; README gives the table).
Nothing here was measured over several GPUs or nodes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from webrl.fabric_config import PRECISION_ALIASES

GIB = 2**30
RUNTIME_RESERVE = 3 * GIB
"""Per process: CUDA context (~0.5 GiB), NCCL buffers and allocator fragmentation (an assumption)."""
VLLM_ASLEEP = 2 * GIB
"""What a level-1 sleeping vLLM keeps on the GPU (CUDA graphs, its allocator's pool; an assumption)."""
ACTIVATION_UNITS = {"hidden": 10, "kv": 2, "intermediate": 4}
"""Saved elements per token and decoder layer, by dimension (see the module docstring)."""
FP32_RESIDUAL_BYTES = 18
"""Under autocast, per token, decoder layer and hidden unit: the fp32 residual stream and RMSNorms (measured)."""
BACKWARD_BUFFER_BYTES = 8
"""Per token and MLP unit: one layer's gradient buffers during its backward (measured)."""
MIXED_PRECISIONS = ("bf16-mixed", "16-mixed")
LOGIT_BYTES = 2 + 4 + 4
"""Per action position and vocabulary entry: bf16 logits, their fp32 copy, the fp32 log-softmax."""
MASTER_BYTES = {"32-true": 4, "bf16-mixed": 4, "16-mixed": 4, "bf16-true": 2, "16-true": 2, "64-true": 8}
"""Bytes of a stored parameter (and of its gradient and each AdamW moment) under each precision."""
COMPUTE_BYTES = {"32-true": 4, "64-true": 8}
"""Bytes of an activation under the precisions that compute in full width; the others compute in 2."""
SHARDED_STRATEGIES = ("fsdp", "model_parallel")

PUBLISHED_SHAPES: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-8B": {
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
    },
    "HuggingFaceTB/SmolLM2-135M-Instruct": {
        "vocab_size": 49152,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "max_position_embeddings": 8192,
        "rope_theta": 100000.0,
        "tie_word_embeddings": True,
    },
}
"""The shapes of the models the configs name, from their published config.json, for when no copy is local."""
ALIASES = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "llama-3.1-8b": "meta-llama/Llama-3.1-8B"}


@dataclass
class ModelCounts:
    """A causal LM's parameter counts and the dimensions the activation estimate needs."""

    params: int
    """all parameters"""
    layer_params: int
    """one decoder layer (every layer has the same shape)"""
    root_params: int
    """outside the decoder layers: embeddings, final norm, LM head (FSDP's root unit)"""
    head_params: int
    """the LM head alone (0 when tied to the embeddings): the critic has none"""
    layers: int
    """decoder layers"""
    hidden: int
    """hidden size h"""
    intermediate: int
    """MLP width i"""
    kv_dim: int
    """key (and value) width per token: KV heads x head dim"""
    vocab: int
    """vocabulary size"""


def model_config(name: str, *, tiny: Any = None) -> Any:
    """A transformers config for `name`: `tiny` (from a `ModelConfig`), a local model dir, or a published name.

    A published name is looked up in the local Hugging Face cache only; without a copy its shape comes
    from `PUBLISHED_SHAPES`, so nothing is ever downloaded.
    """
    from transformers import AutoConfig, LlamaConfig

    if name == "tiny":
        from webrl.modules.model_factory import TINY_HEAD_DIM

        heads = tiny.tiny_hidden_size // TINY_HEAD_DIM
        return LlamaConfig(
            vocab_size=tiny.tiny_vocab_size,
            hidden_size=tiny.tiny_hidden_size,
            intermediate_size=4 * tiny.tiny_hidden_size,
            num_hidden_layers=tiny.tiny_layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            head_dim=TINY_HEAD_DIM,
            tie_word_embeddings=True,
        )
    if (Path(name) / "config.json").is_file():
        return AutoConfig.from_pretrained(name)
    name = ALIASES.get(name, name)
    try:
        return AutoConfig.from_pretrained(name, local_files_only=True)
    except OSError:
        if name not in PUBLISHED_SHAPES:
            known = list(PUBLISHED_SHAPES)
            raise ValueError(f"no local copy of {name!r} and no published shape; known: {known}") from None
        return LlamaConfig(**PUBLISHED_SHAPES[name])


def count_on_meta(config: Any) -> ModelCounts:
    """Build the causal LM of `config` on the meta device (no memory, no weights) and count its parameters."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = model.model.layers
    layer_params = sum(p.numel() for p in layers[0].parameters())
    params = sum(p.numel() for p in model.parameters())  # tied weights are one parameter here
    head = model.get_output_embeddings()
    tied = head.weight is model.get_input_embeddings().weight
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return ModelCounts(
        params=params,
        layer_params=layer_params,
        root_params=params - len(layers) * layer_params,
        head_params=0 if tied else head.weight.numel(),
        layers=len(layers),
        hidden=config.hidden_size,
        intermediate=config.intermediate_size,
        kv_dim=config.num_key_value_heads * head_dim,
        vocab=config.vocab_size,
    )


@dataclass
class AdapterCounts:
    """The LoRA adapters' parameter counts, split as `ModelCounts` splits the base model's."""

    layer_params: int
    """one decoder layer's adapters"""
    root_params: int
    """adapters outside the decoder layers (an LM head's or embeddings', when targeted)"""
    head_params: int
    """the LM head's adapter alone: the critic drops it with the head"""


def count_adapters(config: Any, lora: Any) -> AdapterCounts | None:
    """Apply `lora` (`LoraSettings`, None: full fine-tuning) to the meta model of `config` and count its adapters.

    The training stages' own `apply_lora` (peft) places them, so the plan matches the layers a stage adapts and
    whatever peft adds to each; on the meta device that costs no memory.
    """
    if lora is None:
        return None
    import torch
    from transformers import AutoModelForCausalLM

    from webrl.modules.lm import apply_lora

    with torch.device("meta"):
        model = apply_lora(AutoModelForCausalLM.from_config(config), lora)
    base = model.get_base_model()

    def trainable(module: Any) -> int:
        return sum(p.numel() for p in module.parameters() if p.requires_grad)

    layers = base.model.layers
    layer_params = trainable(layers[0])
    return AdapterCounts(
        layer_params=layer_params,
        root_params=trainable(base) - len(layers) * layer_params,
        head_params=trainable(base.get_output_embeddings()),
    )


@dataclass
class StageWeights:
    """A stage's parameter counts as its rows use them: what is stored, what trains, what one FSDP unit gathers."""

    stored: int
    """every parameter the stage holds, frozen ones included"""
    trained: int
    """the parameters that have gradients and AdamW moments"""
    layer: int
    """one decoder layer's stored parameters (their weight casts)"""
    unit: int
    """the root unit and one decoder layer, gathered together"""
    unit_trained: int
    """their trained part: the unsharded gradients"""
    head: int
    """the LM head's weight cast (the actor's; the critic has none)"""


@dataclass
class MemoryPlan:
    """Per-rank bytes of one training stage and of the vLLM engine beside it, against the device's memory."""

    counts: ModelCounts
    """the model's parameter counts and dimensions"""
    strategy: str
    """fabric.strategy: fsdp and model_parallel shard over `ranks`, the others keep whole copies"""
    ranks: int
    """devices per node x nodes"""
    precision: str
    """fabric.precision: the master dtype of parameters, gradients and moments, and the compute dtype"""
    actor_batch: int
    """actor.train.batch_size: sequences per micro-step"""
    critic_batch: int
    """critic.train.batch_size"""
    seq_len: int
    """model.max_length: the longest prompt plus action a micro-batch holds"""
    action_tokens: int
    """positions whose logits the actor forms: rollout.max_tokens + EOS"""
    activation_checkpointing: bool
    """fabric.activation_checkpointing"""
    device_bytes: int
    """one device's memory"""
    vllm_utilization: float = 0.0
    """the colocated engine's gpu_memory_utilization (0: no engine on this GPU)"""
    vllm_sleeps: bool = True
    """engines.sleep: the engine sleeps while the stages train"""
    actor_adapters: AdapterCounts | None = None
    """the actor's LoRA adapters (`count_adapters`); None: every weight trains"""
    critic_adapters: AdapterCounts | None = None
    """the critic's LoRA adapters; None: every weight trains"""

    def weights(self, name: str) -> StageWeights:
        """The `actor` or `critic` stage's parameters: under LoRA the base is frozen and only adapters train."""
        counts, actor = self.counts, name == "actor"
        value_heads = 2 * (2 * (counts.hidden**2 + counts.hidden) + 2 * counts.hidden + 2)  # h->h->h->2, twice
        root = counts.root_params if actor else counts.root_params - counts.head_params + value_heads
        head = (counts.head_params or counts.vocab * counts.hidden) if actor else 0
        adapters = self.actor_adapters if actor else self.critic_adapters
        layer = counts.layer_params
        if adapters is None:
            stored = counts.layers * layer + root
            return StageWeights(stored, stored, layer, root + layer, root + layer, head)
        head_adapter = adapters.head_params if actor else 0
        root_adapters = adapters.root_params - adapters.head_params + head_adapter
        root_trained = root_adapters + (0 if actor else value_heads)
        layer += adapters.layer_params
        root += root_adapters
        return StageWeights(
            stored=counts.layers * layer + root,
            trained=counts.layers * adapters.layer_params + root_trained,
            layer=layer,
            unit=root + layer,
            unit_trained=root_trained + adapters.layer_params,
            head=head + head_adapter,
        )

    def stage(self, name: str) -> dict[str, int]:
        """Bytes per rank of the `actor` or `critic` stage's training, component by component."""
        counts, actor = self.counts, name == "actor"
        weights = self.weights(name)
        stored, trained = weights.stored, weights.trained
        batch = self.actor_batch if actor else self.critic_batch
        sharded = self.strategy in SHARDED_STRATEGIES
        shards = self.ranks if sharded else 1
        # Lightning runs `bf16` as bf16-mixed (fp32 weights, bf16 casts) and `16` as 16-mixed, never as `-true`.
        precision = PRECISION_ALIASES.get(self.precision, self.precision)
        master = MASTER_BYTES.get(precision, 4)
        compute = COMPUTE_BYTES.get(precision, 2)
        mixed = precision in MIXED_PRECISIONS
        per_token_layer = (
            ACTIVATION_UNITS["hidden"] * counts.hidden
            + ACTIVATION_UNITS["kv"] * counts.kv_dim
            + ACTIVATION_UNITS["intermediate"] * counts.intermediate
        ) * compute + (FP32_RESIDUAL_BYTES * counts.hidden if mixed else 0)
        tokens = batch * self.seq_len
        if self.activation_checkpointing:
            activations = counts.layers * tokens * counts.hidden * compute + tokens * per_token_layer
        else:
            activations = counts.layers * tokens * per_token_layer
        unsharded_gradients = weights.unit_trained if shards > 1 else 0
        gathered = (weights.unit + unsharded_gradients) * master if sharded else 0
        cast_layers = 1 if self.activation_checkpointing else counts.layers
        casts = 2 * (cast_layers * weights.layer + weights.head) if mixed else 0
        logits = batch * self.action_tokens * counts.vocab * LOGIT_BYTES if actor else 0
        backward_buffers = tokens * counts.intermediate * BACKWARD_BUFFER_BYTES
        step_temporary = trained * master // shards
        return {
            "parameters": stored * master // shards,
            "gradients": trained * master // shards,
            "optimizer": 2 * trained * master // shards,
            "reference": stored * master // shards if actor and self.actor_adapters is None else 0,
            "gathered_units": gathered,
            "weight_casts": casts,
            "activations": activations,
            "backward_buffers": backward_buffers,
            "logits": logits,
            "optimizer_step": max(0, step_temporary - (casts + activations + backward_buffers + logits)),
            "runtime_reserve": RUNTIME_RESERVE,
            "vllm": self.vllm_while_training,
        }

    @property
    def vllm_while_training(self) -> int:
        if not self.vllm_utilization:
            return 0
        return VLLM_ASLEEP if self.vllm_sleeps else int(self.vllm_utilization * self.device_bytes)

    @property
    def rollout_peak(self) -> int:
        """During rollouts the stages' models are freed: the engine's budget and the reserve."""
        return int(self.vllm_utilization * self.device_bytes) + RUNTIME_RESERVE

    def report(self) -> dict[str, Any]:
        """Inputs, each stage's components and peak, the rollout peak, and whether every peak fits the device."""
        stages = {name: self.stage(name) for name in ("actor", "critic")}
        peaks = {name: sum(rows.values()) for name, rows in stages.items()} | {"rollout": self.rollout_peak}
        inputs = {key: value for key, value in asdict(self).items() if key != "counts"}
        return {
            "inputs": inputs,
            "model": asdict(self.counts),
            "stages": stages,
            "peaks": peaks,
            "fits": max(peaks.values()) <= self.device_bytes,
        }

    def table(self) -> str:
        """The report as a fixed-width GiB table."""
        report = self.report()
        stages = report["stages"]
        lines = [f"{'per rank (GiB)':<18}{'actor':>10}{'critic':>10}"]
        for row in stages["actor"]:
            lines.append(f"{row:<18}{stages['actor'][row] / GIB:>10.2f}{stages['critic'][row] / GIB:>10.2f}")
        peaks = report["peaks"]
        lines.append(f"{'training peak':<18}{peaks['actor'] / GIB:>10.2f}{peaks['critic'] / GIB:>10.2f}")
        lines.append(f"{'rollout peak':<18}{peaks['rollout'] / GIB:>10.2f}")
        verdict = "fits" if report["fits"] else "DOES NOT FIT"
        lines.append(f"device {self.device_bytes / GIB:.1f} GiB: {verdict}")
        return "\n".join(lines)
