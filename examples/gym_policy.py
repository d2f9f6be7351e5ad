"""Drive webrl's tasks with your own policy through Gymnasium: no asyncio, no webrl internals.

A policy is any function from (observation, info) to one response in WebRL's action language;
`info["prompt"]` is the whole WebRL actor prompt, so an LLM policy is `lambda obs, info: llm(info["prompt"])`.
Two policies ship here: the embedded sites' reference solver (reward 1 on every task) and one that
answers at once without looking (reward 0 on nearly every task).

    python examples/gym_policy.py                                  # 5 test tasks, reference solver
    python examples/gym_policy.py --policy exit --episodes 10
    python examples/gym_policy.py --suite miniwob --episodes 4     # MiniWoB++'s scripted policy
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import gymnasium

from webrl.env import MiniWoBScriptedPolicy  # importing webrl.env registers the webrl/* ids
from webrl.env.sites import ReferenceSolver

Policy = Callable[[str, dict[str, Any]], str]


def reference_policy(env: gymnasium.Env) -> Policy:
    """The scripted solver of the current task, made fresh at every reset (it keeps the episode's history)."""
    current: list[ReferenceSolver] = []

    def act(observation: str, info: dict[str, Any]) -> str:
        if info["step"] == 0:
            current[:] = [ReferenceSolver(env.unwrapped.task)]
        return current[0].act(observation)

    return act


def miniwob_policy(env: gymnasium.Env) -> Policy:
    policy = MiniWoBScriptedPolicy()
    return lambda observation, info: policy.act(env.unwrapped.task, observation, info["step"])


def exit_policy(env: gymnasium.Env) -> Policy:
    return lambda observation, info: 'exit(message="I do not know")'


def run_episode(env: gymnasium.Env, policy: Policy, seed: int) -> tuple[float, int, str]:
    """One episode; returns the final reward, the number of steps and how it ended."""
    observation, info = env.reset(seed=seed)
    terminated = truncated = False
    reward = 0.0
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(policy(observation, info))
    return reward, info["step"], info["status"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=["embedded", "miniwob"], default="embedded")
    parser.add_argument("--policy", choices=["reference", "exit"], default="reference")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.suite == "embedded":
        env = gymnasium.make("webrl/embedded-v0", split="test")
    else:
        env = gymnasium.make("webrl/miniwob-v0", miniwob=list(MiniWoBScriptedPolicy.SUPPORTED_TASKS))
    scripted = reference_policy if args.suite == "embedded" else miniwob_policy
    policy = (scripted if args.policy == "reference" else exit_policy)(env)
    total = 0.0
    with env:
        for episode in range(args.episodes):
            reward, steps, status = run_episode(env, policy, args.seed + episode)
            total += reward
            print(f"{env.unwrapped.task.task_id:>24}  reward {reward:.1f}  steps {steps:>2}  {status}", flush=True)
    print(f"mean reward {total / args.episodes:.2f} over {args.episodes} episodes")


if __name__ == "__main__":
    main()
