"""Logged-in sessions for WebArena sites: storage states saved once per site, loaded into every episode.

Almost every WebArena(-Lite) task says `require_login: true` and names a `storage_state` such as
`./.auth/gitlab.reddit_state.json`: the episode must start logged in to those sites. A storage state is
the JSON Playwright writes with `context.storage_state()` (cookies, and localStorage per origin); the
browser pool hands it to `new_context`, so an episode starts with the session and shares it with no other.

`StorageStates` finds the state for a task in one directory (env.storage_state_dir): the file the task
names, by its base name, unless one of its cookies has expired, or else one `<site>_state.json` per site it
covers, merged. A task that names no file covers the sites of its own that have a login recipe: WebArena's
map tasks say `require_login` with no file, and map has no login. State files are replaced whole, never
rewritten in place, so a reader sees the old file or the new one; one that cannot be read is an error
naming it for an episode, and expired for `ensure_logged_in`, which logs in afresh. `log_in` logs in
to one site through its login form and saves that file; `ensure_logged_in` does it for each site whose
state is missing or expired (a session cookie past its expiry, or a check page that sends the browser
back to the login form), which is what `python -m webrl.env.login` runs before a run. Credentials come
from environment variables named per site (`WEBARENA_SHOPPING_USERNAME`, ...) and are never logged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError

from webrl.data.atomic_io import write_json_atomic
from webrl.data.trajectory import Task

log = logging.getLogger(__name__)

STATE_SUFFIX = "_state.json"


class LoginStateError(RuntimeError):
    """A task needs a logged-in session that no storage state provides; the message names the file and the fix."""


@dataclass(frozen=True)
class SiteLogin:
    """How to log in to one site: where its form is, how its fields are labelled, which page proves the session."""

    login_path: str
    """Path of the login form, appended to the site's URL from url_map."""
    username_label: str
    """Accessible label of the user-name field (what `page.get_by_label` finds)."""
    password_label: str
    """Accessible label of the password field."""
    submit_name: str
    """Accessible name of the submit button."""
    check_path: str
    """A page only a logged-in user sees; landing on the login form instead means the session is gone."""

    def credential_env(self, site: str) -> tuple[str, str]:
        """The environment variables holding this site's user name and password."""
        prefix = f"WEBARENA_{site.upper()}"
        return f"{prefix}_USERNAME", f"{prefix}_PASSWORD"


# The four WebArena sites that need a login (wikipedia and map do not); paths are relative to url_map.
WEBARENA_LOGINS: dict[str, SiteLogin] = {
    "shopping": SiteLogin("/customer/account/login/", "Email", "Password", "Sign In", "/wishlist/"),
    "shopping_admin": SiteLogin("", "Username", "Password", "Sign in", "/dashboard"),
    "reddit": SiteLogin("/login", "Username", "Password", "Log in", "/user/"),
    "gitlab": SiteLogin("/users/sign_in", "Username or email", "Password", "Sign in", "/-/profile"),
}


def sites_of_state_file(name: str) -> list[str]:
    """The sites a WebArena state file name covers: `./.auth/gitlab.reddit_state.json` -> [gitlab, reddit]."""
    base = Path(name).name
    stem = base[: -len(STATE_SUFFIX)] if base.endswith(STATE_SUFFIX) else Path(base).stem
    return [site for site in stem.split(".") if site]


def merge_states(states: list[dict[str, Any]]) -> dict[str, Any]:
    """One storage state holding every cookie and origin of `states` (a later duplicate wins)."""
    cookies: dict[tuple, dict[str, Any]] = {}
    origins: dict[str, dict[str, Any]] = {}
    for state in states:
        for cookie in state.get("cookies", []):
            cookies[(cookie.get("name"), cookie.get("domain"), cookie.get("path"))] = cookie
        for origin in state.get("origins", []):
            origins[origin["origin"]] = origin
    return {"cookies": list(cookies.values()), "origins": list(origins.values())}


