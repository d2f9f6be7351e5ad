"""Inference engines behind one protocol, weight sync from the trainer, and browser rollouts.

- `SamplingParams`, `Completion`, the `InferenceEngine` protocol, its `ReloadableEngine` refinement
  (hf, vllm) and `build_engine("hf" | "vllm" | "openai", ...)` (from `webrl.inference.engine`).
- `HFEngine`, `VLLMEngine`, `OpenAIEngine`, and `ScriptedEngine` (a policy function as an engine).
- `full_state_dict`: the trained weights, gathered and LoRA-merged; `broadcast_state`: rank 0's on every rank.
- `collect_rollouts` (and `collect_rollouts_sync`): N concurrent episodes, one engine call per step.

Only the protocol is imported here; the other names load on first use, so `import webrl.inference`
loads neither torch nor vLLM.
"""

from webrl.inference.engine import Completion, InferenceEngine, ReloadableEngine, SamplingParams, build_engine
from webrl.lazy_exports import lazy_exports

_EXPORTS = {
    "HFEngine": "webrl.inference.hf",
    "OpenAIEngine": "webrl.inference.openai",
    "VLLMEngine": "webrl.inference.vllm",
    "ScriptedEngine": "webrl.inference.scripted",
    **dict.fromkeys(("broadcast_state", "full_state_dict"), "webrl.inference.weight_sync"),
    **dict.fromkeys(("RolloutResult", "collect_rollouts", "collect_rollouts_sync"), "webrl.inference.rollout"),
}

__all__ = [
    "Completion",
    "HFEngine",
    "InferenceEngine",
    "OpenAIEngine",
    "ReloadableEngine",
    "RolloutResult",
    "SamplingParams",
    "ScriptedEngine",
    "VLLMEngine",
    "broadcast_state",
    "build_engine",
    "collect_rollouts",
    "collect_rollouts_sync",
    "full_state_dict",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
