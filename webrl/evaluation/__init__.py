"""Evaluation statistics: how sure a success rate is, and whether two checkpoints really differ.

A held-out evaluation of a few dozen tasks at ~10% success moves by more than a point per task, so
a rate alone cannot tell two settings apart. `stats` gives the Wilson interval of a rate and the
exact McNemar test of two checkpoints on the same tasks; `breakdown` gives rates per site and per
template (templates seen in training vs test-only); `report` writes them as markdown and JSON;
`run_results` reads a run directory's final evaluation and `learning_table` sets several methods'
side by side, each paired with SFT; `phase_gain` pairs a WebRL run's last phase with its phase 0.
Nothing here imports torch, Playwright or vLLM, so it runs anywhere the result files are.
"""
