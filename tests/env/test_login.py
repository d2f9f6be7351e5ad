"""Logged-in episodes: storage states saved by logging in through a form, loaded per task, renewed when stale.

A small server on 127.0.0.1 plays a WebArena site that needs a login: `/login` is a form whose POST
sets a `session` cookie (one hour) for the right password, and `/account` shows the account only to a
request carrying a session the server knows, redirecting anyone else to the form. The state files are
the ones Playwright writes; the episodes run in the real pool.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

import pytest
from env_helpers import page_task

from webrl.data.trajectory import Task
from webrl.env.backend import WebArenaBackend
from webrl.env.login import (
    LoginStateError,
    SiteLogin,
    StorageStates,
    ensure_logged_in,
    has_expired_cookie,
    merge_states,
    sites_of_state_file,
)

pytestmark = pytest.mark.timeout(300)

USER, PASSWORD = "alice", "s3cret"
FORM = """<!DOCTYPE html><html><body><h1>Sign in</h1><form method="post" action="/login">
<label for="u">Username</label><input id="u" name="username">
<label for="p">Password</label><input id="p" name="password" type="password">
<button type="submit">Log in</button></form></body></html>"""
# A form whose "Password" is a checkbox: Playwright's fill fails there, and its error quotes the value it was given.
ODD_FORM = FORM.replace('<input id="p" name="password" type="password">', '<input id="p" type="checkbox">')
ACCOUNT = "<!DOCTYPE html><html><body><h1>Welcome, alice</h1><p>Orders: 3</p></body></html>"
SHOP_LOGIN = SiteLogin("/login", "Username", "Password", "Log in", "/account")


class _Site(BaseHTTPRequestHandler):
    sessions: set[str] = set()

    def _send(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in {"Content-Type": "text/html", "Content-Length": str(len(data)), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _session(self) -> str | None:
        for part in self.headers.get("Cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == "session" and value in self.sessions:
                return value
        return None

    def do_GET(self) -> None:
        if self.path.startswith("/account"):
            if self._session():
                self._send(200, ACCOUNT)
            else:
                self._send(303, headers={"Location": "/login"})
        elif self.path.startswith("/odd-login"):
            self._send(200, ODD_FORM)
        else:
            self._send(200, FORM)

    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        if form.get("username") == [USER] and form.get("password") == [PASSWORD]:
            token = secrets.token_hex(8)
            self.sessions.add(token)
            cookie = f"session={token}; Max-Age=3600; Path=/; HttpOnly"
            self._send(303, headers={"Location": "/account", "Set-Cookie": cookie})
        else:
            self._send(200, FORM)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBARENA_SHOP_USERNAME", USER)
    monkeypatch.setenv("WEBARENA_SHOP_PASSWORD", PASSWORD)


def account_task(task_id: str = "login1", **fields: object) -> Task:
    return Task(task_id=task_id, intent="how many orders?", sites=["shop"], start_url="__SHOP__/account", **fields)


def first_observation(run, pool, task: Task, backend: WebArenaBackend) -> str:
    async def go() -> str:
        async with pool.episode(task, backend) as episode:
            return (await episode.reset()).html

    return run(go())


def test_logging_in_once_saves_a_state_that_episodes_start_logged_in_with(run, pool, site, credentials, tmp_path):
    renewed = run(ensure_logged_in(run(pool.browser()), {"shop": site}, tmp_path, {"shop": SHOP_LOGIN}))
    assert renewed == ["shop"]
    state = json.loads((tmp_path / "shop_state.json").read_text())
    assert [cookie["name"] for cookie in state["cookies"]] == ["session"]
    assert PASSWORD not in (tmp_path / "shop_state.json").read_text()

    logged_in = WebArenaBackend({"__SHOP__": site}, storage_states=StorageStates(tmp_path, {"shop": SHOP_LOGIN}))
    assert "Welcome, alice" in first_observation(run, pool, account_task(require_login=True), logged_in)
    # The same task without a state directory runs logged out: the server sends it to the form.
    logged_out = WebArenaBackend({"__SHOP__": site})
    assert "Welcome, alice" not in first_observation(run, pool, account_task(require_login=True), logged_out)
    # A task that needs no login gets no session even where states exist.
    assert "Welcome, alice" not in first_observation(run, pool, account_task(), logged_in)

    # A second run finds the state valid and leaves the file alone.
    before = (tmp_path / "shop_state.json").stat().st_mtime_ns
    assert run(ensure_logged_in(run(pool.browser()), {"shop": site}, tmp_path, {"shop": SHOP_LOGIN})) == []
    assert (tmp_path / "shop_state.json").stat().st_mtime_ns == before


def test_a_state_the_site_no_longer_accepts_or_with_an_expired_cookie_is_renewed(
    run, pool, site, credentials, tmp_path
):
    browser = run(pool.browser())
    run(ensure_logged_in(browser, {"shop": site}, tmp_path, {"shop": SHOP_LOGIN}))
    path = tmp_path / "shop_state.json"
    _Site.sessions.clear()  # the server forgot every session (a site reset)
    assert run(ensure_logged_in(browser, {"shop": site}, tmp_path, {"shop": SHOP_LOGIN})) == ["shop"]
    backend = WebArenaBackend({"__SHOP__": site}, storage_states=StorageStates(tmp_path, {"shop": SHOP_LOGIN}))
    assert "Welcome, alice" in first_observation(run, pool, account_task(require_login=True), backend)

    state = json.loads(path.read_text())
    state["cookies"][0]["expires"] = time.time() - 60
    path.write_text(json.dumps(state))
    assert run(ensure_logged_in(browser, {"shop": site}, tmp_path, {"shop": SHOP_LOGIN})) == ["shop"]
    assert not has_expired_cookie(json.loads(path.read_text()))


def test_a_wrong_password_or_unset_credentials_raise_and_save_nothing(run, pool, site, monkeypatch, tmp_path):
    browser = run(pool.browser())
    monkeypatch.delenv("WEBARENA_SHOP_USERNAME", raising=False)
    with pytest.raises(LoginStateError, match="set WEBARENA_SHOP_USERNAME and WEBARENA_SHOP_PASSWORD"):
        run(ensure_logged_in(browser, {"shop": site}, tmp_path, {"shop": SHOP_LOGIN}))
    monkeypatch.setenv("WEBARENA_SHOP_USERNAME", USER)
    monkeypatch.setenv("WEBARENA_SHOP_PASSWORD", "wrong")
    with pytest.raises(LoginStateError, match="did not give a session") as err:
        run(ensure_logged_in(browser, {"shop": site}, tmp_path, {"shop": SHOP_LOGIN}))
    assert "wrong" not in str(err.value)
    assert not (tmp_path / "shop_state.json").exists()


def test_a_form_that_will_not_take_the_credentials_is_named_without_them(run, pool, site, credentials, tmp_path):
    odd = SiteLogin("/odd-login", "Username", "Password", "Log in", "/account")
    with pytest.raises(LoginStateError, match="cannot fill in the login form of shop at .*/odd-login") as err:
        run(ensure_logged_in(run(pool.browser()), {"shop": site}, tmp_path, {"shop": odd}))
    printed = "".join(traceback.format_exception(err.value))  # what a crashed `python -m webrl.env.login` shows
    assert PASSWORD not in printed
    assert not (tmp_path / "shop_state.json").exists()


def _state(name: str, domain: str, expires: float = -1) -> dict:
    cookie = {"name": name, "value": "v", "domain": domain, "path": "/", "expires": expires}
    return {
        "cookies": [cookie],
        "origins": [{"origin": f"http://{domain}", "localStorage": [{"name": "k", "value": name}]}],
    }


def test_a_webarena_state_file_name_is_found_as_named_or_merged_from_per_site_states(tmp_path):
    assert sites_of_state_file("./.auth/gitlab.reddit_state.json") == ["gitlab", "reddit"]
    assert sites_of_state_file("./.auth/shopping_admin_state.json") == ["shopping_admin"]
    (tmp_path / "gitlab_state.json").write_text(json.dumps(_state("g", "gitlab.test")))
    (tmp_path / "reddit_state.json").write_text(json.dumps(_state("r", "reddit.test")))
    states = StorageStates(tmp_path)
    task = Task("7", "x", ["gitlab", "reddit"], "http://gitlab.test", storage_state="./.auth/gitlab.reddit_state.json")
    merged = states.for_task(task)
    assert sorted(cookie["name"] for cookie in merged["cookies"]) == ["g", "r"]
    assert sorted(origin["origin"] for origin in merged["origins"]) == ["http://gitlab.test", "http://reddit.test"]
    # A combined file under the task's own name wins over the per-site ones.
    (tmp_path / "gitlab.reddit_state.json").write_text(json.dumps(_state("both", "gitlab.test")))
    assert [cookie["name"] for cookie in states.for_task(task)["cookies"]] == ["both"]
    # require_login without a named file: one state per site of the task.
    assert states.for_task(Task("8", "x", ["reddit"], "http://r", require_login=True))["cookies"][0]["name"] == "r"
    assert states.for_task(Task("9", "x", ["reddit"], "http://r")) is None
    with pytest.raises(LoginStateError, match=r"task 10 needs a logged-in shopping session but .*shopping_state.json"):
        states.for_task(Task("10", "x", ["shopping"], "http://s", require_login=True))


def test_a_task_that_names_no_file_needs_states_only_for_its_sites_with_a_login(tmp_path):
    """WebArena's map tasks say `require_login` with `storage_state: null`, and map has no login recipe."""
    states = StorageStates(tmp_path)
    map_task = Task("30", "x", ["map"], "http://m", require_login=True, storage_state=None)
    assert states.for_task(map_task) is None
    assert WebArenaBackend({"__MAP__": "http://m"}, storage_states=states).storage_state(map_task) is None
    both = Task("31", "x", ["map", "shopping"], "http://m", require_login=True)
    with pytest.raises(LoginStateError, match=r"task 31 needs a logged-in shopping session but .*shopping_state\.json"):
        states.for_task(both)
    (tmp_path / "shopping_state.json").write_text(json.dumps(_state("s", "shop.test")))
    assert [cookie["name"] for cookie in states.for_task(both)["cookies"]] == ["s"]


