"""The websites side of a run: task suites, the sites server, and resumable rollouts in Chromium.

`WebEnvironment` is what the phase loop talks to: it starts the embedded sites (or points at a
user's WebArena deployment through `env.url_map`), loads the train and test suites, and runs
episodes of an engine on a list of tasks. `run_episodes` is the one episode driver: rollouts,
evaluation, ORM data and the reference solver's demonstrations (a `ScriptedEngine`) all go through
it, so they share the observation budget, the episode limits, the browser and the actor's prompt.
It appends each finished trajectory to a JSONL file as it ends; a rerun after a crash reads that
file back, skips the tasks already there and runs only the rest, so no trajectory is lost or
duplicated.
"""

from __future__ import annotations

import asyncio
import json
import random
from functools import partial
from pathlib import Path
from typing import Any

from webrl.data.prompts import actor_prompt_for_step, uses_chat_template
from webrl.data.trajectory import Task, Trajectory, read_trajectories
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.limits import EpisodeLimits
from webrl.env.login import StorageStates
from webrl.env.observation import ObservationConfig
from webrl.env.screenshots import ScreenshotRecorder
from webrl.env.tasks import load_tasks, normalise_url_map, substitute
from webrl.inference.engine import InferenceEngine, SamplingParams
from webrl.inference.rollout import PromptBuilder, RolloutResult, collect_rollouts
from webrl.inference.rollout_metrics import Tally
from webrl.inference.scripted import ScriptedEngine
from webrl.loop_config import WebRLConfig


