"""The public API: packages import light, every exported name resolves and is documented in docs/api.md,
and the exported names alone build a tiny model, record trajectories and run the replay filter on them."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

import webrl.data
import webrl.env
import webrl.inference
import webrl.modules

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (webrl.data, webrl.env, webrl.inference, webrl.modules)


def _api_doc_script():
    spec = importlib.util.spec_from_file_location("api_doc", ROOT / "scripts" / "api_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_importing_the_packages_loads_no_model_stack():
    code = (
        "import json, sys, webrl, webrl.data, webrl.modules, webrl.inference\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'lightning', 'playwright', 'gymnasium')"
        " if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout) == []


def test_docs_api_md_lists_every_public_name_with_its_docstring():
    api_doc = _api_doc_script()
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert text == api_doc.render(), "docs/api.md is out of date: run python scripts/api_doc.py"
    for package in PACKAGES:
        for name in package.__all__:
            assert f"| `{name}` |" in text
            assert api_doc.summary(api_doc.docstring_of(api_doc.defining_module(package.__name__, name), name)), (
                f"{package.__name__}.{name} has no docstring"
            )


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_exported_name_resolves(package):
    assert len(set(package.__all__)) == len(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="no attribute 'NotAName'"):
        package.NotAName  # noqa: B018 - the lookup is what is tested


def _trajectory(task_id: str, reward: float, responses: list[str]):
    from webrl.data import Step, Task, Trajectory

    task = Task(task_id=task_id, intent=f"Find the price of item {task_id}", sites=["shopping"], start_url="http://s/")
    steps = [
        Step(index=i, prompt=f"Task: {task.intent}\nPage {i}", observation=f"<p>page {i}</p>", response=response)
        for i, response in enumerate(responses)
    ]
    return Trajectory(task=task, steps=steps, status="exit", eval_reward=reward)


def test_public_names_build_a_model_and_filter_replayed_experience(tmp_path):
    from webrl.data import ReplayBuffer, ReplayFilterConfig, filter_by_perplexity, read_trajectories, write_trajectories
    from webrl.modules import actor_scorer, build_tiny_model, load_model_and_tokenizer

    success = _trajectory("1", 1.0, ['do(action="Click", element="3")', 'exit(message="12.50")'])
    failure = _trajectory("2", 0.0, ['do(action="Click", element="4")'])
    write_trajectories(tmp_path / "t.jsonl", [success, failure])
    assert [t.to_dict() for t in read_trajectories(tmp_path / "t.jsonl")] == [success.to_dict(), failure.to_dict()]

    buffer = ReplayBuffer(tmp_path / "replay")
    buffer.add_phase(0, [success, failure])
    assert len(ReplayBuffer(tmp_path / "replay")) == 2
    assert buffer.stats()[0] == {"file": "phase_000/trajectories.jsonl", "trajectories": 2, "steps": 3, "successes": 1}

    corpus = [step.prompt + step.response for t in (success, failure) for step in t.steps] * 20
    model_dir = build_tiny_model(tmp_path / "tiny", corpus, vocab_size=300, hidden_size=64, num_layers=1, num_heads=1)
    model, tokenizer = load_model_and_tokenizer(model_dir)
    score = actor_scorer(model.eval(), tokenizer)

    # Only the success is replayed; a window open to every probability keeps both of its steps,
    # each scored as the scorer scores it alone, and a window below any probability keeps none.
    everything = ReplayFilterConfig(low=0.0, high=1.0, low_inclusive=True, cap_ratio=None)
    kept = filter_by_perplexity(buffer.trajectories(), score, current_steps=1, config=everything)
    assert sorted(s.action for s in kept) == sorted(step.response for step in success.steps)
    for sample in kept:
        assert 0.0 < sample.score < 1.0
        assert sample.score == pytest.approx(score([sample.prompt], [sample.action])[0], rel=1e-4)
    nothing = ReplayFilterConfig(low=0.0, high=1e-12, cap_ratio=None)
    assert filter_by_perplexity(buffer.trajectories(), score, current_steps=1, config=nothing) == []
