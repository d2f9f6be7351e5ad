"""Find a Chromium to drive, without downloading one.

Playwright normally downloads its own browser build; many machines (CI images, clusters without
internet) cannot, but have a distribution Chromium. The search order is: an explicit path, the
`WEBRL_CHROMIUM` environment variable, a system Chromium on PATH or in /usr/bin, then a browser
that `playwright install` already put in its cache. When none exists the error says exactly what
to run.

For headless runs the "old headless shell" build (Debian package `chromium-headless-shell`) is
preferred when installed, as Playwright itself does: it is the same Blink, without the full
browser's profile services, and a new browser context costs about 4x less CPU in it (measured:
0.24 s vs 1.1 s of CPU per MiniWoB++ episode on this project's 2-core CI machine).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

ENV_VAR = "WEBRL_CHROMIUM"
SYSTEM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
SYSTEM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/lib/chromium/chromium")
# The binary itself first: Debian's /usr/bin wrapper keeps a shell process alive as its parent.
HEADLESS_SHELL_PATHS = ("/usr/lib/chromium/chromium-headless-shell", "/usr/bin/chromium-headless-shell")
HEADLESS_SHELL_NAMES = ("chromium-headless-shell",)
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
"""The features Playwright's launcher disables (its chromiumSwitches, Playwright 1.65). Chromium keeps only the
last `--disable-features` on its command line, and Playwright puts the launch's own args after its switches, so a
launch that disables a feature must name these again or turn them back on (tests/env/test_chromium.py checks it)."""
DISABLED_FEATURES = (
    # A new RenderFrameHost for every cross-document navigation, where Chromium otherwise reuses the frame's:
    # a third of the CPU of a navigation, and an episode makes two (its start page, and about:blank in a
    # reused context's wipe). Nothing a page can see or keep depends on it: each document is new either way.
    "RenderDocument",
    # Parsing a large script on a worker thread while it downloads. A streamed script skips V8's in-memory cache
    # of compiled scripts, so every page load parsed the same libraries again (MiniWoB++'s d3 and ui_utils: 4.6 ms
    # of CPU per step); parsed on the main thread they come from the cache. Scripts still run when and in the
    # order they did. About 5 % less CPU per env step.
    "ScriptStreaming",
)
"""Features webrl turns off, in the one `--disable-features` switch with PLAYWRIGHT_DISABLED_FEATURES."""
PLAYWRIGHT_ENABLED_FEATURES = (
    *(() if os.environ.get("PLAYWRIGHT_LEGACY_SCREENSHOT") else ("CDPScreenshotNewSurface",)),
    "SkipListAccountsWithoutGaiaCookies",
)
"""The features Playwright's launcher enables (Playwright 1.65; the first unless PLAYWRIGHT_LEGACY_SCREENSHOT is set,
as there). Chromium keeps only the last `--enable-features` too, so webrl's switch names them again."""
ENABLED_FEATURES = (
    # The network service on a thread of the browser process instead of in a process of its own: every request
    # and every cookie or storage call then skips a hop between processes. Each context keeps its own network
    # context (cookies, cache) as before. About 2 ms less CPU per env step alone; with --in-process-gpu, see there.
    "NetworkServiceInProcess2",
)
"""Features webrl turns on, in the one `--enable-features` switch with PLAYWRIGHT_ENABLED_FEATURES."""
# Flags that make a headless Chromium quiet and robust in containers (measured on this project's CI image).
# The sandbox is not among them: it stays on unless `sandbox_unavailable_reason` or the launch says otherwise.
DEFAULT_LAUNCH_ARGS = (
    "--disable-gpu",
    # Without a GPU, Chromium still starts a GPU process, for the compositor that draws the pages' frames in
    # software; in-process it runs on a thread of the browser process and each frame skips a hop between
    # processes. Screenshots are drawn as before. About 1 ms less CPU per env step alone; together with
    # NetworkServiceInProcess2, which leaves Chromium one process plus its renderers, 8 % less (bench/env_profile.py's
    # workload, MiniWoB++ at concurrency 16 in reused contexts: 86.4 -> 79.7 ms/step, 6 interleaved A/B pairs).
    "--in-process-gpu",
    # V8's garbage collector on the thread that runs the page's scripts, without helper threads: the same
    # collections, without the hand-over and synchronisation between threads. The renderers then use 1.9 ms less CPU
    # per env step (5 of 6 interleaved A/B pairs lower; 2.6 ms, 3 %, less in all). Measured where the env is
    # CPU-bound (2 cores, 16 episodes); with idle cores the helpers would rather shorten the pauses.
    "--js-flags=--single-threaded-gc",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-features=" + ",".join(PLAYWRIGHT_DISABLED_FEATURES + DISABLED_FEATURES),
    "--enable-features=" + ",".join(PLAYWRIGHT_ENABLED_FEATURES + ENABLED_FEATURES),
)
INSTALL_HINT = (
    "install one with `python -m webrl.env.setup_browser` (uses apt-get as root, else prints the command), "
    "or `sudo apt-get install -y chromium-headless-shell chromium`, "
    "or `python -m playwright install chromium` where downloads work; "
    f"or point {ENV_VAR} at a Chromium/Chrome binary"
)


