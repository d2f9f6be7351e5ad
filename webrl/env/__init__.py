"""The browser environment: real Chromium episodes with WebRL's observations, actions and evaluators.

`BrowserPool` hands out `Episode`s (one isolated browser context each) for a `Task` on a
`SiteBackend` (`WebArenaBackend` for WebArena-format tasks, `MiniWoBBackend` for MiniWoB++, the
embedded sites in `webrl.env.sites`). Importing this package starts nothing.
"""

from webrl.env.actions import Action, ActionParseError, parse_action
from webrl.env.backend import SiteBackend, WebArenaBackend
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.chromium import ChromiumNotFoundError, find_chromium
from webrl.env.episode import Episode, EpisodeLimits, StepResult
from webrl.env.evaluators import EvalResult, EvaluationError, MissingHelperError, evaluate_task
from webrl.env.miniwob import MiniWoBBackend, miniwob_tasks
from webrl.env.observation import Observation, ObservationConfig, observe
from webrl.env.tasks import LocalFileUrlError, SuiteLoad, TaskConfigError, load_tasks, read_suite

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
    "MissingHelperError",
    "Observation",
    "ObservationConfig",
    "SiteBackend",
    "StepResult",
    "SuiteLoad",
    "TaskConfigError",
    "WebArenaBackend",
    "evaluate_task",
    "find_chromium",
    "load_tasks",
    "miniwob_tasks",
    "observe",
    "parse_action",
    "read_suite",
]
