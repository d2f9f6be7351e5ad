"""OutcomeRewardModule: WebRL's outcome-supervised reward model, a generative YES/NO verifier.

The ORM reads a prompt holding the task intent, the agent's action history (one line per step)
and the final page HTML, and answers YES (the task was accomplished) or NO [P App. B.3, C
`build_rm_data`]. Its score is P(YES) from the next-token logits at the prompt's last position,
normalised over the two answer tokens only: e^yes / (e^yes + e^no); reward 1 iff score ≥ the run's
`reward.threshold` (`webrl.data.trajectory.orm_accepts`).
Training is plain SFT: next-token cross-entropy (whole vocabulary) of the answer token.

The prompt text is built by `webrl.data.prompts.build_orm_prompt`; this module scores built
prompt strings (`score_prompts`) and, when that builder is importable, raw parts (`score`).

A prompt over `max_length` tokens is re-built with less of its final page (`fit_orm_prompt`), as the
actor's are (`webrl.data.collate.StepTokenizer`): cut from the left like other prompts, it would lose
the judge's instructions, the intent and the action history (whose last line is the final answer)
before any of the page, and be judged without what it is judged on.

Both answer words must be single tokens of the tokenizer: the tiny tokenizer of
`webrl.modules.model_factory` adds "YES"/"NO" to its vocabulary; without `answer_words` the first
single-token pair of `ANSWER_WORD_CANDIDATES` is used (("Yes", "No") for SmolLM2).

Batch schema (`OutcomeRewardModule.collate` from (prompt, label) pairs):
- `input_ids`, `attention_mask`: (B, T) long, the prompt fitted to `max_length` (any padding side);
- `label`: (B,) float, 1 = success (target YES), 0 = failure (target NO).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchmetrics.classification import BinaryAccuracy, BinaryAUROC, BinaryPrecision, BinaryRecall
from torchmetrics.functional.classification import binary_accuracy
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from webrl.data.labels import OrmScorer, label_with_orm
from webrl.data.prompts import (
    ORM_SYSTEM_PROMPT,
    ORM_USER_TEMPLATE,
    build_orm_prompt,
    prompt_token_ids,
    shrink_page,
    uses_chat_template,
)
from webrl.data.trajectory import SUCCESS_THRESHOLD, Trajectory, is_success, orm_accepts
from webrl.modules.base import WebRLModule, require_model
from webrl.modules.critic import at_last_token
from webrl.modules.lm import encode_prompt, model_and_tokenizer, pad_batch, position_ids_from_mask
from webrl.modules.losses import orm_loss, yes_probability
from webrl.progress import progress_bar

ANSWER_WORD_CANDIDATES = (("YES", "NO"), ("Yes", "No"), (" YES", " NO"), (" Yes", " No"))
"""Answer pairs tried in order when none is given: the release's YES/NO first, then spellings that
pretrained BPE vocabularies (SmolLM2's, Llama's) hold as single tokens."""

_PART_MARKS = {name: f"<<webrl-orm-{name}>>" for name in ("intent", "actions", "page")}
"""Stand-ins rendered through the prompt builder to find where its three parts sit in a built prompt."""


def default_answer_words(tokenizer: PreTrainedTokenizerBase) -> tuple[str, str]:
    """The first pair of `ANSWER_WORD_CANDIDATES` whose two words are single tokens of `tokenizer`."""
    for yes, no in ANSWER_WORD_CANDIDATES:
        if _is_single_token(tokenizer, yes) and _is_single_token(tokenizer, no):
            return yes, no
    raise ValueError(
        f"{type(tokenizer).__name__} holds none of {ANSWER_WORD_CANDIDATES} as single tokens: pass answer_words"
    )


def _is_single_token(tokenizer: PreTrainedTokenizerBase, word: str) -> bool:
    """`word` encodes to one token that is not the unknown token."""
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    return len(ids) == 1 and ids[0] != tokenizer.unk_token_id


def single_token_id(tokenizer: PreTrainedTokenizerBase, word: str) -> int:
    """The id of `word` as one token, or an error that names the word and its split."""
    ids = tokenizer(word, add_special_tokens=False)["input_ids"]
    if not _is_single_token(tokenizer, word):
        pieces = tokenizer.convert_ids_to_tokens(ids)
        raise ValueError(
            f"ORM answer word {word!r} is {len(ids)} tokens {pieces} for {type(tokenizer).__name__}; "
            "choose answer_words that are single tokens (e.g. ('Yes', 'No') for SmolLM2)"
        )
    return ids[0]


def fit_orm_prompt(
    tokenizer: PreTrainedTokenizerBase,
    prompt: str,
    max_length: int | None,
    *,
    system_prompt: str = ORM_SYSTEM_PROMPT,
    user_template: str = ORM_USER_TEMPLATE,
) -> list[int]:
    """The ids of `prompt` within `max_length`, cutting only the end of its final page.

    A prompt over the limit that `build_orm_prompt` made (with this wording, in the tokenizer's form) is re-built
    from its parts with a page budget sized from the page's characters per token, down to no page at all; the
    instructions, the intent, the action history and the answer position are kept. A prompt the builder did not
    make, or one too long without its page, is cut from the left (`encode_prompt`): nothing else of it is known
    to be safe to cut.
    """
    ids = prompt_token_ids(tokenizer, prompt)
    if max_length is None or len(ids) <= max_length:
        return ids
    forms = (tokenizer, None) if uses_chat_template(tokenizer) else (None,)  # the chat form first, where there is one
    parts = next((found for form in forms if (found := _orm_parts(prompt, form, system_prompt, user_template))), None)
    if parts is None:
        return encode_prompt(tokenizer, prompt, max_length)
    intent, responses, page, form = parts

    def build(max_chars: int) -> str:
        return build_orm_prompt(
            intent,
            responses,
            page,
            max_chars=max_chars,
            chat_template_tokenizer=form,
            system_prompt=system_prompt,
            user_template=user_template,
        )

    bare = build(1)  # below the size of everything else, the builder drops the whole page
    bare_ids = prompt_token_ids(tokenizer, bare)
    if len(bare_ids) > max_length:
        return encode_prompt(tokenizer, bare, max_length)
    encode = partial(prompt_token_ids, tokenizer)
    return shrink_page(build, encode, prompt, ids, (bare, bare_ids), max_length)[1]


def _orm_parts(
    prompt: str, chat: Any, system_prompt: str, user_template: str
) -> tuple[str, list[str], str, Any] | None:
    """(intent, responses, final page, form) of `build_orm_prompt`'s `prompt` in the form of `chat`; None when the
    builder with this wording and form does not give `prompt` back from them.

    The builder is run on stand-ins (`_PART_MARKS`) to learn the text around each part. Were a part's text to hold
    the text around its neighbours, the history is taken as long as it can be: no response is mistaken for page,
    which is what fitting cuts. The parts are returned only if the builder gives `prompt` back from them.
    """
    skeleton = build_orm_prompt(
        _PART_MARKS["intent"],
        [_PART_MARKS["actions"]],
        _PART_MARKS["page"],
        max_chars=2**62,
        chat_template_tokenizer=chat,
        system_prompt=system_prompt,
        user_template=user_template,
    )
    if skeleton.count(_PART_MARKS["page"]) != 1 or any(skeleton.count(mark) > 1 for mark in _PART_MARKS.values()):
        return None
    placed = sorted((skeleton.index(mark), name) for name, mark in _PART_MARKS.items() if mark in skeleton)
    pattern, end = [], 0
    for start, name in placed:
        if start == end and end:  # two parts with nothing between them cannot be told apart
            return None
        pattern += [re.escape(skeleton[end:start]), f"(?P<{name}>.*)" if name == "actions" else f"(?P<{name}>.*?)"]
        end = start + len(_PART_MARKS[name])
    match = re.fullmatch("".join(pattern) + re.escape(skeleton[end:]), prompt, flags=re.DOTALL)
    if match is None:
        return None
    found = match.groupdict()
    # The history's lines are the responses with their newlines made "; ", so splitting them gives it back.
    intent, responses, page = found.get("intent", ""), found.get("actions", "").split("\n"), found["page"]
    rebuilt = build_orm_prompt(
        intent,
        responses,
        page,
        max_chars=len(prompt),
        chat_template_tokenizer=chat,
        system_prompt=system_prompt,
        user_template=user_template,
    )
    return (intent, responses, page, chat) if rebuilt == prompt else None


class OutcomeRewardModule(WebRLModule):
    """YES/NO verifier over a causal LM: `score_prompts` gives P(YES), `compute_loss` trains the answer token.

    `threshold` is the run's `reward.threshold`; in training it only decides the logged verdict metrics
    (`orm/acc` per batch; `orm/val_accuracy`, `orm/val_precision`, `orm/val_recall` per validation epoch).
    `system_prompt` and `user_template` are the judge's wording that `score` and `label` build prompts with
    (the web judge's by default, `webrl.data.prompts.build_orm_prompt`); an ORM of other tasks is given its own.
    """

    namespace = "orm"

    def __init__(
        self,
        model: str | os.PathLike | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        lr: float = 5e-6,
        weight_decay: float = 0.0,
        answer_words: tuple[str, str] | None = None,
        max_length: int | None = None,
        threshold: float = SUCCESS_THRESHOLD,
        system_prompt: str = ORM_SYSTEM_PROMPT,
        user_template: str = ORM_USER_TEMPLATE,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay)
        self.save_init_arguments(require_model(model, "OutcomeRewardModule"))
        model, tokenizer = model_and_tokenizer(model, tokenizer, None, "OutcomeRewardModule")
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.threshold = threshold
        self.system_prompt = system_prompt
        self.user_template = user_template
        self.answer_words = answer_words or default_answer_words(tokenizer)
        self.yes_id = single_token_id(tokenizer, self.answer_words[0])
        self.no_id = single_token_id(tokenizer, self.answer_words[1])
        # Epoch-level validation metrics (Lightning computes and resets the logged objects); no checkpoint state.
        self.val_metrics = nn.ModuleDict(
            {
                "accuracy": BinaryAccuracy(),
                "precision": BinaryPrecision(),
                "recall": BinaryRecall(),
                "auroc": BinaryAUROC(),
            }
        )
        self.train()  # from_pretrained returns eval mode; Lightning keeps whatever mode it finds

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Next-token logits after each row's last real token; (B, T) → (B, V).

        When every row ends at the last position (left padding, `collate`'s default) only that position's
        logits are computed: a (B, T, V) tensor of a 49k vocabulary over 1,500-token trajectories would cost
        gigabytes and a fifth of the forward pass, for one row of it.
        """
        ends_at_last = bool(attention_mask[:, -1].all())
        logits = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            use_cache=False,
            logits_to_keep=1 if ends_at_last else 0,
        ).logits  # (B, 1, V) or (B, T, V)
        return logits[:, -1] if ends_at_last else at_last_token(logits, attention_mask)  # (B, V)

    def compute_loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        loss, score = self._loss_and_score(batch)
        verdict, truth = self._verdicts(score, batch["label"])
        metrics = {
            "orm/loss": loss.detach(),
            "orm/acc": binary_accuracy(verdict, truth),
            "orm/score_mean": score.mean(),
        }
        return loss, metrics

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        """Loss per batch; accuracy, precision, recall (verdicts at `threshold`) and AUROC (P(YES)) over the epoch."""
        loss, score = self._loss_and_score(batch)
        verdict, truth = self._verdicts(score, batch["label"])
        for name, metric in self.val_metrics.items():
            metric.update(score if name == "auroc" else verdict, truth)
        self.log_validation({"orm/loss": loss.detach(), "orm/score_mean": score.mean(), **self.val_metrics}, batch)
        return loss

    def _loss_and_score(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """The answer token's loss and the detached P(YES) of each row; (), (B,)."""
        last_logits = self(batch["input_ids"], batch["attention_mask"])  # (B, V)
        loss = orm_loss(last_logits, batch["label"], self.yes_id, self.no_id)
        return loss, yes_probability(last_logits.detach(), self.yes_id, self.no_id)

    def _verdicts(self, score: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ORM's 0/1 verdicts (`orm_accepts` at `threshold`: P(YES) ≥ it) and the 0/1 truth; (B,) long each.

        Verdicts are passed as integers so that torchmetrics does not apply its own (strict, >) threshold.
        """
        return orm_accepts(score, self.threshold).long(), is_success(label).long()

    def score_prompts(self, prompts: Sequence[str], batch_size: int = 8) -> torch.Tensor:
        """P(YES) for built ORM prompts, batched and without gradients; returns (N,) on the CPU.

        ORM labelling runs it over every rollout: a bar on a terminal, a periodic line elsewhere (`progress_bar`).
        """
        device = next(self.model.parameters()).device
        was_training = self.training
        self.eval()
        out = []
        try:
            with torch.no_grad():
                starts = range(0, len(prompts), batch_size)
                for start in progress_bar(starts, desc="ORM scoring", unit="batch"):
                    rows = [self._fit(p) for p in prompts[start : start + batch_size]]
                    ids, mask = pad_batch(rows, self.tokenizer.pad_token_id)
                    last_logits = self(ids.to(device), mask.to(device))
                    out.append(yes_probability(last_logits, self.yes_id, self.no_id).cpu())
        finally:
            self.train(was_training)
        return torch.cat(out) if out else torch.zeros(0)

    def _fit(self, prompt: str) -> list[int]:
        """`fit_orm_prompt` of `prompt` with this ORM's tokenizer, `max_length` and wording."""
        return fit_orm_prompt(
            self.tokenizer,
            prompt,
            self.max_length,
            system_prompt=self.system_prompt,
            user_template=self.user_template,
        )

    def score(
        self,
        intents: Sequence[str],
        histories: Sequence[Sequence[str]],
        final_htmls: Sequence[str],
        batch_size: int = 8,
    ) -> torch.Tensor:
        """P(YES) from raw parts, through `webrl.data.prompts.build_orm_prompt` with this ORM's wording; (N,)."""
        if not len(intents) == len(histories) == len(final_htmls):
            raise ValueError(f"{len(intents)} intents, {len(histories)} histories, {len(final_htmls)} final pages")
        chat = self.tokenizer if uses_chat_template(self.tokenizer) else None
        prompts = [
            build_orm_prompt(
                intent,
                list(history),
                html,
                chat_template_tokenizer=chat,
                system_prompt=self.system_prompt,
                user_template=self.user_template,
            )
            for intent, history, html in zip(intents, histories, final_htmls, strict=True)
        ]
        return self.score_prompts(prompts, batch_size)

    def label(self, trajectories: Sequence[Trajectory], batch_size: int = 8) -> None:
        """Set each trajectory's `orm_score`, `orm_reward` and `outcome` from this ORM at its `threshold`.

        The library form of `python -m webrl.process stage=[1] reward_source=orm`: `label_with_orm` with this
        module's scorer, chat template and wording.
        """
        label_with_orm(
            trajectories,
            lambda prompts: self.score_prompts(prompts, batch_size).tolist(),
            threshold=self.threshold,
            chat_template_tokenizer=self.tokenizer if uses_chat_template(self.tokenizer) else None,
            system_prompt=self.system_prompt,
            user_template=self.user_template,
        )

    @staticmethod
    def collate(
        tokenizer: PreTrainedTokenizerBase,
        examples: Sequence[tuple[str, float]],
        max_length: int | None = None,
        padding_side: str = "left",
        *,
        system_prompt: str = ORM_SYSTEM_PROMPT,
        user_template: str = ORM_USER_TEMPLATE,
    ) -> dict[str, torch.Tensor]:
        """An ORM batch (see the module docstring) from (prompt, label) pairs, each prompt fitted to `max_length`
        (`fit_orm_prompt`, with the wording the prompts were built in)."""
        rows = [
            fit_orm_prompt(tokenizer, prompt, max_length, system_prompt=system_prompt, user_template=user_template)
            for prompt, _ in examples
        ]
        input_ids, attention_mask = pad_batch(rows, tokenizer.pad_token_id, padding_side)
        label = torch.tensor([float(y) for _, y in examples], dtype=torch.float32)  # (B,)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "label": label}


def orm_scorer(
    path: str | Path,
    *,
    batch_size: int = 4,
    answer_words: tuple[str, str] | None = None,
    max_length: int | None = None,
    device: torch.device | str = "cpu",
) -> tuple[OrmScorer, Any]:
    """P(YES) scorer of an ORM checkpoint directory (`OutcomeRewardModule`) on `device`, and the chat tokenizer its
    prompts need (None when the ORM's tokenizer has no chat template: the completion form).

    Callers pass their process's device (`fabric.device`): the module loads on the CPU, where a GPU run's labels
    stage would otherwise score every rollout with an 8B ORM.
    """
    orm = OutcomeRewardModule(path, answer_words=answer_words, max_length=max_length).to(device)

    def score(prompts: list[str]) -> list[float]:
        return orm.score_prompts(prompts, batch_size=batch_size).tolist()

    return score, orm.tokenizer if uses_chat_template(orm.tokenizer) else None
