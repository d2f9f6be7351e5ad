"""What makes two evaluations the same one: a resumed evaluation or a comparison reuses only an identical one."""

from __future__ import annotations

from sample_records import build_trajectory

from webrl.config import load_config
from webrl.data.trajectory import write_trajectories
from webrl.evaluation.identity import evaluation_settings, identity_tag
from webrl.loop_config import WebRLConfig
from webrl.run_layout import RunLayout


def _settings(*overrides: str) -> dict:
    return evaluation_settings(load_config(WebRLConfig, list(overrides)))


def test_the_sites_the_judge_the_login_the_server_and_the_episode_limits_are_part_of_it(tmp_path):
    plain = identity_tag(_settings())
    url_map = "env.url_map={__SHOPPING__: 'http://shop:7770'}"
    changed = [
        _settings(url_map),
        _settings("env.judge_url=http://judge:8000/v1", "env.judge_model=gpt-4o"),
        _settings(f"env.storage_state_dir={tmp_path}"),
        _settings("rollout.engine=openai", "rollout.openai_url=http://policy:8000/v1"),
        _settings("env.max_repeated_actions=3"),
        _settings("env.max_parse_failures=3"),
        _settings("env.episode_timeout_s=900"),
    ]
    tags = {identity_tag(settings) for settings in changed}
    assert len(tags) == len(changed) and plain not in tags
    assert identity_tag(_settings()) == plain, "the same settings, the same evaluation"


def test_an_embedded_runs_identity_is_unchanged_by_keys_at_their_defaults():
    settings = _settings()
    assert not {"url_map", "judge_url", "judge_model", "storage_state_dir", "openai_url"} & settings.keys()
    assert not {"max_repeated_actions", "max_parse_failures", "episode_timeout_s"} & settings.keys()
    assert _settings("env.max_parse_failures=2")["max_parse_failures"] == 2


def test_a_task_in_two_ranks_files_counts_once(tmp_path):
    """An evaluation killed under two processes and rerun on one leaves rank 1's partial file beside rank 0's."""
    layout = RunLayout(tmp_path)
    write_trajectories(layout.eval_path(1, 0), [build_trajectory(t, eval_reward=1.0) for t in ("a", "b", "c")])
    write_trajectories(layout.eval_path(1, 1), [build_trajectory("b", eval_reward=0.0)])
    assert [(t.task.task_id, t.eval_reward) for t in layout.evaluations(1)] == [("a", 1.0), ("b", 1.0), ("c", 1.0)]
