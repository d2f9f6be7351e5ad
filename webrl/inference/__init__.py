"""Inference engines behind one protocol, weight sync from the trainer, and browser rollouts.

- `webrl.inference.engine`: `SamplingParams`, `Completion`, the `InferenceEngine` protocol, its
  `ReloadableEngine` refinement (hf, vllm) and `build_engine("hf" | "vllm" | "openai", ...)`.
- `webrl.inference.hf.HFEngine`, `webrl.inference.vllm.VLLMEngine`, `webrl.inference.openai.OpenAIEngine`.
- `webrl.inference.weight_sync.full_state_dict`: the trained weights, gathered and LoRA-merged.
- `webrl.inference.rollout.collect_rollouts`: N concurrent episodes, one engine call per step.

Only the protocol is imported here, so `import webrl.inference` loads neither torch nor vLLM.
"""

from webrl.inference.engine import Completion, InferenceEngine, ReloadableEngine, SamplingParams, build_engine

__all__ = ["Completion", "InferenceEngine", "ReloadableEngine", "SamplingParams", "build_engine"]
