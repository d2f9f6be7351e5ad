"""`rollout_counts`: the rollout figures a resumed stage recomputes over every episode, the earlier ones too."""

from __future__ import annotations

from sample_records import build_trajectory

from webrl.inference.rollout_metrics import rollout_counts


def test_counts_depend_only_on_the_trajectories():
    trajectories = [
        build_trajectory("a", num_steps=2, outcome=1.0),
        build_trajectory("b", num_steps=3, outcome=0.0),
        build_trajectory("c", num_steps=1, outcome=1.0),
        build_trajectory("d", num_steps=1, outcome=0.0),
    ]
    trajectories[1].status = "max_steps"
    # A fuzzy_match task with no judge configured: counted as unjudged.
    trajectories[1].metadata["eval"] = {"per_type": {"string_match": 0.0}, "needs_judge": True}
    # A browser failure that its retry did not cure: counted, but left out of the success rates.
    trajectories[3].status = "error"
    trajectories[3].metadata.update(infra_error=True, attempts=2)
    assert rollout_counts(trajectories) == {
        "rollout/episodes": 4,
        "rollout/steps": 7,
        "rollout/infra_errors": 1,
        "rollout/retried": 1,
        "rollout/unjudged": 1,
        "rollout/success_rate": 2 / 3,
        "rollout/success_rate/shopping": 2 / 3,
        "rollout/status/error": 1,
        "rollout/status/exit": 2,
        "rollout/status/max_steps": 1,
    }
    assert rollout_counts([]) == {
        "rollout/episodes": 0,
        "rollout/steps": 0,
        "rollout/infra_errors": 0,
        "rollout/retried": 0,
        "rollout/unjudged": 0,
    }
