"""The host allowlist holds for every way a page can leave its task's sites, redirects included.

Two servers started here: the task's site on 127.0.0.1 and an outside host on 127.0.0.2 (another
loopback address, so nothing leaves the machine). The site's pages try each way out: an HTTP
redirect (of the start page, of a link, of a fetch, to http and to https), a meta refresh, a
script setting `location`, a form posted to the outside host, `window.open`, a service worker.
Each time the outside host must receive nothing, the attempt must be counted as blocked, the agent
must stay on the site with a running episode (a start page that leads away ends it instead), and
its observation must say, in words, what was blocked.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from env_helpers import element_id, page_task

from webrl.env.backend import WebArenaBackend
from webrl.env.limits import EpisodeLimits
from webrl.env.outside_proxy import OutsideProxy, host_port

pytestmark = pytest.mark.timeout(120)

FAST = EpisodeLimits(action_timeout_s=5.0, wait_action_s=0.05)

BUTTONS = """<!DOCTYPE html><html><body>
<h1>Ways out</h1>
<button onclick="location.href = '{out}/js'">Script location</button>
<button onclick="location.href = '{secure}/secure'">Secure script location</button>
<form method="post" action="{out}/form"><input name="q" value="secret"><button>Post form</button></form>
<button onclick="window.open('{out}/popup')">Open window</button>
<button onclick="window.open('/tab')">Open window on the site</button>
<a href="/redirect">Redirect link</a>
<a href="/redirect-https">Secure redirect link</a>
<a href="{out}/blank" target="_blank">Outside tab link</a>
<a href="/tab" target="_blank">Site tab link</a>
<button onclick="fetch('/redirect').then(() => log('fetch loaded'), () => log('fetch failed'))">Fetch redirect</button>
<button onclick="tryFetch('{out}/fetched')">Fetch outside</button>
<button onclick="tryFetch('{secure}/fetched')">Secure fetch outside</button>
<p id="log">pending</p>
<script>function log(text) {{ document.getElementById('log').textContent = text; }}
function tryFetch(url) {{ fetch(url).then(() => log('fetch loaded'), () => log('fetch failed')); }}</script>
</body></html>"""
META_REFRESH = """<!DOCTYPE html><html><head><meta http-equiv="refresh" content="0; url={out}/meta"></head>
<body>Stay</body></html>"""
FRAMED = """<!DOCTYPE html><html><body><h1>Framed</h1><iframe src="{out}/frame"></iframe>
<iframe src="{secure}/frame"></iframe></body></html>"""
SERVICE_WORKER_PAGE = """<!DOCTYPE html><html><body><p id="log">pending</p><script>
const log = (text) => {{ document.getElementById('log').textContent = text; }};
navigator.serviceWorker.register('/sw.js')
  .then(() => navigator.serviceWorker.getRegistrations())
  .then((found) => found.length ? navigator.serviceWorker.ready.then(() => 'worker active') : 'no worker')
  .then(log, (err) => log('worker refused: ' + err));
