"""OutcomeRewardModule: P(YES) scoring, answer-token checks, fitting long prompts, and overfitting a labelled set."""

from __future__ import annotations

import shutil

import pytest
import torch
from sample_records import chatml_tokenizer
from torch.utils.data import DataLoader

from webrl.data.prompts import build_orm_prompt
from webrl.modules.lm import encode_prompt, load_model_and_tokenizer
from webrl.modules.losses import yes_probability
from webrl.modules.orm import OutcomeRewardModule, default_answer_words, orm_scorer, single_token_id

LABELLED = [
    (build_orm_prompt("buy the red shirt", ['do(action="Click", element="2")'], "<p>Order placed</p>"), 1.0),
    (build_orm_prompt("buy the red shirt", ['do(action="Click", element="1")'], "<p>Home</p>"), 0.0),
    (build_orm_prompt("find the cheapest laptop", ['exit(message="399")'], "<li>laptop 399</li>"), 1.0),
    (build_orm_prompt("find the cheapest laptop", ['exit(message="999")'], "<li>laptop 399</li>"), 0.0),
    (build_orm_prompt("open the forum", ['do(action="Click", element="4")'], "<h1>Forum</h1>"), 1.0),
    (build_orm_prompt("open the forum", ['do(action="Scroll Down")'], "<h1>Shop</h1>"), 0.0),
]


def test_answer_words_must_be_single_tokens(tiny):
    _, tokenizer = tiny
    assert single_token_id(tokenizer, "YES") == tokenizer.convert_tokens_to_ids("YES")
    with pytest.raises(ValueError, match="'Maybe so'"):
        single_token_id(tokenizer, "Maybe so")


def word_tokenizer(words: list[str]):
    """A whitespace word-level tokenizer holding exactly `words` (plus [UNK]): a vocabulary we control."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["[UNK]", *words])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_answer_words_default_to_the_first_single_token_pair(tiny):
    assert default_answer_words(tiny[1]) == ("YES", "NO")
    assert default_answer_words(word_tokenizer(["Yes", "No", "maybe"])) == ("Yes", "No")
    with pytest.raises(ValueError, match="answer_words"):
        default_answer_words(word_tokenizer(["maybe"]))


def test_score_is_yes_over_yes_plus_no_at_the_last_token(tiny):
    model, tokenizer = tiny
    orm = OutcomeRewardModule(model, tokenizer)
    prompts = [prompt for prompt, _ in LABELLED[:3]]
    scores = orm.score_prompts(prompts, batch_size=2)
    for prompt, score in zip(prompts, scores, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([encode_prompt(tokenizer, prompt)])).logits[0, -1]  # (V,)
        yes, no = logits[orm.yes_id], logits[orm.no_id]
        assert score.item() == pytest.approx(torch.sigmoid(yes - no).item(), abs=1e-5)
    batch = OutcomeRewardModule.collate(tokenizer, [(p, 0.0) for p in prompts], padding_side="right")
    with torch.no_grad():
        right = torch.softmax(orm(batch["input_ids"], batch["attention_mask"])[:, [orm.yes_id, orm.no_id]], -1)[:, 0]
    assert torch.allclose(right, scores, atol=1e-5)


def test_orm_scorer_of_a_checkpoint_reads_p_yes_at_the_answer_position(tiny_dir):
    score, chat = orm_scorer(tiny_dir, batch_size=2)
    assert chat is None  # the tiny tokenizer has no chat template: prompts take the completion form
    prompts = [prompt for prompt, _ in LABELLED[:3]]
    model, tokenizer = load_model_and_tokenizer(tiny_dir)
    orm = OutcomeRewardModule(model, tokenizer)
    assert score(prompts) == pytest.approx(orm.score_prompts(prompts, batch_size=1).tolist(), abs=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_orm_scorer_scores_on_the_device_it_is_given(tiny_dir):
    prompts = [prompt for prompt, _ in LABELLED[:3]]
    on_cpu, _ = orm_scorer(tiny_dir, batch_size=2)
    on_gpu, _ = orm_scorer(tiny_dir, batch_size=2, device="cuda")
    assert on_gpu(prompts) == pytest.approx(on_cpu(prompts), abs=1e-4)


def test_score_builds_the_prompt_from_parts(tiny):
    model, tokenizer = tiny
    orm = OutcomeRewardModule(model, tokenizer)
    from_parts = orm.score(["buy the red shirt"], [['do(action="Click", element="2")']], ["<p>Order placed</p>"])
    assert torch.allclose(from_parts, orm.score_prompts([LABELLED[0][0]]), atol=1e-6)


def test_trainer_fit_overfits_a_labelled_set(tiny, trainer_factory):
    model, tokenizer = tiny
    orm = OutcomeRewardModule(model, tokenizer, lr=3e-3)
    loader = DataLoader(
        LABELLED, batch_size=len(LABELLED), collate_fn=lambda rows: OutcomeRewardModule.collate(tokenizer, rows)
    )
    trainer = trainer_factory(max_steps=40)
    trainer.fit(orm, loader)
    assert {"orm/loss", "orm/acc"} <= set(trainer.callback_metrics)
    scores = orm.score_prompts([prompt for prompt, _ in LABELLED])
    labels = torch.tensor([label for _, label in LABELLED])
    assert torch.equal((scores >= 0.5).float(), labels)  # 100% accuracy on the training set
    _, metrics = orm.compute_loss(OutcomeRewardModule.collate(tokenizer, LABELLED))
    assert metrics["orm/acc"].item() == 1.0


def test_accuracy_counts_a_yes_at_the_configured_threshold(tiny):
    model, tokenizer = tiny
    batch = OutcomeRewardModule.collate(tokenizer, LABELLED[:3])  # labels 1, 0, 1
    _, says_yes = OutcomeRewardModule(model, tokenizer, threshold=0.0).compute_loss(batch)
    _, says_no = OutcomeRewardModule(model, tokenizer, threshold=1.0).compute_loss(batch)
    assert says_yes["orm/acc"].item() == pytest.approx(2 / 3)
    assert says_no["orm/acc"].item() == pytest.approx(1 / 3)


def _hand_auroc(scores: list[float], labels: list[int]) -> float:
    """Share of (positive, negative) pairs the scores order correctly, ties counting half."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (len(pos) * len(neg))