def test_a_named_combined_file_with_an_expired_cookie_gives_way_to_the_per_site_files(tmp_path):
    """WebArena's auto_login writes `gitlab.reddit_state.json`; `ensure_logged_in` renews only the per-site files."""
    task = Task("7", "x", ["gitlab", "reddit"], "http://gitlab.test", storage_state="./.auth/gitlab.reddit_state.json")
    (tmp_path / "gitlab.reddit_state.json").write_text(json.dumps(_state("stale", "gitlab.test", expires=1.0)))
    states = StorageStates(tmp_path)
    with pytest.raises(LoginStateError, match=r"gitlab session but .*gitlab_state\.json does not exist"):
        states.for_task(task)
    (tmp_path / "gitlab_state.json").write_text(json.dumps(_state("g", "gitlab.test")))
    (tmp_path / "reddit_state.json").write_text(json.dumps(_state("r", "reddit.test", expires=time.time() + 3600)))
    assert sorted(cookie["name"] for cookie in states.for_task(task)["cookies"]) == ["g", "r"]


def test_a_renewed_state_replaces_the_file_whole(run, pool, site, credentials, tmp_path):
    """Playwright's `storage_state(path=)` truncates and rewrites the file in place, so a reader could see it torn;
    the file is replaced by a rename instead: a reader holding the old file still reads it whole."""
    browser = run(pool.browser())
    path = tmp_path / "shop_state.json"
    run(ensure_logged_in(browser, {"shop": site}, tmp_path, {"shop": SHOP_LOGIN}))
    before = path.read_text()
    with path.open(encoding="utf-8") as reader:
        _Site.sessions.clear()  # the next check finds the session gone: it logs in again
        assert run(ensure_logged_in(browser, {"shop": site}, tmp_path, {"shop": SHOP_LOGIN})) == ["shop"]
        assert reader.read() == before
    assert path.read_text() != before and json.loads(path.read_text())["cookies"][0]["name"] == "session"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shop_state.json"]