</script></body></html>"""
# The worker's own requests are not the page's: routing in the browser context never sees them.
SERVICE_WORKER = "self.addEventListener('install', (event) => event.waitUntil(fetch('{out}/sw').catch(() => null)));"


class _Handler(BaseHTTPRequestHandler):
    """The site on 127.0.0.1 (`outside` set) or the outside host (`outside` None, records every request)."""

    outside: str | None = None
    requests: list[str]

    def _send(self, status: int, body: str = "", headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        for name, value in {"Content-Type": "text/html", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.requests.append(f"{self.command} {self.path}")
        out = self.outside
        if out is None:
            self._send(200, "<html><body>OUTSIDE PAGE</body></html>")
        elif self.path == "/redirect":
            self._send(302, headers={"Location": f"{out}/landing"})
        elif self.path == "/redirect-https":
            self._send(302, headers={"Location": out.replace("http:", "https:") + "/landing"})
        elif self.path == "/sw.js":
            self._send(200, SERVICE_WORKER.format(out=out), {"Content-Type": "text/javascript"})
        else:
            pages = {"/buttons": BUTTONS, "/meta": META_REFRESH, "/worker": SERVICE_WORKER_PAGE, "/framed": FRAMED}
            page = pages.get(self.path, "<html><body>inside</body></html>")
            self._send(200, page.format(out=out, secure=out.replace("http:", "https:")))

    do_POST = do_GET

    def log_message(self, format: str, *args: object) -> None:
        return


def _serve(host: str, outside: str | None) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"outside": outside, "requests": []})
    server = ThreadingHTTPServer((host, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ThreadingHTTPServer, ThreadingHTTPServer]]:
    outside = _serve("127.0.0.2", None)
    site = _serve("127.0.0.1", _url(outside))
    yield site, outside
    for server in (site, outside):
        server.shutdown()
        server.server_close()


@pytest.fixture
def outside_requests(servers) -> list[str]:
    """What the outside host received during the test (nothing, if the allowlist holds)."""
    received = servers[1].RequestHandlerClass.requests
    received.clear()
    return received


def _backend(servers) -> WebArenaBackend:
    return WebArenaBackend({"__PAGES__": _url(servers[0])})


async def _until_blocked(episode, count: int = 1) -> None:
    """Wait (at most 10 s) until the episode has counted `count` blocked requests."""
    for _ in range(1000):
        if episode.trajectory.metadata["blocked_requests"] >= count:
            return
        await asyncio.sleep(0.01)


def test_a_start_page_redirecting_outside_is_not_followed(run, pool, servers, outside_requests):
    async def scenario():
        async with pool.episode(page_task("redirect"), _backend(servers), FAST) as ep:
            observation = await ep.reset()
            return observation, ep.trajectory

    observation, trajectory = run(scenario())
    outside = _url(servers[1])
    assert outside_requests == []
    assert trajectory.metadata["blocked_urls"] == [f"{outside}/landing"]
    assert trajectory.metadata["blocked_requests"] == 1
    assert "OUTSIDE" not in observation.html
    assert trajectory.status == "error" and "outside the task's sites" in trajectory.error
    assert trajectory.metadata["blocked_navigations"] == 1 and not trajectory.infra_error, "the task's fault: no retry"


def test_a_meta_refresh_outside_leaves_the_page_where_it_is(run, pool, servers, outside_requests):
    async def scenario():
        async with pool.episode(page_task("meta"), _backend(servers), FAST) as ep:
            await ep.reset()
            await _until_blocked(ep)
            return await ep.step('do(action="Wait")'), ep.trajectory

    result, trajectory = run(scenario())
    assert outside_requests == []
    assert trajectory.metadata["blocked_urls"] == [f"{_url(servers[1])}/meta"]
    assert result.status == "running" and result.observation.url == f"{_url(servers[0])}/meta"
    assert "Stay" in result.observation.html


@pytest.mark.parametrize(
    ("control", "blocked"),
    [
        ("Script location", "{out}/js"),
        # https: the proxy would only see a tunnel to host:port, and its refusal would leave an error page.
        ("Secure script location", "https://{host}/secure"),
        ("Post form", "{out}/form"),
        ("Open window", "{out}/popup"),
        ("Redirect link", "{out}/landing"),
        ("Secure redirect link", "//{host}"),
        ("Fetch redirect", "{out}/landing"),
        ("Outside tab link", "{out}/blank"),
    ],
)
def test_no_way_out_of_the_site(run, pool, servers, outside_requests, control, blocked):
    async def scenario():
        async with pool.episode(page_task("buttons"), _backend(servers), FAST) as ep:
            observation = await ep.reset()
            result = await ep.step(f'do(action="Click", element="{element_id(observation.html, control)}")')
            await _until_blocked(ep)
            after = await ep.step('do(action="Wait")')
            return result, after, ep.trajectory, len(ep.context.pages)

    result, after, trajectory, tabs = run(scenario())
    out = _url(servers[1])
    blocked = blocked.format(out=out, host=out.split("//")[1])
    assert outside_requests == []
    assert trajectory.metadata["blocked_urls"] == [blocked]
    assert after.status == "running" and tabs == 1
    assert after.observation.url == f"{_url(servers[0])}/buttons" and "Ways out" in after.observation.html
    seen = result.observation.html + after.observation.html
    assert "OUTSIDE" not in seen and "chrome-error" not in seen
    # Told once, in the first observation after the block, on the first line (a tunnel is shown as https).
    notice = f"blocked: {blocked.replace('//', 'https://', 1) if blocked.startswith('//') else blocked}"
    assert seen.count(f"{notice} is outside this task's sites") == 1
    told = result if result.observation.html.startswith("blocked: ") else after
    assert told.observation.html.startswith(f"{notice} is outside this task's sites\n")


@pytest.mark.parametrize(
    ("control", "blocked"), [("Fetch outside", "{out}/fetched"), ("Secure fetch outside", "https://{host}/fetched")]
)
def test_a_request_outside_fails_and_is_counted_without_a_word_to_the_agent(
    run, pool, servers, outside_requests, control, blocked
):
    """Only navigations are told: a page's own requests elsewhere (fonts, trackers) are no news to the agent."""

    async def scenario():
        async with pool.episode(page_task("buttons"), _backend(servers), FAST) as ep:
            observation = await ep.reset()
            result = await ep.step(f'do(action="Click", element="{element_id(observation.html, control)}")')
            await _until_blocked(ep)
            await ep.page.wait_for_function("() => document.getElementById('log').textContent !== 'pending'")
            after = await ep.step('do(action="Wait")')
            return result, after, ep.trajectory

    result, after, trajectory = run(scenario())
    out = _url(servers[1])
    assert outside_requests == []
    assert trajectory.metadata["blocked_urls"] == [blocked.format(out=out, host=out.split("//")[1])]
    assert "fetch failed" in after.observation.html
    assert result.error is None and after.error is None
    assert "blocked:" not in result.observation.html + after.observation.html