class WebEnvironment:
    """Sites, suites and rollouts for one run; use as a context manager (it owns the sites server)."""

    def __init__(self, config: WebRLConfig) -> None:
        self.config = config
        self._sites: Any = None
        # `__SHOPPING__` keys, as the task loader reads them: `portable` must put a site's URL back as a placeholder,
        # never as the bare word `SHOPPING` a config may key it by, which `resolve` would replace inside other words.
        self.url_map: dict[str, str] = normalise_url_map(config.env.url_map)
        self.backend: Any = None

    def __enter__(self) -> WebEnvironment:
        from webrl.env.judge import build_judge  # imports openai (half a second), which --help never needs

        env = self.config.env
        judge = build_judge(env.judge_url, env.judge_model, env.judge_api_key_env)
        if env.suite == "embedded":
            from webrl.env.sites.embedded import EmbeddedSites

            self._sites = EmbeddedSites().start()
            self.url_map = normalise_url_map(self._sites.url_map)
            self.backend = self._sites.backend(judge)
        else:
            from webrl.env.backend import WebArenaBackend

            states = StorageStates(env.storage_state_dir) if env.storage_state_dir else None
            self.backend = WebArenaBackend(self.url_map, judge, states)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sites is not None:
            self._sites.stop()
            self._sites = None

    def suite(self, split: str, limit: int, seed: int) -> list[Task]:
        """Tasks of `split` (all, or a seeded sample of `limit`), with placeholders resolved."""
        if self.config.env.suite == "embedded":
            from webrl.env.splits import load_split

            tasks = load_split(split, self.url_map)
        else:
            tasks = load_tasks(Path(self.config.env.suite) / f"{split}", self.url_map, self.config.env.strict_tasks)
        if limit and limit < len(tasks):
            tasks = sorted(random.Random(seed).sample(tasks, limit), key=lambda t: t.task_id)
        return tasks

    def portable(self, tasks: list[Task]) -> list[dict[str, Any]]:
        """`tasks` as records that outlive this launch: this launch's site URLs put back to their placeholders.

        The embedded sites server takes a free port at each launch, so a resumed run's sites are at
        another address; a phase's tasks stored with the old one would send every episode of the
        resume to a closed port. `resolve` points stored tasks at this launch's sites.
        """
        by_length = sorted(self.url_map.items(), key=lambda item: -len(item[1]))
        records = []
        for task in tasks:
            text = json.dumps(task.to_dict())
            for placeholder, url in by_length:
                text = text.replace(url, placeholder)
            records.append(json.loads(text))
        return records

    def resolve(self, tasks: list[Task]) -> list[Task]:
        """Stored tasks (`portable`'s records) with their placeholders resolved to this launch's sites."""
        return [Task.from_dict(json.loads(substitute(json.dumps(task.to_dict()), self.url_map))) for task in tasks]

    def held_out_tasks(self) -> list[Task]:
        """The tasks training must not see: the evaluation split's, and with the embedded sites every split
        outside training (the test split, and validation when training on `train_fit`)."""
        env = self.config.env
        splits = {env.test_split}
        if env.suite == "embedded":
            from webrl.env.splits import TRAIN_FIT, VALIDATION

            splits |= {"test", VALIDATION} if env.train_split == TRAIN_FIT else {"test"}
        return [task for split in sorted(splits - {env.train_split}) for task in self.suite(split, 0, 0)]

    def reinstantiate(self, task: Task, rng: random.Random, n: int) -> list[Task]:
        from webrl.env.splits import reinstantiate_for

        return reinstantiate_for(self.config.env.train_split, task, rng, n, self.url_map)

    @property
    def concurrency(self) -> int:
        """Episodes at once of this process's pool: rollout.concurrency, or the node's cores shared by its engines."""
        return self.config.engines.concurrency(self.config.rollout.concurrency, self.config.fabric)

    def browser_config(self, concurrency: int | None = None) -> BrowserConfig:
        return BrowserConfig(
            executable_path=self.config.env.chromium or None,
            max_concurrency=concurrency or self.concurrency,
            reuse_contexts=self.config.env.reuse_contexts,
        )

    def limits(self) -> EpisodeLimits:
        """The limits of every episode this environment runs (rollouts, evaluations, demonstrations): the env's."""
        env = self.config.env
        return EpisodeLimits(
            max_steps=env.max_steps,
            max_repeated_actions=env.max_repeated_actions,
            max_parse_failures=env.max_parse_failures,
            episode_timeout_s=env.episode_timeout_s,
        )

    def observation_config(self) -> ObservationConfig:
        return ObservationConfig(max_chars=self.config.env.html_chars, region=self.config.env.observe_region)

    @staticmethod
    def actor_prompt_builder(engine: InferenceEngine) -> PromptBuilder:
        """The actor's prompt: the chat form when `engine`'s tokenizer has a chat template, else the completion form."""
        tokenizer = getattr(engine, "tokenizer", None)
        chat = tokenizer if uses_chat_template(tokenizer) else None
        return partial(actor_prompt_for_step, chat_template_tokenizer=chat)

    def sampling(self, *, evaluation: bool, seed: int) -> SamplingParams:
        rollout = self.config.rollout
        return SamplingParams(
            temperature=rollout.eval_temperature if evaluation else rollout.temperature,
            top_p=1.0 if evaluation else rollout.top_p,
            max_tokens=rollout.max_tokens,
            seed=seed,
        )

    def run_episodes(
        self,
        engine: InferenceEngine,
        tasks: list[Task],
        out_path: Path,
        *,
        phase: int,
        evaluation: bool,
        seed: int,
        prompt_builder: PromptBuilder | None = None,
        concurrency: int | None = None,
        progress: bool = True,
        tally: Tally | None = None,
    ) -> tuple[list[Trajectory], dict[str, float]]:
        """Run `tasks` not yet in `out_path`, appending each trajectory there; returns all of them, in task order.

        Each step's prompt is built once, here, and recorded: by `prompt_builder`, which defaults to
        `actor_prompt_builder(engine)`. `concurrency` defaults to `rollout.concurrency`. `tally` receives the
        run's figures so far as each episode ends (`collect_rollouts`).
        """
        done = {t.task.task_id: t for t in read_trajectories(out_path)} if out_path.exists() else {}
        pending = [task for task in tasks if task.task_id not in done]
        metrics: dict[str, float] = {}
        if pending:
            builder = prompt_builder or self.actor_prompt_builder(engine)
            if isinstance(engine, ScriptedEngine):
                builder = engine.wrap(builder)
            concurrency = concurrency or self.concurrency
            collect = self._collect(
                engine, pending, out_path, phase, evaluation, seed, builder, concurrency, progress, tally
            )
            result = asyncio.run(collect)
            metrics = result.metrics
            done.update({t.task.task_id: t for t in result.trajectories})
        return [done[task.task_id] for task in tasks if task.task_id in done], metrics

    async def _collect(
        self,
        engine: InferenceEngine,
        tasks: list[Task],
        out_path: Path,
        phase: int,
        evaluation: bool,
        seed: int,
        prompt_builder: PromptBuilder,
        concurrency: int,
        progress: bool,
        tally: Tally | None,
    ) -> RolloutResult:
        async with BrowserPool(self.browser_config(concurrency)) as pool:
            pool.screenshots = self.screenshots(out_path.parent, evaluation=evaluation, seed=seed)
            return await collect_rollouts(
                engine,
                tasks,
                self.backend,
                pool,
                concurrency=concurrency,
                sampling=self.sampling(evaluation=evaluation, seed=seed),
                prompt_builder=prompt_builder,
                writer=out_path,
                limits=self.limits(),
                observation=self.observation_config(),
                phase=phase,
                progress=progress,
                tally=tally,
            )

    def screenshots(self, directory: Path, *, evaluation: bool, seed: int) -> ScreenshotRecorder | None:
        """The recorder of an episode batch's screenshots, stored under `directory` (None when turned off)."""
        config = self.config.env.screenshots
        return ScreenshotRecorder(config, directory, evaluation=evaluation, seed=seed) if config.enabled else None

    def start_observation(self, task: Task) -> str:
        """The simplified HTML of `task`'s start page, cut as the run's episodes cut it (`env.html_chars`,
        `env.observe_region`): the curriculum's critic filter scores it, and its page-fact check reads it."""
        return asyncio.run(self._start_observation(task))

    async def _start_observation(self, task: Task) -> str:
        cut = self.observation_config()
        async with BrowserPool(self.browser_config()) as pool, pool.episode(task, self.backend, None, cut) as episode:
            return (await episode.reset()).html
