"""Records built by hand for the tests of several packages: trajectories as a rollout runner writes them, and
VisualAgentBench result dirs as the release's harness writes them."""

from __future__ import annotations

import json

from webrl.data.prompts import actor_prompt_for_step
from webrl.data.trajectory import Step, Task, Trajectory

PAGES = ['<a id="1" data-bbox="1,2,3,4">Orders</a>', '<td id="5">Order #12: $30.00</td>']
RESPONSES = ['# Element: the Orders link\ndo(action="Click", element="1")', '# Note: $30\nexit(message="$30.00")']


def write_result_dir(root, tasks: dict[str, tuple[str, float, int]]) -> None:
    """A result dir as the release's harness writes it: traces/<id>.jsonl and actions/<id>.json."""
    (root / "traces").mkdir(parents=True)
    (root / "actions").mkdir()
    for task_id, (intent, score, num_steps) in tasks.items():
        lines = []
        for i in range(num_steps):
            record = {
                "trace_id": int(task_id),
                "index": i,
                "prompt": intent if i == 0 else "** Simplified html **",
                "html": PAGES[i % 2],
                "response": RESPONSES[1] if num_steps == 2 and i == 1 else RESPONSES[0],
                "target": intent,
            }
            lines.append(json.dumps(record))
        (root / "traces" / f"{task_id}.jsonl").write_text("\n".join(reversed(lines)) + "\n")
        actions = {"task_id": int(task_id), "score": score, "actions": RESPONSES[:num_steps]}
        (root / "actions" / f"{task_id}.json").write_text(json.dumps(actions))


def _response(task_id: str, i: int, last: bool) -> str:
    if last:
        return f'# Note: done with {task_id}\nexit(message="answer {task_id}")'
    return f'# Element: the button {i}\ndo(action="Click", element="{i}")'


def build_trajectory(
    task_id: str = "t0",
    intent: str | None = None,
    num_steps: int = 3,
    outcome: float | None = 1.0,
    phase: int = 0,
    html_size: int = 40,
    max_chars: int = 16384 - 512,
    tokenizer=None,
    **labels,
) -> Trajectory:
    """A trajectory built as a rollout runner would: each step's prompt from the builder, recorded."""
    task = Task(task_id=task_id, intent=intent or f"Do thing {task_id}", sites=["shopping"], start_url="")
    trajectory = Trajectory(task=task, outcome=outcome, phase=phase, status="exit", **labels)
    for i in range(num_steps):
        html = f"<page {task_id}/{i}>" + "x" * html_size + f"</page {i}>"
        prompt = actor_prompt_for_step(
            task, trajectory.steps, html, max_chars=max_chars, chat_template_tokenizer=tokenizer
        )
        response = _response(task_id, i, i == num_steps - 1)
        trajectory.steps.append(Step(index=i, prompt=prompt, observation=html, response=response))
    return trajectory


CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""SmolLM2's ChatML chat template."""


def chatml_tokenizer(corpus: list[str], vocab_size: int):
    """A byte-level BPE trained on `corpus` in milliseconds, with SmolLM2's special tokens and ChatML template, so
    that prompts take their chat form through a real `apply_chat_template`. Its packages are imported here, as in
    `one_token_tokenizer`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def one_token_tokenizer():
    """A real tokenizer that reads any text as one unknown token, with the eos and pad tokens batching needs: for
    tests that stub the actor's model but still go through code that fits prompts to a token limit. Its packages are
    imported here, so that the environment's tests, which read these records without torch, do not load them."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "</s>": 1}, unk_token="[UNK]"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="</s>", pad_token="</s>")


# Placeholder -> URL on a port nothing listens on (9, discard): tasks resolve without any server.
URL_MAP = {
    "__SHOPPING__": "http://127.0.0.1:9/shopping",
    "__SHOPPING_ADMIN__": "http://127.0.0.1:9/admin",
    "__REDDIT__": "http://127.0.0.1:9/forum",
    "__GITLAB__": "http://127.0.0.1:9/gitlab",
    "__MAP__": "http://127.0.0.1:9/map",
}
