"""WebArenaBackend's allowlist: which origins an episode may reach."""

from __future__ import annotations

import pytest

from webrl.data.trajectory import Task
from webrl.env.backend import SiteBackend, WebArenaBackend, origin_of
from webrl.env.miniwob import MiniWoBBackend

URL_MAP = {"__SHOPPING__": "http://127.0.0.1:7770", "__SHOPPING_ADMIN__": "http://127.0.0.1:7780/admin/"}


def test_allowed_origins_cover_start_page_sites_and_evaluator_pages():
    task = Task(
        task_id="1",
        intent="x",
        sites=["shopping_admin", "wikipedia"],
        start_url="__SHOPPING_ADMIN__/orders |AND| __SHOPPING__",
        eval={
            "eval_types": ["program_html"],
            "program_html": [
                {"url": "__SHOPPING__/cart", "locator": "", "required_contents": {"must_include": ["a"]}},
                {"url": "last", "locator": "", "required_contents": {"must_include": ["a"]}},
            ],
        },
    )
    backend = WebArenaBackend(URL_MAP)
    assert backend.start_url(task) == "http://127.0.0.1:7780/admin/orders"
    # wikipedia has no URL in the map, so it adds nothing; the cart check needs the shop's origin.
    assert backend.allowed_origins(task) == ["http://127.0.0.1:7770", "http://127.0.0.1:7780"]


def test_origin_of_needs_an_absolute_url():
    assert origin_of("https://example.com:8443/a?b#c") == "https://example.com:8443"
    with pytest.raises(ValueError, match="not an absolute http"):
        origin_of("/relative/path")
    with pytest.raises(ValueError, match="not an absolute http.*77701"):
        origin_of("http://127.0.0.1:77701/")


def test_an_origin_is_spelled_as_chromium_requests_it():
    """Chromium lowercases the scheme and host, drops a default port and a user name: the allowlist must too."""
    assert origin_of("http://LOCALHOST:8000/a") == "http://localhost:8000"
    assert origin_of("HTTP://Shop.Local:80/") == "http://shop.local"
    assert origin_of("https://shop.local:443/x") == "https://shop.local"
    assert origin_of("http://shop.local:443/") == "http://shop.local:443"
    assert origin_of("http://user:pw@127.0.0.1:7770/") == "http://127.0.0.1:7770"
    assert origin_of("http://[::1]:9000/") == "http://[::1]:9000"


def test_backends_satisfy_the_protocol():
    assert isinstance(WebArenaBackend(URL_MAP), SiteBackend)
    with MiniWoBBackend() as miniwob:
        assert isinstance(miniwob, SiteBackend)
