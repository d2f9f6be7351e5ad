"""The frozen critic's value of each state of a phase, kept so that the actor stage scores a state only once.

Before the actor trains, every distinct state of its data is scored by the phase's critic (`webrl.modules.advantages`):
on a 2-core CPU that took 11.5 minutes of a SmolLM2 phase, and it was repeated in full whenever the actor stage
started again, after a stop (the stage itself resumes from its own checkpoint) or on a `recipes.branch` that reruns
only the actor stage on the same critic, e.g. in another batch order. The values depend only on the critic's weights,
the trunk under them, how a state is cut (`model.max_length`) and the precision, so the first scoring writes them to
`phase_NNN/critic_values.json` under that key, and a later start of the stage reads them back: the same values, not
merely close ones, so a resumed or branched stage trains on exactly the advantages the first start computed.

    {"key": {"critic_sha256": ..., "trunk_sha256": ..., "max_length": 6144, "precision": "bf16-mixed", ...},
     "values": {"<sha256 of the state's text>": V(s), ...}}

A file whose key differs (another critic, another cut) is ignored and replaced, never mixed with new values.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from webrl.data.atomic_io import write_json_atomic

log = logging.getLogger(__name__)


def state_key(text: str) -> str:
    """The name a state's value is kept under: the SHA-256 of its recorded text (pages are kilobytes long)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_critic_values(path: str | os.PathLike, key: Mapping[str, Any]) -> dict[str, float]:
    """The values kept at `path` by `state_key`, if they were made under `key`; {} when absent or made otherwise."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text())
        kept_key, values = record["key"], record["values"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        log.warning("%s does not read (%s): the critic scores every state again", path, err)
        return {}
    key = json.loads(json.dumps(dict(key)))  # as JSON reads it back: a tuple in the key is a list in the file
    if kept_key != key:
        changed = sorted(name for name in {*kept_key, *key} if kept_key.get(name) != key.get(name))
        log.info("%s was scored with another %s: the critic scores every state again", path, ", ".join(changed))
        return {}
    return {name: float(value) for name, value in values.items()}


def write_critic_values(path: str | os.PathLike, key: Mapping[str, Any], values: Mapping[str, float]) -> Path:
    """Keep `values` (by `state_key`) under `key` at `path`, atomically: a stop mid-write leaves the old file."""
    return write_json_atomic(path, {"key": dict(key), "values": dict(values)}, indent=0)
