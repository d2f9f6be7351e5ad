"""Import WebArena-Lite interaction traces (VisualAgentBench result dirs); export ShareGPT data.

The WebRL release rolls out in VisualAgentBench, whose result directory holds, per task,
`traces/{task_id}.jsonl` (one line per step: `trace_id`, `index`, `prompt`, `html`, `response`,
`target` = the intent) and `actions/{task_id}.json` (`task_id`, `score` — −0.1 while the task has
not finished —, `actions`). `import_trace_dir` turns such a directory into `Trajectory` records
(the environment's score becomes `eval_reward`), so rollouts from that harness feed this
project's labelling, replay and training unchanged. Only JSON is read: nothing is unpickled.

The exports write LLaMA-Factory-style ShareGPT JSON for other trainers: SFT data (one example per
step: the actor prompt and the raw response) and ORM data (the ORM prompt's user turn, the evaluator's YES/NO
verdict, and the ORM system prompt in a `system` column).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from webrl.data.atomic_io import write_json_atomic
from webrl.data.prompts import DEFAULT_MAX_CHARS, ORM_SYSTEM_PROMPT, actor_prompt_for_step, orm_user_text
from webrl.data.steps import trajectory_outcome
from webrl.data.trajectory import Step, Task, Trajectory, TrajectoryFileError, is_success

TRACE_FIELDS = ("index", "html", "response", "target")

ReadAction = Callable[[str], dict[str, Any]]
"""read_action(response) -> the action a response names, as `Action.to_dict()`; ValueError when it names none."""


def import_trace_dir(
    result_dir: str | os.PathLike,
    *,
    read_action: ReadAction,
    configs: dict[str, Task] | None = None,
    phase: int = 0,
    max_chars: int = DEFAULT_MAX_CHARS,
    chat_template_tokenizer: Any = None,
) -> list[Trajectory]:
    """Read every finished task of a VisualAgentBench result dir, in task-id order.

    `configs` maps task ids to their Task (sites, start URL, evaluator) where known; otherwise a
    Task is made from the trace's intent. Tasks whose score is still negative (unfinished) are
    skipped with a warning. Step prompts are re-built with the project's builder, which produces
    the release's completion-form prompt for the same intent, responses and page. `read_action` parses
    each response (`webrl.env.actions.parse_action`); it is passed in because the action grammar belongs
    to the environment, which this record layer does not import. Trajectory ids come from
    `trace_trajectory_id`, so that two result dirs holding the same task never share one.
    """
    root = Path(result_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"trace directory {root} does not exist")
    traces_dir, actions_dir = root / "traces", root / "actions"
    for sub in (traces_dir, actions_dir):
        if not sub.is_dir():
            raise FileNotFoundError(f"{root} is not a result dir of the release: {sub.name}/ is missing")
    trajectories, unfinished = [], []
    for trace_path in sorted(traces_dir.glob("*.jsonl"), key=_task_order):
        task_id = trace_path.stem
        score = _read_score(actions_dir / f"{task_id}.json")
        if score < 0:
            unfinished.append(task_id)
            continue
        records = _read_trace(trace_path)
        if not records:
            raise TrajectoryFileError(f"{trace_path}: the trace has no steps")
        task = (configs or {}).get(task_id)
        if task is None:
            task = Task(task_id=task_id, intent=records[0]["target"], sites=[], start_url="")
        trajectories.append(
            _to_trajectory(
                task,
                records,
                score,
                trajectory_id=trace_trajectory_id(root, task.task_id),
                phase=phase,
                max_chars=max_chars,
                tokenizer=chat_template_tokenizer,
                read_action=read_action,
            )
        )
    if unfinished:
        warnings.warn(f"{root}: skipped {len(unfinished)} unfinished tasks: {', '.join(unfinished)}", stacklevel=2)
    return trajectories


def trace_trajectory_id(result_dir: str | os.PathLike, task_id: str) -> str:
    """`trace-<12 hex of the resolved result dir's sha256>-<task_id>`: unique per result dir, the same on re-import.

    Result dirs of different runs or phases hold the same task ids; an id of the task alone would merge
    their trajectories wherever steps are keyed by trajectory (critic states, step values).
    """
    digest = hashlib.sha256(str(Path(result_dir).resolve()).encode("utf-8")).hexdigest()[:12]
    return f"trace-{digest}-{task_id}"


def _task_order(path: Path) -> tuple[int, str]:
    return (int(path.stem), "") if path.stem.isdigit() else (1 << 62, path.stem)


def _read_score(path: Path) -> float:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: every traces/<id>.jsonl needs actions/<id>.json with its score")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise TrajectoryFileError(f"{path}: not valid JSON ({err})") from err
    if not isinstance(data, dict) or not isinstance(data.get("score"), int | float):
        raise TrajectoryFileError(f"{path}: expected an object with a numeric 'score'")
    return float(data["score"])


def _read_trace(path: Path) -> list[dict[str, Any]]:
    records = []
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise TrajectoryFileError(f"{path}:{number}: not valid JSON ({err})") from err
            missing = [name for name in TRACE_FIELDS if name not in record]
            if missing:
                raise TrajectoryFileError(f"{path}:{number}: trace step is missing {missing}")
            records.append(record)
    records.sort(key=lambda r: r["index"])
    return records


def _to_trajectory(
    task: Task,
    records: list[dict[str, Any]],
    score: float,
    *,
    trajectory_id: str,
    phase: int,
    max_chars: int,
    tokenizer: Any,
    read_action: ReadAction,
) -> Trajectory:
    trajectory = Trajectory(
        task=task,
        eval_reward=score,
        phase=phase,
        trajectory_id=trajectory_id,
        metadata={"source": "vab_trace"},
    )
    for i, record in enumerate(records):
        prompt = actor_prompt_for_step(
            task, trajectory.steps, record["html"], max_chars=max_chars, chat_template_tokenizer=tokenizer
        )
        step = Step(index=i, prompt=prompt, observation=record["html"], response=record["response"])
        try:
            step.action = read_action(record["response"])
        except ValueError as err:
            step.error = str(err)
        trajectory.steps.append(step)
    last = trajectory.steps[-1]
    trajectory.final_observation = last.observation
    finished = last.action is not None and last.action["name"] == "exit"
    trajectory.status = "exit" if finished else "stopped"
    trajectory.answer = last.action["message"] if finished else None
    return trajectory


def sft_examples(trajectories: Iterable[Trajectory], *, successful_only: bool = True) -> list[dict[str, Any]]:
    """ShareGPT examples, one per step: human = the recorded actor prompt, gpt = the raw response."""
    examples = []
    for trajectory in trajectories:
        if successful_only and not is_success(trajectory_outcome(trajectory)):
            continue
        for step in trajectory.steps:
            conversation = [{"from": "human", "value": step.prompt}, {"from": "gpt", "value": step.response}]
            examples.append({"conversations": conversation})
    return examples


def orm_examples(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """ShareGPT ORM examples: the ORM user turn, YES/NO from the evaluator's reward, system prompt.

    The ORM learns the evaluators' verdicts (docs/method.md §5.2, `webrl.orm_data`), whatever labelled the
    trajectories for training: labels from an ORM would teach a new ORM that ORM's mistakes. A trajectory its
    evaluator did not judge (`Trajectory.judged_by_evaluator`) or without steps gives no example.
    """
    examples = []
    for trajectory in trajectories:
        if not trajectory.steps or not trajectory.judged_by_evaluator:
            continue
        responses = [step.response for step in trajectory.steps]
        user = orm_user_text(trajectory.task.intent, responses, trajectory.steps[-1].observation)
        label = "YES" if is_success(trajectory.eval_reward) else "NO"
        conversation = [{"from": "human", "value": user}, {"from": "gpt", "value": label}]
        examples.append({"conversations": conversation, "system": ORM_SYSTEM_PROMPT})
    return examples


def write_sharegpt(path: str | os.PathLike, examples: list[dict[str, Any]]) -> Path:
    """Write ShareGPT examples as one JSON list (atomically)."""
    return write_json_atomic(path, examples, indent=1, sort_keys=False)
