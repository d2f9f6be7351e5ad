"""Run real agent episodes end to end on MiniWoB++ with a scripted policy.

Everything but the model is real: Chromium through the BrowserPool, the MiniWoB++ pages served
locally, WebRL's observation text, prompt and action language, the episode limits and the reward.
The trajectories are written in webrl's JSONL format, the same records rollouts produce.

    python -m webrl.env.demo
    python -m webrl.env.demo --tasks click-button enter-text --seeds 0 1 2 --out runs/demo
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Trajectory, write_trajectories
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.miniwob import MiniWoBBackend, miniwob_tasks
from webrl.env.scripted_policy import MiniWoBScriptedPolicy

DEFAULT_TASKS = ("click-button", "click-link", "enter-text", "login-user", "choose-list")


async def run_demo(
    tasks: list[str], seeds: list[int], out_dir: Path, concurrency: int = 4, executable_path: str | None = None
) -> list[Trajectory]:
    """Run one episode per (task, seed), print each step, write `out_dir/trajectories.jsonl`."""
    policy = MiniWoBScriptedPolicy()
    trajectories: list[Trajectory] = []
    with MiniWoBBackend() as backend:
        async with BrowserPool(BrowserConfig(max_concurrency=concurrency, executable_path=executable_path)) as pool:

            async def run(task):
                async with pool.episode(task, backend) as episode:
                    observation = await episode.reset()
                    lines = [f"== {task.task_id}: {episode.task.intent}"]
                    while not episode.done:
                        steps = episode.trajectory.steps
                        prompt = actor_prompt_for_step(episode.task, steps, observation.html)
                        response = policy.act(episode.task, observation.html, len(steps))
                        result = await episode.step(response, prompt=prompt)
                        action = response.splitlines()[-1]
                        lines.append(f"   step {len(episode.trajectory.steps)}: {action}  -> {result.status}")
                        observation = result.observation
                    reward = await episode.evaluate()
                    lines.append(f"   reward {reward}  ({episode.trajectory.status})")
                    print("\n".join(lines), flush=True)
                    return episode.trajectory

            trajectories = list(await asyncio.gather(*(run(t) for t in miniwob_tasks(tasks, seeds))))
    path = out_dir / "trajectories.jsonl"
    write_trajectories(path, trajectories)
    successes = sum(1 for t in trajectories if (t.eval_reward or 0) >= 1)
    print(f"{successes}/{len(trajectories)} episodes succeeded; trajectories written to {path}")
    return trajectories


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), help="MiniWoB++ task names")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1], help="episode seeds per task")
    parser.add_argument("--out", type=Path, default=Path("runs/demo"), help="output directory")
    parser.add_argument("--concurrency", type=int, default=4, help="episodes in parallel")
    parser.add_argument("--chromium", default=None, help="Chromium executable (default: found automatically)")
    args = parser.parse_args(argv)
    unsupported = sorted(set(args.tasks) - set(MiniWoBScriptedPolicy.SUPPORTED_TASKS))
    if unsupported:
        parser.error(f"no scripted policy for {unsupported}; choose from {list(MiniWoBScriptedPolicy.SUPPORTED_TASKS)}")
    asyncio.run(run_demo(args.tasks, args.seeds, args.out, args.concurrency, args.chromium))


if __name__ == "__main__":
    main()