def sandbox_unavailable_reason() -> str | None:
    """Why Chromium must run without its sandbox here before even trying, or None.

    Chromium refuses to sandbox itself for root (crbug.com/638180). Elsewhere the sandbox is tried,
    and a launch that fails for want of it (no user namespaces, no setuid helper) is retried without.
    """
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return "running as root, which Chromium refuses to sandbox"
    return None


def is_sandbox_failure(launch_error: str) -> bool:
    """Whether a launch failed because the sandbox could not start (Playwright's summary, or Chromium's own words)."""
    markers = ("Chromium sandboxing failed", "No usable sandbox", "crbug.com/638180", "crbug.com/357670")
    return any(marker in launch_error for marker in markers)


class ChromiumNotFoundError(FileNotFoundError):
    """No usable Chromium; the message says how to get one."""


def _executable(path: str | os.PathLike) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def playwright_managed_chromium(headless: bool = True) -> str | None:
    """The newest Chromium in Playwright's browser cache, if `playwright install` put one there."""
    root = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or Path.home() / ".cache" / "ms-playwright")
    if not root.is_dir():
        return None
    patterns = ["chromium-*/chrome-linux*/chrome"]
    if headless:
        patterns.insert(0, "chromium_headless_shell-*/chrome-*/headless_shell")
    for pattern in patterns:
        found = [p for p in root.glob(pattern) if _executable(p)]
        if found:
            return str(max(found, key=lambda p: int(p.parts[len(root.parts)].rsplit("-", 1)[-1] or 0)))
    return None


def _first_executable(paths: tuple[str, ...], names: tuple[str, ...]) -> str | None:
    for path in paths:
        if _executable(path):
            return path
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def find_chromium(explicit: str | os.PathLike | None = None, headless: bool = True) -> str:
    """Path of the Chromium to launch; raise ChromiumNotFoundError with install instructions.

    With `headless`, a headless-shell build is preferred over the full browser (module docstring).
    """
    if explicit:
        if not _executable(explicit):
            raise ChromiumNotFoundError(f"browser executable_path {str(explicit)!r} is not an executable file")
        return str(explicit)
    from_env = os.environ.get(ENV_VAR)
    if from_env:
        if not _executable(from_env):
            raise ChromiumNotFoundError(f"{ENV_VAR}={from_env!r} is not an executable file")
        return from_env
    found = _first_executable(HEADLESS_SHELL_PATHS, HEADLESS_SHELL_NAMES) if headless else None
    found = found or _first_executable(SYSTEM_PATHS, SYSTEM_NAMES) or playwright_managed_chromium(headless)
    if found:
        return found
    raise ChromiumNotFoundError(
        f"no Chromium found (checked {ENV_VAR}, PATH, /usr/bin, Playwright's cache); {INSTALL_HINT}"
    )
