"""webrl: WebRL (arXiv 2411.02337) on Lightning, as a library and as recipes.

The public names live in the subpackages, each with its `__all__` (listed in docs/api.md):
`webrl.data` (tasks, trajectories, prompts, replay buffer, DataModule), `webrl.env` (browser episodes,
evaluators, the Gymnasium environments), `webrl.inference` (engines, rollouts) and `webrl.modules`
(actor, critic, ORM and SFT modules, losses, model builders). Importing `webrl` loads none of them.
"""