def test_an_iframe_outside_is_refused_without_a_word_to_the_agent(run, pool, servers, outside_requests):
    """An iframe's page is the page's own request, not a navigation of the agent's: counted, never told."""

    async def scenario():
        async with pool.episode(page_task("framed"), _backend(servers), FAST) as ep:
            observation = await ep.reset()
            await _until_blocked(ep, 2)
            after = await ep.step('do(action="Wait")')
            return observation, after, ep.trajectory

    observation, after, trajectory = run(scenario())
    assert outside_requests == []
    assert trajectory.metadata["blocked_requests"] == 2 and trajectory.metadata["blocked_navigations"] == 0
    assert after.status == "running" and after.error is None
    assert "<h1> Framed </h1>" in observation.html
    assert "blocked:" not in observation.html + after.observation.html


def test_a_site_whose_url_map_spells_its_host_in_capitals_is_on_the_site(run, pool, servers, outside_requests):
    """Chromium requests `http://LOCALHOST:PORT` as `http://localhost:PORT`: the start page is on the site."""
    port = servers[0].server_address[1]
    backend = WebArenaBackend({"__PAGES__": f"http://LOCALHOST:{port}"})

    async def scenario():
        async with pool.episode(page_task("buttons"), backend, FAST) as ep:
            observation = await ep.reset()
            result = await ep.step('do(action="Wait")')
            return observation, result, ep.done, ep.trajectory

    observation, result, done, trajectory = run(scenario())
    assert "Ways out" in observation.html and result.error is None and not done, trajectory.error
    assert result.observation.url == f"http://localhost:{port}/buttons"
    assert trajectory.metadata["blocked_requests"] == 0 and outside_requests == []


