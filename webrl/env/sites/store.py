"""Per-episode state of the embedded sites: copy-on-write overlays on one immutable base.

WebArena resets a site by restarting its Docker containers (minutes), and parallel rollouts that
share a site corrupt each other's rewards. Here every episode carries an id (a cookie); the
server keeps, per id, only the rows that episode changed. Reads merge the overlay over the base,
so a fresh episode costs nothing to create and sees exactly the seeded data, and what one
episode does (cart, orders, posts, product edits) is invisible to every other.

The number of live overlays is bounded (least recently used evicted) so that memory stays flat
over millions of episodes; an evicted episode simply sees the base again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from types import MappingProxyType
from typing import Any

from webrl.env.sites.data import Record, Tables

_DELETED = object()


class EpisodeView:
    """What one episode sees: the base tables with its own changes on top.

    Handlers read through `get`/`rows` and write through `put`/`delete`; writes never touch the
    base. Records handed out are read-only; to change one, copy it (`dict(record)`) and `put` it.
    """

    def __init__(self, base: Tables, changes: dict[str, dict[Hashable, Any]], lock: threading.RLock) -> None:
        self._base = base
        self._changes = changes
        self.lock = lock  # held by the server for a whole request, so one episode's requests do not interleave

    def _table(self, table: str) -> dict[Hashable, Record]:
        try:
            return self._base[table]
        except KeyError:
            raise KeyError(f"no table {table!r} in the site data (tables: {sorted(self._base)})") from None

    def get(self, table: str, key: Hashable) -> Record | None:
        changed = self._changes.get(table, {})
        if key in changed:
            value = changed[key]
            return None if value is _DELETED else value
        return self._table(table).get(key)

    def rows(self, table: str) -> list[Record]:
        """Every live record: base order first, then records this episode created, in creation order."""
        return list(self._iter_rows(table))

    def _iter_rows(self, table: str) -> Iterator[Record]:
        base = self._table(table)
        changed = self._changes.get(table, {})
        for key, record in base.items():
            value = changed.get(key, record)
            if value is not _DELETED:
                yield value
        for key, value in changed.items():
            if key not in base and value is not _DELETED:
                yield value

    def put(self, table: str, key: Hashable, record: dict[str, Any]) -> None:
        self._table(table)
        self._changes.setdefault(table, {})[key] = MappingProxyType(dict(record))

    def delete(self, table: str, key: Hashable) -> None:
        self._table(table)
        self._changes.setdefault(table, {})[key] = _DELETED

    def next_id(self, table: str) -> int:
        """One more than the largest integer key seen in base or overlay (ids of new rows)."""
        keys = [k for k in self._table(table)] + [k for k in self._changes.get(table, {})]
        return max((k for k in keys if isinstance(k, int)), default=0) + 1

    @property
    def changed_rows(self) -> int:
        return sum(len(rows) for rows in self._changes.values())


class EpisodeStore:
    """The base tables plus a bounded LRU map of episode id -> overlay.

    `view(episode_id)` returns that episode's view, creating an empty overlay on first use. The
    empty id "" is the shared overlay used by requests without an episode cookie (a person
    browsing by hand).
    """

    def __init__(self, base: Tables, max_episodes: int = 1024) -> None:
        if max_episodes < 1:
            raise ValueError(f"max_episodes must be at least 1, got {max_episodes}")
        self.base = base
        self.max_episodes = max_episodes
        self._overlays: OrderedDict[str, tuple[dict[str, dict[Hashable, Any]], threading.RLock]] = OrderedDict()
        self._lock = threading.Lock()
        self.evicted = 0

    def view(self, episode_id: str) -> EpisodeView:
        with self._lock:
            entry = self._overlays.get(episode_id)
            if entry is None:
                entry = ({}, threading.RLock())
                self._overlays[episode_id] = entry
                while len(self._overlays) > self.max_episodes:
                    self._overlays.popitem(last=False)
                    self.evicted += 1
            else:
                self._overlays.move_to_end(episode_id)
        changes, lock = entry
        return EpisodeView(self.base, changes, lock)

    def __len__(self) -> int:
        return len(self._overlays)

    def __contains__(self, episode_id: object) -> bool:
        return episode_id in self._overlays
