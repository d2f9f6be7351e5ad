"""The self-evolving curriculum (docs/method.md §3): which tasks each phase trains on.

It sits above the models, the environment and the engines (it asks a generator engine for tasks,
the critic for values, the site for start pages) and below the loop, which calls `propose_phase_tasks`.
"""
