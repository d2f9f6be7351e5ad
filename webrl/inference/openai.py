"""Any OpenAI-compatible server (vLLM's own, SGLang, a hosted API) behind the engine protocol.

This is how the WebRL release rolls out: the actor is served by `vllm serve` and the harness
sends completion requests. Two modes:
- "completion": the prompt is sent as is (WebRL's completion-form prompt), batched several prompts per
  request. With a `tokenizer` (the served model's, a local directory or a loaded one) each prompt is sent
  as token ids instead, encoded as training encodes it (`webrl.data.prompts.prompt_token_ids`). A chat
  template may render the BOS text itself (Llama-3's), and the server encodes a string prompt with the
  tokenizer's special tokens: it would put a second BOS in front, a sequence training never shows the
  model. Ids reach the model as they are. Without a tokenizer the strings go as before;
- "chat": each prompt becomes one user message (after an optional system prompt), one request per
  prompt, sent concurrently. Use it for hosted chat models (task generation, judging).
Timeouts and retries with backoff come from the `openai` client (connection errors, 408, 409,
429 and 5xx are retried `max_retries` times); a request that still fails raises
`EngineRequestError` naming the server and the model. So does a reply that is not a completion
(not JSON, an HTML page from a proxy, no `choices`, a choice without text): a broken server must not
pass for an empty answer. The one exception is a choice with no text that the server says was cut by
`max_tokens` (finish_reason "length", e.g. a reasoning model that spent the budget thinking): that is
a truncated answer, returned as "" with finish_reason "length" like any other truncated answer.

The API key is `api_key` when given, else the environment variable `api_key_env` (OPENAI_API_KEY by
default, as for the judge), else "EMPTY", which local vLLM servers accept. Callers built from a run
config pass no key, so a hosted model gets its key from the environment and no config holds it. This
module never logs the key, leaves it out of `repr`, and masks it in error messages (and leaves out the
client's error they would chain to) when a server echoes it back.

Token ids are not part of the OpenAI API; vLLM returns them when asked (`return_token_ids=True`,
a vLLM extension that other servers may reject). Without them `Completion.token_ids` is empty.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import openai

from webrl.data.prompts import prompt_token_ids
from webrl.inference.engine import Completion, SamplingParams, encode_prompts

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
        api_key_env: str = "OPENAI_API_KEY",
        system_prompt: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 3,
        max_concurrency: int = 8,
        prompts_per_request: int = 32,
        return_token_ids: bool = False,
        tokenizer: Any = None,
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
        self.tokenizer = _load_tokenizer(tokenizer)
        # A hosted API's key comes from the environment (see the module docstring); a local server needs
        # none, but the client insists on one. `_secret` is what error messages mask.
        key = api_key or os.environ.get(api_key_env) or "EMPTY"
        self._secret = "" if key == "EMPTY" else key
        self.model = model  # what errors name while the server's models are listed
        self.client = openai.OpenAI(base_url=base_url, api_key=key, timeout=timeout_s, max_retries=max_retries)
        try:
            self.model, self.max_model_len = self._served_model(model)
        except BaseException:
            # The caller gets no engine to close, so the client's connection pool would be left open.
            self.client.close()
            raise
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="openai-engine")
        self._closed = False

    def __repr__(self) -> str:
        return f"OpenAIEngine(base_url={self.base_url!r}, model={self.model!r}, mode={self.mode!r})"

    def generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        """Answer `prompts` in order. With per-prompt `params.seeds`, each prompt goes in a request of its own:
        a request's one seed would give all its prompts the same random stream."""
        if self._closed:
            raise RuntimeError(f"{self!r} is closed: build a new engine")
        if self.mode == "completion":
            prompts = self._encode(prompts)
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
        self._closed = True
        self._pool.shutdown(wait=True)
        self.client.close()

    def _encode(self, prompts: list[str]) -> list[str] | list[list[int]]:
        """What a completion request sends for `prompts`: their ids with a tokenizer (module docstring), else
        the strings. Encoded on the caller's thread, so the pool's threads share no tokenizer (a fast tokenizer
        used by several threads at once can fail with "Already borrowed"). Where the server lists the model's
        context length, a prompt with no room left is a `PromptTooLongError` before anything is sent, as with the
        local engines: the server's own refusal (an HTTP 400) would pass for an engine failure."""
        if self.tokenizer is None:
            return prompts
        if self.max_model_len is not None:
            return encode_prompts(self.tokenizer, prompts, self.max_model_len)
        return [prompt_token_ids(self.tokenizer, prompt) for prompt in prompts]

    def _complete(self, prompts: list[str] | list[list[int]], params: SamplingParams) -> list[Completion]:
        choices = self._call(
            self.client.completions.create,
            prompt=prompts,
            logprobs=1 if params.logprobs else None,
            **self._common(params),
        )
        if len(choices) != len(prompts):
            raise self._error(f"sent {len(prompts)} prompts, got {len(choices)} choices")
        indices = [getattr(choice, "index", None) for choice in choices]
        if set(indices) != set(range(len(prompts))):
            raise self._error(f"the choices' indices are {indices}, not 0 to {len(prompts) - 1}")
        completions = []
        for choice in sorted(choices, key=lambda choice: choice.index):
            logprobs = None
            if params.logprobs and choice.logprobs is not None:
                logprobs = [float(x) for x in choice.logprobs.token_logprobs]
            completions.append(_completion(choice, self._text(choice, getattr(choice, "text", None)), logprobs))
        return completions

    def _chat(self, prompt: str, params: SamplingParams) -> Completion:
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        choices = self._call(
            self.client.chat.completions.create,
            messages=messages,
            logprobs=params.logprobs or None,
            **self._common(params),
        )
        if len(choices) != 1:
            raise self._error(f"asked for one chat answer, got {len(choices)} choices")
        choice = choices[0]
        message = getattr(choice, "message", None)
        text = self._text(choice, getattr(message, "content", None), getattr(message, "refusal", None))
        logprobs = None
        if params.logprobs and choice.logprobs is not None and choice.logprobs.content is not None:
            logprobs = [float(item.logprob) for item in choice.logprobs.content]
        return _completion(choice, text, logprobs)

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

    def _call(self, method: Any, **kwargs: Any) -> list[Any]:
        """The reply's choices, checked to be a list: anything else the server sends is an EngineRequestError."""
        kwargs = {key: value for key, value in kwargs.items() if value is not None}
        try:
            response = method(**kwargs)
        except openai.APIError as err:
            raise self._error(str(err)) from self._cause(err)
        except json.JSONDecodeError as err:
            raise self._error(f"the reply is not valid JSON ({err})") from err
        if isinstance(response, str):
            # The client hands back the body as text when its content type is not JSON (a proxy's HTML page).
            raise self._error(f"the reply is not JSON but {response[:200]!r}")
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            fields = sorted(
                getattr(response, "model_fields_set", set()) | set(getattr(response, "model_extra", None) or {})
            )
            raise self._error(f"the reply has no 'choices' list (its fields: {fields})")
        return choices

    def _text(self, choice: Any, text: Any, refusal: Any = None) -> str:
        """A choice's text; none is an error, unless the server cut the answer at max_tokens (module docstring)."""
        finish = getattr(choice, "finish_reason", None)
        if isinstance(text, str):
            return text
        if text is None and finish == "length":
            return ""
        why = f", refusal {str(refusal)[:200]!r}" if refusal else ""
        raise self._error(f"a choice has no text ({text!r}, finish_reason {finish!r}{why})")

    def _error(self, what: str) -> EngineRequestError:
        """An error naming the server and model, with the API key masked wherever the server echoed it."""
        where = self.base_url if self.model is None else f"{self.base_url} (model {self.model!r})"
        message = f"{where}: {what}"
        return EngineRequestError(message.replace(self._secret, "***") if self._secret else message)

    def _cause(self, err: Exception) -> Exception | None:
        """`err` to chain to our error, or None when its message holds the key: a traceback would print it."""
        return None if self._secret and self._secret in str(err) else err

    def _served_model(self, model: str | None) -> tuple[str, int | None]:
        """The model to ask (`model`, else the first the server lists) and the context length the server lists for
        it (vLLM's `max_model_len`; None where the server does not say, or, with `model` given, cannot list)."""
        try:
            models = self.client.models.list().data
        except openai.APIError as err:
            if model:
                return model, None
            raise self._error(f"cannot list models ({err})") from self._cause(err)
        if not models and not model:
            raise self._error("the server lists no models; pass model=")
        chosen = next((entry for entry in models if entry.id == model), None) if model else models[0]
        length = (chosen.model_extra or {}).get("max_model_len") if chosen is not None else None
        return model or models[0].id, int(length) if isinstance(length, int) else None


def _load_tokenizer(tokenizer: Any) -> Any:
    """`tokenizer` loaded when it is a local directory, as given otherwise (a loaded tokenizer, or None).

    transformers is imported only here, so that a client without a tokenizer does not pay for it.
    """
    if not isinstance(tokenizer, (str, os.PathLike)):
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)


def _completion(choice: Any, text: str, logprobs: list[float] | None) -> Completion:
    extra = getattr(choice, "model_extra", None) or {}
    token_ids = extra.get("token_ids") or []
    finish = "length" if choice.finish_reason == "length" else "stop"
    return Completion(text, [int(t) for t in token_ids], logprobs, finish)
