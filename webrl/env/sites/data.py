"""Seeded data of the embedded websites: one immutable set of tables that every episode starts from.

`build_tables(seed)` is a pure function of the seed: the server builds the same tables at start-up
that the task generator built when it computed each task's reference answer, so a shipped task
stays correct as long as the seed and `vocab.py` are unchanged (a test regenerates the suites and
compares them with the shipped files).

Tables are `dict[key, record]`; records are read-only mappings (`MappingProxyType`) so that no page
handler can change the shared base by accident: changes go to the episode's overlay (`store.py`).
The shopping storefront and the shop admin share their tables (products, orders, customers), as in
WebArena where the admin manages the same store.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Mapping
from datetime import date, timedelta
from types import MappingProxyType
from typing import Any

from webrl.env.sites import vocab

DEFAULT_SEED = 2411
Record = Mapping[str, Any]
Tables = dict[str, dict[Hashable, Record]]

SHOP_CUSTOMER_ID = 1  # the storefront's signed-in customer
ORDER_BASE_ID = 1000
_START = date(2023, 1, 1)


def build_tables(seed: int = DEFAULT_SEED) -> Tables:
    """All sites' base tables for `seed`; each site draws from its own RNG stream."""
    tables: Tables = {}
    tables.update(_shop(random.Random(f"{seed}/shop")))
    tables.update(_forum(random.Random(f"{seed}/forum")))
    tables.update(_gitlab(random.Random(f"{seed}/gitlab")))
    tables.update(_map(random.Random(f"{seed}/map")))
    return {name: {key: MappingProxyType(dict(rec)) for key, rec in rows.items()} for name, rows in tables.items()}


def _day(offset: int) -> str:
    return (_START + timedelta(days=offset)).isoformat()


def _unique_names(rng: random.Random, count: int) -> list[str]:
    pairs = [f"{first} {last}" for first in vocab.FIRST_NAMES for last in vocab.LAST_NAMES]
    return rng.sample(pairs, count)


def _shop(rng: random.Random) -> Tables:
    products: dict[Hashable, dict] = {}
    for category, (prefix, nouns) in vocab.CATEGORIES.items():
        combos = [f"{colour} {noun}" for noun in nouns for colour in vocab.COLOURS]
        for name in rng.sample(combos, 15):
            pid = len(products) + 1
            products[pid] = {
                "id": pid,
                "sku": f"{prefix}-{pid:04d}",
                "name": name,
                "category": category,
                "price": round(rng.randint(4, 249) + rng.choice([0.99, 0.49, 0.0, 0.25]), 2),
                "stock": rng.randint(0, 150),
                "status": "Disabled" if rng.random() < 0.1 else "Enabled",
            }
    customers: dict[Hashable, dict] = {}
    for name in _unique_names(rng, 48):
        cid = len(customers) + 1
        first, last = name.lower().split()
        customers[cid] = {
            "id": cid,
            "name": name,
            "email": f"{first}.{last}@example.com",
            "city": rng.choice(vocab.CITIES),
        }
    reviews: dict[Hashable, dict] = {}
    for pid in products:
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4, 5, 6])):
            rid = len(reviews) + 1
            reviews[rid] = {
                "id": rid,
                "product_id": pid,
                "author": customers[rng.randint(1, len(customers))]["name"],
                "rating": rng.choice([1, 2, 3, 4, 4, 5, 5, 5]),
                "text": rng.choice(vocab.REVIEW_TEXTS),
            }
    orders: dict[Hashable, dict] = {}
    days = sorted(rng.sample(range(0, 700), 180))
    for i, offset in enumerate(days):
        oid = ORDER_BASE_ID + i
        # The signed-in customer gets about one order in six, so "My orders" spans several pages.
        customer = SHOP_CUSTOMER_ID if rng.random() < 0.17 else rng.randint(2, len(customers))
        items = []
        for pid in rng.sample(sorted(products), rng.choice([1, 1, 2, 3])):
            items.append((pid, products[pid]["name"], rng.choice([1, 1, 2, 3]), products[pid]["price"]))
        orders[oid] = {
            "id": oid,
            "customer_id": customer,
            "date": _day(offset),
            "status": rng.choice(vocab.ORDER_STATUSES),
            "items": tuple(items),
            "total": round(sum(qty * price for _, _, qty, price in items), 2),
        }
    return {"products": products, "customers": customers, "reviews": reviews, "orders": orders, "cart": {}}


