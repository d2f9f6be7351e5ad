"""OpenMap: a map site (place search, place pages, directions with distance and time).

Directions are computed by `data.route` from the places' coordinates, so the figures the page
shows and the task generator's reference answers come from one function.
"""

from __future__ import annotations

from webrl.env.sites import vocab
from webrl.env.sites.data import Record, route
from webrl.env.sites.html import esc, items, layout, link, pager, paginate, plural, search_form, select, text_input
from webrl.env.sites.routing import Request, Routes, not_found
from webrl.env.sites.store import EpisodeView

routes = Routes("/map", "OpenMap", [("/", "Search"), ("/directions", "Directions")])
MODES = list(vocab.TRAVEL_MODES)


def find_places(view: EpisodeView, query: str) -> list[Record]:
    """Places whose name, category or city contains every word of `query`, sorted by name."""
    words = query.lower().split()
    found = [p for p in view.rows("places") if all(w in f"{p['name']} {p['city']}".lower() for w in words)]
    return sorted(found, key=lambda p: p["name"])


def place_by_name(view: EpisodeView, name: str) -> Record | None:
    wanted = " ".join(name.lower().split())
    return next((p for p in view.rows("places") if p["name"].lower() == wanted), None)


@routes.get(r"/?")
def home(req: Request) -> str:
    query = req.arg("q")
    body = search_form(req.url("/"), "Search places", query)
    if query:
        found = find_places(req.view, query)
        shown, pages = paginate(found, req.page_number())
        rows = [f"{_place_link(req, p)} | {p['category']} | {p['city']}" for p in shown]
        body += f"<p>{plural(len(found), 'place')} found</p>" + items(rows, "No places match.")
        body += pager(req, "/", req.page_number(), pages, q=query)
    else:
        body += "<p>Search for a place by name, category or city.</p>"
    return layout(req, "OpenMap", body)


def _place_link(req: Request, p: Record) -> str:
    return link(req.url(f"/place/{p['id']}"), p["name"])


@routes.get(r"/place/(\d+)")
def place(req: Request, place_id: str) -> str:
    p = req.view.get("places", int(place_id))
    if p is None:
        raise not_found(f"place {place_id}")
    body = (
        f"<p>Category: {p['category']}</p><p>Address: {esc(p['address'])}</p>"
        f"<p>Opening hours: {p['hours']}</p><p>Coordinates: {p['lat']}, {p['lon']}</p>"
        + f"<p>{link(req.url('/directions', **{'from': p['name']}), 'Directions from here')}</p>"
    )
    return layout(req, p["name"], body)


@routes.get(r"/directions")
def directions(req: Request) -> str:
    start, end = req.arg("from"), req.arg("to")
    mode = req.arg("mode") or MODES[0]
    mode = mode if mode in MODES else MODES[0]
    form = (
        f'<form action="{esc(req.url("/directions"))}">'
        f"<p>{text_input('from', 'From', start)}</p><p>{text_input('to', 'To', end)}</p>"
        f"<p>Travel by: {select('mode', MODES, mode)}</p><button>Get directions</button></form>"
    )
    result = ""
    if start and end:
        a, b = place_by_name(req.view, start), place_by_name(req.view, end)
        missing = [name for name, found in ((start, a), (end, b)) if found is None]
        if missing:
            result = f"<p>No place named {esc(missing[0])}.</p>"
        else:
            km, minutes = route(a, b, mode)
            result = (
                f"<p>From {esc(a['name'])} to {esc(b['name'])} by {mode}</p>"
                f'<p id="route">Distance: {km} km | Time: {minutes} min</p>'
            )
    return layout(req, "Directions", form + result)
