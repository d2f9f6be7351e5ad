"""Records and the logic on them: tasks, steps, trajectories (JSONL), prompts, labels, replay, batches.

Nothing here imports a model, an engine, the environment or the curriculum. The public names below
load lazily: `import webrl.data` is free, `webrl.data.Trajectory` loads only the records, and the
names that need torch or Lightning (`ReplayBuffer`, `filter_by_perplexity`, `ReplayDataModule`, the
collators) load it on first use.

    from webrl.data import Task, Trajectory, read_trajectories, write_trajectories
"""

from webrl.lazy_exports import lazy_exports

_EXPORTS = {
    **dict.fromkeys(
        (
            "Step",
            "Task",
            "Trajectory",
            "TrajectoryFileError",
            "TrajectoryWriter",
            "is_success",
            "iter_trajectories",
            "read_trajectories",
            "write_trajectories",
        ),
        "webrl.data.trajectory",
    ),
    **dict.fromkeys(
        (
            "actor_prompt_for_step",
            "build_actor_prompt",
            "build_orm_prompt",
            "trajectory_orm_prompt",
        ),
        "webrl.data.prompts",
    ),
    **dict.fromkeys(
        (
            "StepSample",
            "mc_returns",
            "read_samples",
            "trajectory_to_samples",
            "write_samples",
        ),
        "webrl.data.steps",
    ),
    **dict.fromkeys(("label_with_evaluator", "label_with_orm"), "webrl.data.labels"),
    **dict.fromkeys(
        ("ReplayBuffer", "ReplayFilterConfig", "filter_by_perplexity", "select_successes"), "webrl.data.replay"
    ),
    "ReplayDataModule": "webrl.data.datamodule",
    **dict.fromkeys(
        ("ActorCollator", "CriticCollator", "CriticStateCollator", "StepTokenizer", "step_labels"), "webrl.data.collate"
    ),
    **dict.fromkeys(("CriticState", "critic_states"), "webrl.data.critic_states"),
    **dict.fromkeys(("import_trace_dir", "orm_examples", "sft_examples", "write_sharegpt"), "webrl.data.traces"),
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
