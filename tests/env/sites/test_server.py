"""The sites server over real HTTP: start/stop, error pages, and per-episode isolation by cookie."""

from __future__ import annotations

import html
import http.client
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlencode, urlsplit

import pytest

from webrl.env.sites import EmbeddedSites
from webrl.env.sites.server import EPISODE_COOKIE, PLACEHOLDERS, SitesServer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def server() -> Iterator[SitesServer]:
    with SitesServer() as running:
        yield running


def fetch(server: SitesServer, path: str, episode: str | None = None, form: dict | None = None) -> tuple[int, str, str]:
    """(status, body, Location) of one request, without following redirects."""
    parts = urlsplit(server.base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Cookie": f"{EPISODE_COOKIE}={episode}"} if episode else {}
    body = None
    if form is not None:
        body = urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    conn.request("POST" if form is not None else "GET", path, body=body, headers=headers)
    response = conn.getresponse()
    text = html.unescape(response.read().decode())
    conn.close()
    return response.status, text, response.getheader("Location") or ""


def price_on_edit_page(server: SitesServer, episode: str | None, product_id: int = 1) -> str:
    _, page, _ = fetch(server, f"/admin/product/{product_id}", episode)
    return re.search(r'name="price" type="text" placeholder="Price" value="([^"]+)"', page).group(1)


def test_subprocess_prints_base_url_and_stops():
    with EmbeddedSites() as sites:
        assert sites.running and sites.base_url.startswith("http://127.0.0.1:")
        assert set(sites.url_map) == set(PLACEHOLDERS)
        assert sites.url_map["__REDDIT__"] == sites.base_url + "/forum"
        with urllib.request.urlopen(sites.base_url + "/") as response:
            index = response.read().decode()
        assert all(f'href="{path}/"' in index for path in PLACEHOLDERS.values())
        base = sites.base_url
    assert not sites.running
    with pytest.raises(OSError):
        urllib.request.urlopen(base + "/", timeout=2)
    sites.stop()  # a second stop is harmless


def test_server_exits_when_its_parent_dies():
    """A parent killed without cleanup (here os._exit) must not leave the sites server running."""
    script = (
        "import os; from webrl.env.sites import EmbeddedSites; "
        "s = EmbeddedSites().start(); print(s.base_url, flush=True); os._exit(0)"
    )
    parent = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    base = parent.stdout.strip()
    assert base.startswith("http://127.0.0.1:")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(base + "/", timeout=1).close()
        except OSError:
            return
        time.sleep(0.2)
    pytest.fail(f"the orphaned server at {base} still answers")


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/nope", 404, "Not found: /nope"),
        ("/shopping/product/99999", 404, "product 99999"),
        ("/shopping/category/nothing", 404, "category nothing"),
        ("/forum/f/books?page=99", 404, "page 99 (there are 3)"),
        ("/forum/u/nobody", 404, "user nobody"),
        ("/gitlab/nobody/no-such", 404, "project nobody/no-such"),
        ("/admin/order/1", 404, "order 1"),
        ("/map/place/0", 404, "place 0"),
        ("/forum/f/books?page=zero", 400, "page must be a positive integer"),
    ],
)
def test_error_pages_name_the_culprit(server, path, status, message):
    got, body, _ = fetch(server, path)
    assert got == status
    assert message in body


def test_wrong_method_and_bad_forms(server):
    status, body, _ = fetch(server, "/shopping/cart", form={})
    assert status == 405 and "POST is not allowed on /shopping/cart" in body
    status, body, _ = fetch(server, "/shopping/product/1/cart", "bad-form", form={"qty": "lots"})
    assert status == 400 and "qty must be a whole number" in body
    status, body, _ = fetch(server, "/admin/product/1", "bad-form", form={"price": "cheap", "stock": "1"})
    assert status == 400 and "price must be a number, got 'cheap'" in body
    assert fetch(server, "/shopping/cart", "bad-form")[1].count("Qty:") == 0  # nothing was stored


def test_concurrent_episodes_edit_the_same_product_in_isolation(server):
    base_price = price_on_edit_page(server, None)
    wanted = {"ep-a": "11.50", "ep-b": "22.75"}
    barrier = threading.Barrier(2)
    results: dict[str, tuple] = {}

    def episode(name: str, qty: int) -> None:
        barrier.wait()
        saved = fetch(server, "/admin/product/1", name, form={"price": wanted[name], "stock": "5", "status": "Enabled"})
        added = fetch(server, "/shopping/product/1/cart", name, form={"qty": str(qty)})
        results[name] = (saved, added)

    threads = [threading.Thread(target=episode, args=("ep-a", 2)), threading.Thread(target=episode, args=("ep-b", 3))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results["ep-a"][0][:1] == (303,) and results["ep-a"][1][2] == "/shopping/cart"
    assert price_on_edit_page(server, "ep-a") == "11.50"
    assert price_on_edit_page(server, "ep-b") == "22.75"
    assert price_on_edit_page(server, "ep-c") == base_price
    cart_a, cart_b, cart_c = (fetch(server, "/shopping/cart", e)[1] for e in ("ep-a", "ep-b", "ep-c"))
    assert "Qty: 2 | $23.00" in cart_a and "Qty: 3" not in cart_a  # the storefront shows ep-a's own price
    assert "Qty: 3 | $68.25" in cart_b and "Qty: 2" not in cart_b
    assert "Your cart is empty." in cart_c


def test_checkout_creates_an_order_only_this_episode_sees(server):
    fetch(server, "/shopping/product/7/cart", "buyer", form={"qty": "1"})
    status, _, location = fetch(server, "/shopping/checkout", "buyer", form={})
    assert status == 303 and location.startswith("/shopping/order/")
    order_id = location.rsplit("/", 1)[1]
    assert fetch(server, location, "buyer")[0] == 200
    assert fetch(server, location, "someone-else")[0] == 404
    latest = fetch(server, "/shopping/orders/latest", "buyer")[1]
    assert f"Order #{order_id}" in latest and "Status: Pending" in latest
    assert "Your cart is empty." in fetch(server, "/shopping/cart", "buyer")[1]


def test_malformed_cookie_falls_back_to_the_shared_overlay(server):
    status, _, _ = fetch(server, "/shopping/cart", episode='bad"value; ;;')
    assert status == 200
