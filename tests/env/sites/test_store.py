"""Copy-on-write episode overlays: reads merge, writes stay private, the LRU bound holds."""

from __future__ import annotations

import pytest

from webrl.env.sites.data import build_tables
from webrl.env.sites.store import EpisodeStore


@pytest.fixture(scope="module")
def base():
    return build_tables()


def test_writes_are_private_to_the_episode(base):
    store = EpisodeStore(base)
    a, b = store.view("a"), store.view("b")
    before = a.get("products", 1)["price"]
    a.put("products", 1, {**a.get("products", 1), "price": 1.25})
    assert a.get("products", 1)["price"] == 1.25
    assert b.get("products", 1)["price"] == before
    assert base["products"][1]["price"] == before
    assert store.view("a").get("products", 1)["price"] == 1.25  # the same id finds the same overlay


def test_rows_merge_updates_deletions_and_new_records(base):
    view = EpisodeStore(base).view("e")
    n = len(base["posts"])
    new_id = view.next_id("posts")
    assert new_id == max(base["posts"]) + 1
    view.put("posts", new_id, {**base["posts"][1], "id": new_id, "title": "fresh"})
    view.delete("posts", 2)
    view.put("posts", 3, {**base["posts"][3], "title": "edited"})
    rows = view.rows("posts")
    assert len(rows) == n  # one added, one deleted
    assert [r["id"] for r in rows[:2]] == [1, 3]  # base order kept, deleted row gone
    assert rows[1]["title"] == "edited" and rows[-1]["title"] == "fresh"
    assert view.get("posts", 2) is None
    assert view.changed_rows == 3


def test_records_are_read_only(base):
    view = EpisodeStore(base).view("e")
    with pytest.raises(TypeError):
        view.get("products", 1)["price"] = 0  # type: ignore[index]
    view.put("cart", 5, {"product_id": 5, "qty": 1})
    with pytest.raises(TypeError):
        view.get("cart", 5)["qty"] = 2  # type: ignore[index]


def test_unknown_table_names_the_table(base):
    with pytest.raises(KeyError, match="no table 'nope'"):
        EpisodeStore(base).view("e").rows("nope")


def test_lru_bound_evicts_the_least_recently_used(base):
    store = EpisodeStore(base, max_episodes=2)
    store.view("old").put("cart", 1, {"product_id": 1, "qty": 1})
    store.view("mid")
    store.view("old")  # touch: "mid" is now the least recently used
    store.view("new")
    assert len(store) == 2 and "mid" not in store and "old" in store and store.evicted == 1
    store.view("newer")
    assert "old" not in store
    assert store.view("old").rows("cart") == []  # an evicted episode sees the base again


def test_max_episodes_must_be_positive(base):
    with pytest.raises(ValueError, match="max_episodes"):
        EpisodeStore(base, max_episodes=0)