def has_expired_cookie(state: dict[str, Any], now: float | None = None) -> bool:
    """True when a cookie with an expiry date (`expires` > 0; -1 is a session cookie) is past it."""
    now = time.time() if now is None else now
    return any(0 < cookie.get("expires", -1) <= now for cookie in state.get("cookies", []))


def _read_state(path: Path) -> dict[str, Any]:
    """The storage state saved at `path`; LoginStateError naming the file when it cannot be read or is not one.

    A file cut short (a login killed while saving, in an older version that wrote in place) or not UTF-8
    would otherwise surface as a bare decoding error naming no file.
    """
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise LoginStateError(f"cannot read the storage state {path}: {err}") from err
    if not isinstance(state, dict):
        raise LoginStateError(f"cannot read the storage state {path}: not a JSON object")
    return state


class StorageStates:
    """The storage states in one directory, looked up per task (a task without require_login gets none).

    `logins` (default `WEBARENA_LOGINS`) names the sites that have a login: of a task that names no state
    file, only those need a state.
    """

    def __init__(self, directory: str | Path, logins: dict[str, SiteLogin] | None = None) -> None:
        self.directory = Path(directory)
        self.logins = WEBARENA_LOGINS if logins is None else logins
        self._expired_warned: set[Path] = set()

    def path_for(self, site: str) -> Path:
        return self.directory / f"{site}{STATE_SUFFIX}"

    def for_task(self, task: Task) -> dict[str, Any] | None:
        """The storage state `task` starts with, or None when it needs no login.

        The file the task names is used when the directory holds it and none of its cookies has expired
        (WebArena's combined files, which `ensure_logged_in` never renews); otherwise the per-site files of
        the sites it covers are merged. A state that is missing or unreadable raises LoginStateError: an
        episode run logged out would be scored as the agent's failure.
        """
        if not task.require_login and not task.storage_state:
            return None
        if task.storage_state:
            named = self._named_state(task.storage_state)
            if named is not None:
                return named
            sites = sites_of_state_file(task.storage_state)
        else:
            sites = [site for site in task.sites if site in self.logins]
            if not sites:
                return None
        return merge_states([self._site_state(task, site) for site in sites])

    def _named_state(self, name: str) -> dict[str, Any] | None:
        """The state file `name` in the directory, or None when it is absent or holds an expired cookie."""
        path = self.directory / Path(name).name
        if not path.is_file():
            return None
        state = _read_state(path)
        if not has_expired_cookie(state):
            return state
        if path not in self._expired_warned:
            self._expired_warned.add(path)
            log.warning("%s holds an expired cookie: using the per-site state files instead", path)
        return None

    def _site_state(self, task: Task, site: str) -> dict[str, Any]:
        """The state file of `site`; LoginStateError naming it and the command that makes it when missing or bad."""
        path = self.path_for(site)
        remedy = f"create it with `python -m webrl.env.login --out {self.directory} --site {site}=URL`"
        if not path.is_file():
            raise LoginStateError(
                f"task {task.task_id} needs a logged-in {site} session but {path} does not exist; {remedy}"
            )
        try:
            return _read_state(path)
        except LoginStateError as err:
            raise LoginStateError(f"task {task.task_id} needs a logged-in {site} session: {err}; {remedy}") from err


async def _on_login_form(page: Any, base_url: str, login: SiteLogin) -> bool:
    """Whether the site shows its login form instead of `login.check_path` (the session is missing or gone)."""
    await page.goto(base_url + login.check_path, wait_until="domcontentloaded")
    return await page.get_by_label(login.password_label, exact=True).count() > 0


