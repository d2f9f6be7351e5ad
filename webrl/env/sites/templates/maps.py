"""Templates of OpenMap (site "map"): addresses, opening hours, cities, directions, place counts."""

from __future__ import annotations

import re

from webrl.env.sites import vocab
from webrl.env.sites.data import route
from webrl.env.sites.moves import Answer, Choose, Click, Done, Fill
from webrl.env.sites.pages.maps import find_places
from webrl.env.sites.store import EpisodeView
from webrl.env.sites.templates.base import Template, at_url, exact, include, values_rng

SEARCH = "Search places"


def _places(v: EpisodeView) -> list:
    return sorted(v.rows("places"), key=lambda p: p["id"])


def _open(d: dict) -> list:
    return [Fill(SEARCH, d["place"], submit=True), Click(d["place"])]


def _address(v: EpisodeView):
    return [({"place": p["name"]}, include(p["address"])) for p in _places(v)]


def _hours(v: EpisodeView):
    return [({"place": p["name"]}, include(p["hours"])) for p in _places(v)]


def _city(v: EpisodeView):
    return [({"place": p["name"]}, exact(p["city"])) for p in _places(v)]


def _place_url(v: EpisodeView):
    return [({"place": p["name"]}, at_url(f"__MAP__/place/{p['id']}")) for p in _places(v)]


def _trips(v: EpisodeView, figure: int, template_id: int):
    """Trips between two places of the same city; the answer is the distance (0) or the time (1)."""
    out = []
    places = _places(v)
    for a in places:
        for b in places:
            if a["id"] != b["id"] and a["city"] == b["city"]:
                mode = values_rng(template_id, a["id"], b["id"]).choice(list(vocab.TRAVEL_MODES))
                km, minutes = route(a, b, mode)
                answer = include(km) if figure == 0 else include(f"{minutes} min")
                out.append(({"origin": a["name"], "destination": b["name"], "mode": mode}, answer))
    return out


def _directions(d: dict, pattern: str) -> list:
    mode = [] if d["mode"] == "Car" else [Choose("mode", d["mode"])]  # Car is preselected
    return [
        Click("Directions"),
        Fill("From", d["origin"]),
        *mode,
        Fill("To", d["destination"], submit=True),
        Answer(pattern),
    ]


def _counts(v: EpisodeView):
    out = []
    for city in vocab.CITY_CENTRES:
        for category in vocab.PLACE_CATEGORIES:
            found = find_places(v, f"{category} {city}")
            if found:
                out.append(({"category": category.lower(), "city": city}, exact(len(found))))
    return out


TEMPLATES = [
    Template(
        501,
        "map",
        "What is the address of {place}?",
        _address,
        lambda d: [*_open(d), Answer(r"^Address: (.+)$")],
    ),
    Template(
        502,
        "map",
        "What are the opening hours of {place}?",
        _hours,
        lambda d: [*_open(d), Answer(r"^Opening hours: (.+)$")],
    ),
    Template(
        503,
        "map",
        "How far is it from {origin} to {destination} by {mode}?",
        lambda v: _trips(v, 0, 503),
        lambda d: _directions(d, r"^Distance: ([\d.]+ km)"),
    ),
    Template(
        504,
        "map",
        "In which city is {place}?",
        _city,
        lambda d: [Fill(SEARCH, d["place"], True), Answer(rf"^{re.escape(d['place'])} \| \w+ \| (\w+)$")],
    ),
    Template(505, "map", "Show {place} on the map.", _place_url, lambda d: [*_open(d), Done()]),
    Template(
        506,
        "map",
        "How long does it take to go from {origin} to {destination} by {mode}?",
        lambda v: _trips(v, 1, 506),
        lambda d: _directions(d, r"Time: (\d+ min)$"),
        held_out=True,
    ),
    Template(
        507,
        "map",
        "How many places of the category {category} are there in {city}?",
        _counts,
        lambda d: [Fill(SEARCH, f"{d['category']} {d['city']}", True), Answer(r"^(\d+) places? found$")],
        held_out=True,
    ),
]