def test_a_truncated_state_is_an_error_naming_it_and_is_renewed(run, pool, site, credentials, tmp_path):
    """A login killed while saving leaves a file cut short: an episode is told which file, a new login replaces it."""
    path = tmp_path / "shop_state.json"
    path.write_text('{"cookies": [{"name": "session", "val')
    task = account_task(require_login=True, storage_state="./.auth/shop_state.json")
    with pytest.raises(LoginStateError, match=f"cannot read the storage state {path}"):
        StorageStates(tmp_path).for_task(task)
    assert run(ensure_logged_in(run(pool.browser()), {"shop": site}, tmp_path, {"shop": SHOP_LOGIN})) == ["shop"]
    backend = WebArenaBackend({"__SHOP__": site}, storage_states=StorageStates(tmp_path))
    assert "Welcome, alice" in first_observation(run, pool, task, backend)


def test_merging_keeps_the_later_duplicate_and_expiry_ignores_session_cookies():
    merged = merge_states([_state("a", "x.test"), _state("a", "x.test", expires=5.0)])
    assert [cookie["expires"] for cookie in merged["cookies"]] == [5.0]
    assert has_expired_cookie(merged, now=5.0) and not has_expired_cookie(merged, now=4.9)
    assert not has_expired_cookie(_state("s", "x.test", expires=-1), now=1e12)


def test_an_and_start_opens_every_tab_and_the_agent_stays_in_the_first(run, pool, pages):
    task = page_task("actions.html")
    task.start_url = "__PAGES__/actions.html |AND| __PAGES__/page2.html"
    backend = WebArenaBackend({"__PAGES__": pages.url})

    async def go() -> tuple[list[str], str, str]:
        async with pool.episode(task, backend) as episode:
            await episode.reset()
            tabs = [page.url for page in episode.context.pages]
            result = await episode.step('do(action="Scroll Down")')
            return tabs, episode.page.url, result.observation.url

    tabs, page_url, observed = run(go())
    assert tabs == [f"{pages.url}/actions.html", f"{pages.url}/page2.html"]
    assert page_url == observed == f"{pages.url}/actions.html"