async def _submit_form(page: Any, site: str, login: SiteLogin, username: str, password: str) -> None:
    """Fill in and send the login form; LoginStateError, holding no credential, when the form will not take them.

    Playwright's error for a failed fill quotes the value it was filling in its call log, so that error is
    replaced by its first line (with any credential blanked), and not chained, lest a traceback print it.
    """
    try:
        await page.get_by_label(login.username_label, exact=True).fill(username)
        await page.get_by_label(login.password_label, exact=True).fill(password)
        await page.get_by_role("button", name=login.submit_name, exact=True).click()
        await page.wait_for_load_state("domcontentloaded")
    except PlaywrightError as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        for secret in (password, username):
            reason = reason.replace(secret, "***")
        raise LoginStateError(f"cannot fill in the login form of {site} at {page.url}: {reason}") from None


async def log_in(browser: Any, site: str, base_url: str, login: SiteLogin, path: str | Path) -> None:
    """Log in to `site` through its form in a fresh context and save that context's storage state at `path`.

    Raises LoginStateError when a credential variable is unset or the check page still shows the form.
    """
    user_var, password_var = login.credential_env(site)
    username, password = os.environ.get(user_var), os.environ.get(password_var)
    if not username or not password:
        raise LoginStateError(f"cannot log in to {site}: set {user_var} and {password_var}")
    base_url = base_url.rstrip("/")
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.goto(base_url + login.login_path, wait_until="domcontentloaded")
        await _submit_form(page, site, login, username, password)
        if await _on_login_form(page, base_url, login):
            raise LoginStateError(f"logging in to {site} at {base_url}{login.login_path} did not give a session")
        # Replaced whole: Playwright's own `path=` truncates the file first, and a reader would see it torn.
        write_json_atomic(path, await context.storage_state())
    finally:
        await context.close()


async def is_expired(browser: Any, state_path: Path, base_url: str, login: SiteLogin) -> bool:
    """True when the saved state is missing or unreadable, holds an expired cookie, or no longer opens the check page.

    An unreadable file (cut short by a killed login, say) counts as expired, so that logging in again replaces it.
    """
    if not state_path.is_file():
        return True
    try:
        state = _read_state(state_path)
    except LoginStateError as err:
        log.warning("%s; logging in again", err)
        return True
    if has_expired_cookie(state):
        return True
    context = await browser.new_context(storage_state=state)
    try:
        return await _on_login_form(await context.new_page(), base_url.rstrip("/"), login)
    finally:
        await context.close()


async def ensure_logged_in(
    browser: Any, sites: dict[str, str], directory: str | Path, logins: dict[str, SiteLogin] | None = None
) -> list[str]:
    """Log in again to each site (name -> base URL) whose state in `directory` is missing or expired.

    Returns the sites logged in afresh; a site with a valid state is left alone (its file untouched).
    """
    logins = WEBARENA_LOGINS if logins is None else logins
    states = StorageStates(directory, logins)
    renewed = []
    for site, base_url in sites.items():
        if site not in logins:
            raise LoginStateError(f"no login recipe for site {site!r}; known: {sorted(logins)}")
        path = states.path_for(site)
        if await is_expired(browser, path, base_url, logins[site]):
            await log_in(browser, site, base_url, logins[site], path)
            renewed.append(site)
    log.info("storage states in %s: renewed %s", directory, renewed or "none")
    return renewed


async def _main(args: argparse.Namespace) -> None:
    from webrl.env.browser import BrowserPool

    sites = dict(pair.split("=", 1) for pair in args.site)
    async with BrowserPool() as pool:
        renewed = await ensure_logged_in(await pool.browser(), sites, args.out)
    print(f"storage states in {args.out}: renewed {renewed or 'none'} of {sorted(sites)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Log in to WebArena sites once and save their storage states.")
    parser.add_argument("--out", required=True, help="directory for <site>_state.json (env.storage_state_dir)")
    parser.add_argument(
        "--site", action="append", required=True, help="site=URL, e.g. gitlab=http://host:8023 (repeatable)"
    )
    asyncio.run(_main(parser.parse_args()))