def _forum(rng: random.Random) -> Tables:
    names = [f"{adj}_{animal}" for adj in vocab.ADJECTIVES for animal in vocab.ANIMALS]
    users = {name: {"username": name, "joined": _day(-rng.randint(30, 900))} for name in rng.sample(names, 30)}
    usernames = list(users)
    forums: dict[Hashable, dict] = {}
    posts: dict[Hashable, dict] = {}
    for forum, subjects in vocab.FORUMS.items():
        forums[forum] = {"name": forum, "description": f"Discussion about {forum}."}
        titles = [(pattern.format(subject), subject) for subject in subjects for pattern in vocab.POST_PATTERNS]
        for title, subject in rng.sample(titles, 24):
            pid = len(posts) + 1
            posts[pid] = {
                "id": pid,
                "forum": forum,
                "title": title,
                "body": f"Curious what this forum thinks about {subject}.",
                "author": rng.choice(usernames[1:]),
                "score": rng.randint(-5, 400),
                "date": _day(rng.randint(0, 700)),
            }
    comments: dict[Hashable, dict] = {}
    for pid in posts:
        for _ in range(rng.randint(0, 7)):
            cid = len(comments) + 1
            comments[cid] = {
                "id": cid,
                "post_id": pid,
                "author": rng.choice(usernames[1:]),
                "text": rng.choice(vocab.COMMENT_TEXTS),
                "score": rng.randint(0, 60),
            }
    return {"forums": forums, "users": users, "posts": posts, "comments": comments, "votes": {}}


def _gitlab(rng: random.Random) -> Tables:
    users: dict[Hashable, dict] = {}
    for name in _unique_names(rng, 20):
        first, last = name.lower().split()
        users[f"{first[0]}{last}"] = {"username": f"{first[0]}{last}", "name": name}
    usernames = list(users)
    combos = [f"{word}-{noun}" for word in vocab.PROJECT_WORDS for noun in vocab.PROJECT_NOUNS]
    projects: dict[Hashable, dict] = {}
    members: dict[Hashable, dict] = {}
    issues: dict[Hashable, dict] = {}
    merges: dict[Hashable, dict] = {}
    for slug in rng.sample(combos, 24):
        owner = rng.choice(usernames)
        path = f"{owner}/{slug}"
        projects[path] = {
            "path": path,
            "owner": owner,
            "name": slug,
            "description": f"A {slug.replace('-', ' ')} library.",
            "language": rng.choice(vocab.LANGUAGES),
            "stars": rng.randint(0, 900),
        }
        team = [owner] + rng.sample([u for u in usernames if u != owner], rng.randint(2, 5))
        for i, user in enumerate(team):
            members[(path, user)] = {
                "project": path,
                "username": user,
                "role": "Owner" if i == 0 else rng.choice(vocab.ROLES),
            }
        titles = [p.format(s) for p in vocab.ISSUE_PATTERNS for s in vocab.ISSUE_SUBJECTS]
        for number, title in enumerate(rng.sample(titles, rng.randint(6, 24)), start=1):
            issues[(path, number)] = {
                "project": path,
                "number": number,
                "title": title,
                "state": "closed" if rng.random() < 0.35 else "open",
                "labels": tuple(sorted(rng.sample(vocab.LABELS, rng.choice([0, 1, 1, 2])))),
                "author": rng.choice(team),
                "assignee": rng.choice(team + [""]),
            }
        mr_titles = [p.format(s) for p in vocab.MR_PATTERNS for s in vocab.ISSUE_SUBJECTS]
        for number, title in enumerate(rng.sample(mr_titles, rng.randint(2, 8)), start=1):
            merges[(path, number)] = {
                "project": path,
                "number": number,
                "title": title,
                "state": rng.choice(["open", "open", "merged", "closed"]),
                "author": rng.choice(team),
            }
    return {
        "gl_users": users,
        "projects": projects,
        "members": members,
        "issues": issues,
        "merge_requests": merges,
        "stars": {},
    }


def _map(rng: random.Random) -> Tables:
    names = [f"{prefix} {category}" for prefix in vocab.PLACE_PREFIXES for category in vocab.PLACE_CATEGORIES]
    places: dict[Hashable, dict] = {}
    for name in rng.sample(names, 80):
        city = rng.choice(list(vocab.CITY_CENTRES))
        lat0, lon0 = vocab.CITY_CENTRES[city]
        pid = len(places) + 1
        opens = rng.choice([6, 7, 8, 9, 10])
        places[pid] = {
            "id": pid,
            "name": name,
            "category": name.split()[-1],
            "city": city,
            "address": f"{rng.randint(1, 999)} {rng.choice(vocab.STREETS)} St, {city}",
            "lat": round(lat0 + rng.uniform(-0.09, 0.09), 4),
            "lon": round(lon0 + rng.uniform(-0.12, 0.12), 4),
            "hours": f"{opens}:00-{opens + rng.choice([8, 9, 10, 12])}:00",
        }
    return {"places": places}


def route(a: Record, b: Record, mode: str) -> tuple[float, int]:
    """Road distance (km, 1 decimal) and time (whole minutes) between two places for a travel mode.

    Great-circle distance times the mode's detour factor; time at the mode's average speed. The
    map site shows these figures and the task generator uses the same function for its answers.
    """
    factor, speed = vocab.TRAVEL_MODES[mode]
    lat1, lon1, lat2, lon2 = (math.radians(v) for v in (a["lat"], a["lon"], b["lat"], b["lon"]))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    km = round(2 * 6371.0 * math.asin(math.sqrt(h)) * factor, 1)
    return km, max(1, round(km / speed * 60))
