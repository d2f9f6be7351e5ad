"""Score and label trajectories with WebRL's ORM under a judge's wording of your own, not the web judge's.

The ORM is a YES/NO verifier over a causal LM. Here it judges a text task ("add two numbers") with its own
system prompt and input template: it is trained for a few steps on right and wrong answers in that wording,
then labels new trajectories (`OutcomeRewardModule.label`, the library form of `python -m webrl.process`).

    python examples/orm_custom_judge.py --out /tmp/orm_judge
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from webrl.data import Step, Task, Trajectory, build_orm_prompt
from webrl.modules import OutcomeRewardModule, build_tiny_model

JUDGE = "You check sums. Answer YES if the final answer is the sum, NO otherwise."
TEMPLATE = "Question: {intent}\nSteps:\n{actions}\nFinal: {page}"


def trajectory(a: int, b: int, answer: int) -> Trajectory:
    task = Task(task_id=f"add-{a}-{b}-{answer}", intent=f"add {a} and {b}", sites=["math"], start_url="")
    step = Step(index=0, prompt=f"add {a} and {b}", observation=str(answer), response=f"answer {answer}")
    return Trajectory(task=task, steps=[step], status="exit")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for the tiny model (a temp dir)")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="orm_judge."))
    examples = [(a, b, a + b + wrong) for a in range(1, 5) for b in range(1, 5) for wrong in (0, 1)]

    def prompt(a: int, b: int, answer: int) -> str:
        return build_orm_prompt(
            f"add {a} and {b}", [f"answer {answer}"], str(answer), system_prompt=JUDGE, user_template=TEMPLATE
        )

    corpus = [prompt(*e) + " YES NO" for e in examples] * 4
    model_dir = build_tiny_model(out / "model", corpus, vocab_size=300, hidden_size=64, num_layers=1, num_heads=1)
    orm = OutcomeRewardModule(model_dir, lr=3e-3, system_prompt=JUDGE, user_template=TEMPLATE)

    optimizer = orm.configure_optimizers()
    labelled = [(prompt(a, b, answer), float(answer == a + b)) for a, b, answer in examples]
    for _ in range(30):
        loss, _ = orm.compute_loss(OutcomeRewardModule.collate(orm.tokenizer, labelled))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    new = [trajectory(2, 3, 5), trajectory(2, 3, 6)]
    orm.label(new)
    scores = orm.score([t.task.intent for t in new], [[t.steps[0].response] for t in new], ["5", "6"])
    assert torch.allclose(scores, torch.tensor([t.orm_score for t in new]))
    for t in new:
        print(f"{t.task.intent} -> {t.steps[0].response}: P(YES) = {t.orm_score:.3f}, outcome {t.outcome}")


if __name__ == "__main__":
    main()
