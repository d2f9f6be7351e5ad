"""The browser environment: real Chromium episodes with WebRL's observations, actions and evaluators.

`BrowserPool` hands out `Episode`s (one isolated browser context each) for a `Task` on a
`SiteBackend` (`WebArenaBackend` for WebArena-format tasks, `MiniWoBBackend` for MiniWoB++, the
embedded sites in `webrl.env.sites`). `WebEnv` wraps them as a synchronous Gymnasium environment.

Importing this package starts nothing; it registers the Gymnasium ids `webrl/embedded-v0`,
`webrl/miniwob-v0` and `webrl/webarena-v0` (entry points by name: `webrl.env.gym_env` loads on the
first `gymnasium.make`).
"""

from gymnasium.envs.registration import register, registry

from webrl.env.actions import Action, ActionParseError, parse_action
from webrl.env.backend import SiteBackend, WebArenaBackend
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.chromium import ChromiumNotFoundError, find_chromium
from webrl.env.episode import Episode, StepResult
from webrl.env.evaluators import EvalResult, EvaluationError, MissingHelperError, evaluate_task
from webrl.env.limits import EpisodeLimits
from webrl.env.miniwob import MiniWoBBackend, miniwob_tasks
from webrl.env.observation import Observation, ObservationConfig, observe
from webrl.env.scripted_policy import MiniWoBScriptedPolicy, PageElement, page_elements
from webrl.env.tasks import LocalFileUrlError, SuiteLoad, TaskConfigError, load_tasks, read_suite
from webrl.lazy_exports import lazy_exports

__all__ = [
    "Action",
    "ActionParseError",
    "BrowserConfig",
    "BrowserPool",
    "ChromiumNotFoundError",
    "Episode",
    "EpisodeLimits",
    "EvalResult",
    "EvaluationError",
    "LocalFileUrlError",
    "MiniWoBBackend",
    "MiniWoBScriptedPolicy",
    "MissingHelperError",
    "Observation",
    "ObservationConfig",
    "PageElement",
    "SiteBackend",
    "StepResult",
    "SuiteLoad",
    "TaskConfigError",
    "WebArenaBackend",
    "WebEnv",
    "evaluate_task",
    "find_chromium",
    "load_tasks",
    "miniwob_tasks",
    "observe",
    "page_elements",
    "parse_action",
    "read_suite",
]

for _suite in ("embedded", "miniwob", "webarena"):
    if f"webrl/{_suite}-v0" not in registry:
        register(id=f"webrl/{_suite}-v0", entry_point="webrl.env.gym_env:WebEnv", kwargs={"suite": _suite})
del _suite

# WebEnv loads on first use, like the registered entry points, so that importing the package stays light.
_EXPORTS = {"WebEnv": "webrl.env.gym_env"}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
