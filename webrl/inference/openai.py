"""Any OpenAI-compatible server (vLLM's own, SGLang, a hosted API) behind the engine protocol.

This is how the WebRL release rolls out: the actor is served by `vllm serve` and the harness
sends completion requests. Two modes:
- "completion": the prompt string is sent as is (WebRL's completion-form prompt), batched several
  prompts per request;
- "chat": each prompt becomes one user message (after an optional system prompt), one request per
  prompt, sent concurrently. Use it for hosted chat models (task generation, judging).
Timeouts and retries with backoff come from the `openai` client (connection errors, 408, 409,
429 and 5xx are retried `max_retries` times); a request that still fails raises
`EngineRequestError` naming the server and the model.

Token ids are not part of the OpenAI API; vLLM returns them when asked (`return_token_ids=True`,
a vLLM extension that other servers may reject). Without them `Completion.token_ids` is empty.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import openai

from webrl.inference.engine import Completion, SamplingParams

MODES = ("completion", "chat")


class EngineRequestError(RuntimeError):
    """A request to the inference server failed after all retries."""


class OpenAIEngine:
    """Client of an OpenAI-compatible server at `base_url` (ending in /v1)."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000/v1",
        model: str | None = None,
        *,
        mode: str = "completion",
        api_key: str | None = None,
        system_prompt: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        max_concurrency: int = 8,
        prompts_per_request: int = 32,
        return_token_ids: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"OpenAIEngine mode must be one of {list(MODES)}, got {mode!r}")
        if max_concurrency < 1 or prompts_per_request < 1:
            raise ValueError("OpenAIEngine max_concurrency and prompts_per_request must be >= 1")
        self.base_url = base_url
        self.mode = mode
        self.system_prompt = system_prompt
        self.prompts_per_request = prompts_per_request
        self.return_token_ids = return_token_ids
        # A local server needs no key, but the client insists on one.
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=max_retries
        )
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="openai-engine")
        self.model = model or self._first_model()

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        """Answer `prompts` in order. With per-prompt `params.seeds`, each prompt goes in a request of its own:
        a request's one seed would give all its prompts the same random stream."""
        if params.seeds is not None:
            own = [replace(params, seed=seed, seeds=None) for seed in params.prompt_seeds(len(prompts))]
            if self.mode == "chat":
                return list(self._pool.map(self._chat, prompts, own))
            return [c for chunk in self._pool.map(lambda p, q: self._complete([p], q), prompts, own) for c in chunk]
        if self.mode == "chat":
            return list(self._pool.map(lambda p: self._chat(p, params), prompts))
        chunks = [prompts[i : i + self.prompts_per_request] for i in range(0, len(prompts), self.prompts_per_request)]
        return [c for chunk in self._pool.map(lambda c: self._complete(c, params), chunks) for c in chunk]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()

    def _complete(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        response = self._call(
            self.client.completions.create,
            prompt=prompts,
            logprobs=1 if params.logprobs else None,
            **self._common(params),
        )
        choices = sorted(response.choices, key=lambda choice: choice.index)
        if len(choices) != len(prompts):
            raise EngineRequestError(f"{self.base_url}: sent {len(prompts)} prompts, got {len(choices)} choices")
        completions = []
        for choice in choices:
            logprobs = None
            if params.logprobs and choice.logprobs is not None:
                logprobs = [float(x) for x in choice.logprobs.token_logprobs]
            completions.append(_completion(choice, choice.text, logprobs))
        return completions

    def _chat(self, prompt: str, params: SamplingParams) -> Completion:
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        response = self._call(
            self.client.chat.completions.create,
            messages=messages,
            logprobs=params.logprobs or None,
            **self._common(params),
        )
        choice = response.choices[0]
        logprobs = None
        if params.logprobs and choice.logprobs is not None and choice.logprobs.content is not None:
            logprobs = [float(item.logprob) for item in choice.logprobs.content]
        return _completion(choice, choice.message.content or "", logprobs)

    def _common(self, params: SamplingParams) -> dict[str, Any]:
        return {
            "model": self.model,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "stop": list(params.stop) or None,
            "seed": params.seed,
            "extra_body": {"return_token_ids": True} if self.return_token_ids else None,
        }

    def _call(self, method: Any, **kwargs: Any) -> Any:
        kwargs = {key: value for key, value in kwargs.items() if value is not None}
        try:
            return method(**kwargs)
        except openai.APIError as err:
            raise EngineRequestError(f"{self.base_url} (model {self.model!r}): {err}") from err

    def _first_model(self) -> str:
        try:
            models = self.client.models.list().data
        except openai.APIError as err:
            raise EngineRequestError(f"{self.base_url}: cannot list models ({err})") from err
        if not models:
            raise EngineRequestError(f"{self.base_url}: the server lists no models; pass model=")
        return models[0].id


def _completion(choice: Any, text: str, logprobs: list[float] | None) -> Completion:
    extra = getattr(choice, "model_extra", None) or {}
    token_ids = extra.get("token_ids") or []
    finish = "length" if choice.finish_reason == "length" else "stop"
    return Completion(text, [int(t) for t in token_ids], logprobs, finish)
