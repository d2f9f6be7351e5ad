"""The fuzzy_match judge from the run config, asked over the OpenAI chat API.

The judge's server is an external service that cannot run here, so `_StubChatServer` is a TEST DOUBLE
of it: a local HTTP server speaking the OpenAI chat-completions protocol, whose "model" replies
"correct" when the student answer contains the reference, "partially correct" when it shares a word
with it, and "incorrect" otherwise. It records each request, so the tests can check what was sent.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sample_records import build_trajectory
from stub_http import StubHandler, serve

from webrl.env.evaluators import EvaluationError, string_match
from webrl.env.judge import JUDGE_SYSTEM_PROMPT, JudgeError, OpenAIJudge, build_judge, verdict_score
from webrl.env.tasks import load_tasks
from webrl.inference.rollout_metrics import rollout_counts
from webrl.metrics import success_by_site

FIXTURES = Path(__file__).parent / "webarena_fixtures"
URL_MAP = {"__SHOPPING__": "http://shopping.test:8080", "__SHOPPING_ADMIN__": "http://admin.test:8080"}
KEY_VAR, KEY = "WEBRL_TEST_JUDGE_KEY", "sk-test-not-a-real-key"


class _StubChatServer(StubHandler):
    """Test double of an OpenAI-compatible chat server (see the module docstring)."""

    requests: list[dict] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if body["model"] == "broken":
            self._reply(500, {"error": {"message": "model crashed"}})
            return
        user = body["messages"][-1]["content"]
        reference = re.search(r"Reference answer: (.*)", user).group(1).lower()
        student = re.search(r"Student answer: (.*)", user).group(1).lower()
        if body["model"] == "mute":
            verdict = "I would rather not say."
        elif reference in student:
            verdict = "The meaning is the same. Verdict: correct"
        elif set(reference.split()) & set(student.split()):
            verdict = "Verdict: partially correct"
        else:
            verdict = "Verdict: incorrect"
        message = {"role": "assistant", "content": verdict}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        payload = {"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [choice]}
        self._reply(200, {**payload, "usage": usage})

    def _reply(self, status: int, payload: dict) -> None:
        self.reply(status, "application/json", json.dumps(payload).encode())


@pytest.fixture(scope="module")
def judge_url() -> Iterator[str]:
    with serve(_StubChatServer) as url:
        yield url


@pytest.fixture
def judge(judge_url: str, monkeypatch: pytest.MonkeyPatch) -> OpenAIJudge:
    monkeypatch.setenv(KEY_VAR, KEY)
    _StubChatServer.requests.clear()
    return OpenAIJudge(judge_url, "judge-model", KEY_VAR, max_retries=0)


def fixture_scores(task_id: int, answer: str, judge) -> tuple[float, bool]:
    (task,) = load_tasks(FIXTURES / f"{task_id}.json", URL_MAP, strict=True)
    block = task.eval
    return asyncio.run(string_match(block["reference_answers"], answer, task.intent, judge, block["string_note"]))


def test_only_a_plain_correct_verdict_scores():
    assert verdict_score("Verdict: correct") == 1.0
    assert verdict_score("Partially correct.") == 0.0
    assert verdict_score("INCORRECT") == 0.0
    assert verdict_score("It looked correct at first, but on reflection: incorrect") == 0.0
    with pytest.raises(ValueError, match="no verdict"):
        verdict_score("cannot tell")


def test_the_judge_sends_the_question_with_the_key_from_the_named_variable(judge):
    assert asyncio.run(judge("When does the store open?", "it opens at 9am daily", "9am")) == 1.0
    (request,) = _StubChatServer.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == f"Bearer {KEY}"
    body = request["body"]
    assert (body["model"], body["temperature"]) == ("judge-model", 0.0)
    assert body["messages"][0] == {"role": "system", "content": JUDGE_SYSTEM_PROMPT}
    assert "Question: When does the store open?" in body["messages"][1]["content"]
    assert KEY not in repr(judge) and judge.calls == 1


def test_fuzzy_tasks_are_scored_through_the_judge_and_left_unjudged_without_one(judge):
    # Fixture 5: fuzzy_match ["9am"].
    assert fixture_scores(5, "The store opens at 9am.", judge) == (1.0, False)
    assert fixture_scores(5, "It opens at 10am.", judge) == (0.0, False)  # the stub says "partially correct"
    assert fixture_scores(5, "Never.", judge) == (0.0, False)
    assert fixture_scores(5, "The store opens at 9am.", None) == (0.0, True)
    # Fixture 6: unachievable ("N/A"); the agent's reason is judged against string_note.
    assert fixture_scores(6, "N/A", judge) == (1.0, False)
    assert len(_StubChatServer.requests) == 3  # "N/A" itself passes without a question
    assert fixture_scores(6, "there is no customer called amanda kim", judge) == (1.0, False)
    assert (
        "Reference answer: There is no customer called Amanda Kim"
        in (_StubChatServer.requests[-1]["body"]["messages"][1]["content"])
    )


def test_a_failed_request_or_a_reply_without_verdict_is_an_evaluation_error(judge_url, monkeypatch):
    monkeypatch.delenv(KEY_VAR, raising=False)
    with pytest.raises(JudgeError, match="judge broken at http://127.0.0.1:.* failed") as err:
        asyncio.run(OpenAIJudge(judge_url, "broken", KEY_VAR, max_retries=0)("q", "a", "b"))
    assert isinstance(err.value, EvaluationError)
    # Without the variable the client sends the placeholder key a local server accepts.
    assert _StubChatServer.requests[-1]["auth"] == "Bearer EMPTY"
    with pytest.raises(JudgeError, match="no verdict"):
        asyncio.run(OpenAIJudge(judge_url, "mute", KEY_VAR, max_retries=0)("q", "a", "b"))


def test_the_run_config_builds_the_judge_only_with_a_url(judge_url):
    assert build_judge("", "m", KEY_VAR) is None
    built = build_judge(judge_url, "judge-model", KEY_VAR)
    assert (built.base_url, built.model) == (judge_url, "judge-model")


def test_unjudged_episodes_stay_out_of_the_rates_and_are_counted():
    judged = build_trajectory("a", outcome=None, eval_reward=1.0)
    failed = build_trajectory("b", outcome=None, eval_reward=0.0)
    unjudged = build_trajectory("c", outcome=None, eval_reward=None)
    unjudged.metadata["eval"] = {"per_type": {"string_match": 0.0}, "needs_judge": True}
    unlabelled = build_trajectory("d", outcome=None, eval_reward=None)
    rates = success_by_site([judged, failed, unjudged, unlabelled])
    assert rates == {
        "success_rate": 0.5,
        "episodes": 2.0,
        "success_rate/shopping": 0.5,
        "unlabelled": 2.0,
        "unjudged": 1.0,
    }
    assert rollout_counts([judged, failed, unjudged, unlabelled])["rollout/unjudged"] == 1
