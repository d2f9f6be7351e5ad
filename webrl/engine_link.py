"""EngineLink: the rollout engine as the phase loop drives it, between the stages that train.

Two things change an engine between stages. With `engines.sleep` a vLLM engine sleeps through the
stages that load models of their own and wakes for those that generate. And each generating stage
asks it to serve a given actor: by default the engine reloads the actor's saved directory; with
`engines.weight_sync` in memory, the tensors the actor stage just saved are broadcast from rank 0 and
pushed into every engine (a collective, so every rank takes part, with an engine or not). A process
that did not train those weights itself, as after a resume, reloads the directory instead.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from webrl.inference.engine import InferenceEngine, ReloadableEngine
from webrl.inference.weight_sync import broadcast_state
from webrl.loop_config import WebRLConfig


class EngineLink:
    """Keeps `engine` (None on a rank without one) awake when needed and serving the actor each stage asks for."""

    def __init__(self, config: WebRLConfig, engine: InferenceEngine | None) -> None:
        self.config = config
        self.engine = engine
        self.fresh_actor: tuple[Path, dict[str, Any]] | None = None
        """The actor this process just trained, for an in-memory sync: its directory and its weights (rank 0's)."""

    def set_awake(self, awake: bool) -> None:
        """Wake a vLLM engine for a stage that generates, sleep it through one that loads models (`engines.sleep`)."""
        if not self.config.engines.sleep or not hasattr(self.engine, "sleep"):
            return
        if awake:
            self.engine.wake_up()
        else:
            self.engine.sleep()

    def keep_for_sync(self, actor_dir: Path, weights: dict[str, Any]) -> None:
        """Hold the weights just saved at `actor_dir` for the sync stage when they reach the engines in memory."""
        if self.config.engines.syncs_in_memory(self.config.rollout.engine, self.config.fabric):
            self.fresh_actor = (actor_dir, weights)

    def serve(self, actor_dir: Path) -> None:
        """Point the engine at `actor_dir` unless it already serves it (a reload costs seconds)."""
        if self.engine is not None and not isinstance(self.engine, ReloadableEngine):
            raise ValueError(
                f"rollout.engine={self.config.rollout.engine} cannot load new actor weights: use hf or vllm for WebRL "
                "rollouts (an OpenAI-compatible server fits model.generator or evaluation)"
            )
        fresh, self.fresh_actor = self.fresh_actor, None
        if fresh is not None and fresh[0] == actor_dir:
            weights = broadcast_state(fresh[1])
            if self.engine is not None:
                self.engine.push_weights(weights, model_path=actor_dir)
            deque(weights, maxlen=0)  # the tensors no engine here took: the broadcast ends on every rank alike
            return
        if self.engine is not None and Path(self.engine.model_path) != actor_dir:
            self.engine.reload(actor_dir)