def test_a_window_opened_on_the_site_is_followed(run, pool, servers, outside_requests):
    async def scenario():
        async with pool.episode(page_task("buttons"), _backend(servers), FAST) as ep:
            observation = await ep.reset()
            control = element_id(observation.html, "Open window on the site")
            await ep.step(f'do(action="Click", element="{control}")')
            # A script's window.open may announce its tab after the click returns, later still on a loaded machine:
            # the next step that sees it follows it.
            for _ in range(5):
                result = await ep.step('do(action="Wait")')
                if result.observation.url.endswith("/tab"):
                    break
            return result, ep.trajectory, len(ep.context.pages)

    result, trajectory, tabs = run(scenario())
    assert result.error is None and result.observation.url == f"{_url(servers[0])}/tab" and tabs == 2
    assert trajectory.metadata["blocked_requests"] == 0 and outside_requests == []


def test_a_tab_opened_on_the_site_is_followed_and_go_backward_returns_to_its_opener(
    run, pool, servers, outside_requests
):
    async def scenario():
        async with pool.episode(page_task("buttons"), _backend(servers), FAST) as ep:
            observation = await ep.reset()
            opened = await ep.step(f'do(action="Click", element="{element_id(observation.html, "Site tab link")}")')
            tabs_open = len(ep.context.pages)
            back = await ep.step('do(action="Go Backward")')
            return opened, tabs_open, back, len(ep.context.pages)

    opened, tabs_open, back, tabs_after = run(scenario())
    site = _url(servers[0])
    assert opened.error is None and opened.observation.url == f"{site}/tab" and "inside" in opened.observation.html
    assert tabs_open == 2, "the opener stays open as history"
    assert back.error is None and back.status == "running" and tabs_after == 1
    assert back.observation.url == f"{site}/buttons" and "Ways out" in back.observation.html
    assert outside_requests == []


async def _worker_log(page) -> str:
    await page.wait_for_function("() => document.getElementById('log').textContent !== 'pending'")
    return await page.evaluate("() => document.getElementById('log').textContent")


def test_an_episode_cannot_start_a_service_worker(run, pool, servers, outside_requests):
    async def scenario():
        async with pool.episode(page_task("worker"), _backend(servers), FAST) as ep:
            await ep.reset()
            return await _worker_log(ep.page)

    assert run(scenario()) == "no worker"
    assert outside_requests == []


def test_a_service_worker_fetching_outside_is_stopped_by_the_proxy(run, pool, servers, outside_requests):
    """Were workers allowed, their own requests (which routing never sees) would still stop at the proxy."""
    blocked: list[str] = []

    async def scenario():
        async with OutsideProxy(blocked.append) as proxy:
            proxy_option = proxy.context_proxy([_url(servers[0])])
            context = await (await pool.browser()).new_context(proxy=proxy_option, service_workers="allow")
            try:
                page = await context.new_page()
                await page.goto(f"{_url(servers[0])}/worker")
                return await _worker_log(page)
            finally:
                await context.close()

    assert run(scenario()) == "worker active"
    assert outside_requests == []
    assert blocked == [f"{_url(servers[1])}/sw"]


def test_the_proxy_bypasses_exactly_the_allowed_hosts(run):
    async def bypass() -> str:
        async with OutsideProxy() as proxy:
            option = proxy.context_proxy(["https://shop.local", "http://127.0.0.1:8000", "http://127.0.0.1:8000/"])
            assert option["server"] == proxy.url and proxy.url.startswith("http://127.0.0.1:")
            return option["bypass"]

    # Loopback is proxied too (other local ports are outside); allowed hosts go direct, port explicit.
    assert run(bypass()) == "<-loopback>,127.0.0.1:8000,shop.local:443"
    assert host_port("http://shop.local/") == "shop.local:80" and host_port("http://[::1]:9000") == "[::1]:9000"
    with pytest.raises(RuntimeError, match="not started"):
        OutsideProxy().context_proxy([])
