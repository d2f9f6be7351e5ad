"""Drive webrl's tasks with your own policy through Gymnasium: no asyncio, no webrl internals.

A policy is any function from (observation, info) to one response in WebRL's action language;
`info["prompt"]` is the whole WebRL actor prompt, so an LLM policy is `lambda obs, info: llm(info["prompt"])`.
Three policies ship here: the embedded sites' reference solver (reward 1 on every task), one that answers at
once without looking (reward 0 on nearly every task), and an LLM agent behind any OpenAI-compatible server
(`vllm serve`, SGLang, a hosted API; the key comes from OPENAI_API_KEY).

    python examples/gym_policy.py                                  # 5 test tasks, reference solver
    python examples/gym_policy.py --policy exit --episodes 10
    python examples/gym_policy.py --suite miniwob --episodes 4     # MiniWoB++'s scripted policy
    python examples/gym_policy.py --policy openai --base-url http://127.0.0.1:8000/v1 --model MODEL [--chat]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import gymnasium

from webrl.env import MiniWoBScriptedPolicy  # importing webrl.env registers the webrl/* ids
from webrl.env.sites import ReferenceSolver
from webrl.inference import OpenAIEngine, SamplingParams

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


def openai_policy(args: argparse.Namespace) -> Policy:
    """The served model answers each step's WebRL prompt (a chat model gets it as one user message)."""
    engine = OpenAIEngine(
        args.base_url, args.model, mode="chat" if args.chat else "completion", api_key=os.environ.get("OPENAI_API_KEY")
    )
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    return lambda observation, info: engine.generate([info["prompt"]], params)[0].text


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
    parser.add_argument("--policy", choices=["reference", "exit", "openai"], default="reference")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=30, help="steps before an episode is truncated")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="the OpenAI-compatible server")
    parser.add_argument("--model", default=None, help="served model name (default: the server's first)")
    parser.add_argument("--chat", action="store_true", help="chat completions instead of plain completions")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per response of the served model")
    args = parser.parse_args(argv)
    if args.suite == "embedded":
        env = gymnasium.make("webrl/embedded-v0", split="test", max_steps=args.max_steps)
    else:
        tasks = list(MiniWoBScriptedPolicy.SUPPORTED_TASKS)
        env = gymnasium.make("webrl/miniwob-v0", miniwob=tasks, max_steps=args.max_steps)
    if args.policy == "openai":
        policy = openai_policy(args)
    else:
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
