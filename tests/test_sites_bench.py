"""bench/sites.py's server load: a request answered badly is counted, and the other requests still are."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from stub_http import StubHandler, serve

BENCH = Path(__file__).resolve().parents[1] / "bench"


class OneBadPage(StubHandler):
    """200 for every page but /admin/reports, one of the twelve the load cycles through."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.reply(500 if self.path == "/admin/reports" else 200, "text/html", b"<html></html>")


def test_a_bad_answer_is_an_error_not_a_lost_client():
    spec = importlib.util.spec_from_file_location("sites_bench", BENCH / "sites.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    with serve(OneBadPage) as url:
        row = bench.http_load(url.removesuffix("/v1"), clients=2, requests=48, time_cap_s=60.0)
    # 48 requests over 12 pages: 4 of them to the bad page.
    assert row["requests"] == 44
    assert row["errors"] == 4
    assert row["first_errors"][0] == "GET /admin/reports answered 500"
    assert row["requests_per_s"] > 0 and row["p50_ms"] is not None