def test_validation_logs_epoch_accuracy_precision_recall_and_auroc(tiny, trainer_factory):
    model, tokenizer = tiny
    orm = OutcomeRewardModule(model, tokenizer)
    scores = orm.score_prompts([prompt for prompt, _ in LABELLED]).tolist()
    ranked = sorted(scores)
    threshold = (ranked[2] + ranked[3]) / 2  # three of the six above it: both verdicts occur whatever the weights
    orm.threshold = threshold
    labels = [int(label) for _, label in LABELLED]
    verdicts = [int(score >= threshold) for score in scores]
    tp = sum(v and y for v, y in zip(verdicts, labels, strict=True))
    loader = DataLoader(LABELLED, batch_size=4, collate_fn=lambda rows: OutcomeRewardModule.collate(tokenizer, rows))
    logged = trainer_factory(max_steps=1).validate(orm, loader, verbose=False)[0]  # two batches: 4 + 2
    assert logged["orm/val_accuracy"] == pytest.approx(sum(v == y for v, y in zip(verdicts, labels, strict=True)) / 6)
    assert logged["orm/val_precision"] == pytest.approx(tp / 3)
    assert logged["orm/val_recall"] == pytest.approx(tp / 3)
    assert logged["orm/val_auroc"] == pytest.approx(_hand_auroc(scores, labels), abs=1e-6)
    assert not any("val_metrics" in key for key in orm.state_dict())  # checkpoints hold weights only


INTENT = "buy the red shirt"
ANSWER = 'exit(message="The order total is 42 dollars")'
RESPONSES = ['# Element: the add to cart button\ndo(action="Click", element="2")', f"# Note: bought\n{ANSWER}"]
LONG_PAGE = '<html><button id="2">Add to cart</button></html>\n' * 60


def _fitted_text(tokenizer, chat, extra_tokens: int = 40, **wording) -> tuple[str, str, int]:
    """An ORM prompt over its limit (its page-less form plus `extra_tokens`), the text of its fitted ids, and the
    limit; the ids fitted by `OutcomeRewardModule.collate` (which `score_prompts` shares)."""
    prompt = build_orm_prompt(INTENT, RESPONSES, LONG_PAGE, chat_template_tokenizer=chat, **wording)
    bare = build_orm_prompt(INTENT, RESPONSES, LONG_PAGE, max_chars=1, chat_template_tokenizer=chat, **wording)
    limit = len(tokenizer(bare)["input_ids"]) + extra_tokens
    assert len(tokenizer(prompt)["input_ids"]) > limit
    batch = OutcomeRewardModule.collate(tokenizer, [(prompt, 1.0)], max_length=limit, **wording)
    ids = batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()
    assert len(ids) <= limit
    return prompt, tokenizer.decode(ids), limit


@pytest.mark.parametrize("form", ["completion", "chat"])
def test_an_over_long_prompt_loses_the_end_of_its_page_not_its_intent_or_answer(tiny, form):
    """Cut from the left, it would lose the instructions, the intent and the history (holding the final answer)."""
    if form == "chat":
        tokenizer = chatml_tokenizer([build_orm_prompt(INTENT, RESPONSES, LONG_PAGE)] * 4, vocab_size=400)
        chat = tokenizer
    else:
        tokenizer, chat = tiny[1], None
    prompt, text, _ = _fitted_text(tokenizer, chat)
    for kept in ("You judge whether", INTENT, "42 dollars", "Add to cart"):
        assert kept in text, kept
    assert text.count("Add to cart") < prompt.count("Add to cart"), "the page is cut"
    assert text.endswith(prompt[-30:]), "the prompt still ends where the answer comes"


def test_scoring_fits_a_prompt_as_training_does_in_the_judge_s_own_wording(tiny):
    model, tokenizer = tiny
    wording = {"system_prompt": "Judge the agent.", "user_template": "Goal: {intent}\nDid: {actions}\nSaw: {page}"}
    prompt, text, limit = _fitted_text(tokenizer, None, **wording)
    assert "Judge the agent." in text and INTENT in text and "42 dollars" in text
    orm = OutcomeRewardModule(model, tokenizer, max_length=limit, **wording)
    batch = OutcomeRewardModule.collate(tokenizer, [(prompt, 1.0)], max_length=limit, **wording)
    with torch.no_grad():
        expected = yes_probability(orm(batch["input_ids"], batch["attention_mask"]), orm.yes_id, orm.no_id)
    assert torch.allclose(orm.score_prompts([prompt]), expected, atol=1e-6)


def test_a_prompt_the_builder_did_not_make_is_still_cut_from_the_left(tiny):
    _, tokenizer = tiny
    prompt = "Is this right? " + LONG_PAGE
    batch = OutcomeRewardModule.collate(tokenizer, [(prompt, 1.0)], max_length=50)
    assert batch["input_ids"][0].tolist() == encode_prompt(tokenizer, prompt, 50)


def test_a_model_directory_without_a_tokenizer_is_named_in_the_error(tiny_dir, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_dir / name, model / name)
    with pytest.raises(ValueError, match=f"{model}: no loadable tokenizer"):
        OutcomeRewardModule(model)
