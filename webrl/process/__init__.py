"""`python -m webrl.process`: the release's `process_data.py` on this project's files (see `webrl.process.cli`).

It loads models (the ORM for stage 1's labels, the actor for stage 2's replay filter), so it sits above
`webrl.data`, which only holds the records and the logic that takes those models as callables.
"""
