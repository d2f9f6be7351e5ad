"""Action parser on adversarial responses: the slowest parse, since every episode waits on it.

The parser runs in the rollout's process for every step, so a degenerate model output must not
stall it. Each case below is a response crafted to be expensive (deep nesting, a call start every
three characters, overlapping calls in comments, unterminated strings, a megabyte over the cap) or
a realistic one for scale; each is parsed `--repeats` times. The worst case is the case with the
slowest median parse; its slowest single parse is reported beside it (a busy machine adds noise).
Figures are printed and written to bench/results/parser.json.

    python bench/parser.py
    python bench/parser.py --repeats 101
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from webrl.env.actions import MAX_RESPONSE_CHARS, ActionParseError, parse_action

RESULTS = Path(__file__).resolve().parent / "results" / "parser.json"
CAP = MAX_RESPONSE_CHARS


def _fill(unit: str, budget: int = CAP) -> str:
    """`unit` repeated as often as fits in `budget` characters."""
    return unit * (budget // len(unit))


CASES: dict[str, Callable[[], str]] = {
    "realistic": lambda: '# Element: the "Add to cart" button\n# Note: price is $12\ndo(action="Click", element="37")',
    "nested_do_400": lambda: "do(" * 400 + ")" * 400,
    "nested_do_cap": lambda: _fill("do(", CAP // 2) + _fill(")", CAP // 2),
    "call_start_every_3_chars": lambda: _fill("do("),
    "exit_start_every_5_chars": lambda: _fill("exit("),
    "open_quotes": lambda: _fill('do(action="'),
    "alternating_quotes": lambda: _fill("do(a='do(b=\""),
    "unterminated_triple_quotes": lambda: _fill('exit(message="""'),
    "calls_in_comments": lambda: "do(\n" + _fill("# do(\n", CAP - 20) + 'x="1")',
    "parentheses_only": lambda: "do(" + _fill(")", CAP - 3),
    "long_valid_argument": lambda: 'do(action="Type", argument="' + "x" * (CAP - 60) + '", element="1")',
    "long_valid_after_prose": lambda: _fill("do you (want) it? ", CAP - 40) + 'do(action="Click", element="3")',
    "nul_bytes": lambda: _fill('do(action="\x00", element=\x00'),
    "megabyte_over_cap": lambda: 'do(action="Type", argument="' + "x" * (1 << 20) + '", element="1")',
}


def time_parses(text: str, repeats: int) -> tuple[list[float], str]:
    """Each of `repeats` parses in ms, and how the response was answered (action or error, clipped)."""
    times = []
    outcome = ""
    for _ in range(repeats):
        start = time.perf_counter()
        try:
            outcome = f"action {parse_action(text).name}"
        except ActionParseError as err:
            outcome = f"rejected: {str(err)[:100]}"
        times.append((time.perf_counter() - start) * 1000)
    return times, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=21, help="parses per case")
    args = parser.parse_args()

    cases = {}
    for name, make in CASES.items():
        text = make()
        times, outcome = time_parses(text, args.repeats)
        median, slowest = statistics.median(times), max(times)
        cases[name] = {
            "chars": len(text),
            "median_ms": round(median, 3),
            "slowest_ms": round(slowest, 3),
            "outcome": outcome,
        }
        print(f"{name:28s} {len(text):>9,} chars {median:8.3f} ms (slowest {slowest:7.3f})  {outcome[:60]}")
    worst = max(cases, key=lambda name: cases[name]["median_ms"])
    worst_case = {"case": worst, "median_ms": cases[worst]["median_ms"], "slowest_ms": cases[worst]["slowest_ms"]}
    print(f"worst case: {worst}, median {worst_case['median_ms']:.3f} ms, slowest {worst_case['slowest_ms']:.3f} ms")
    report = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "max_response_chars": CAP,
        "repeats": args.repeats,
        "worst_case": worst_case,
        "cases": cases,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
