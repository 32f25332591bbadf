"""What travels between workers: the keys of a fleet, stream entries and their codec.

A stream entry is ``{"d": msgpack([[url, key, host, depth], ...]), "n": count,
"w": sender}``. Never pickle: a stream is shared input, and unpickling it would
run whatever a peer (or anyone who can write to Redis) put there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgpack

from dedup import first_difference as first_difference  # transport uses it from here

PROTOCOL = "msgpack-1"
GROUP = "owner"
RemoteLink = tuple[str, str, str, int]  # (url, key, host, depth)


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Delivery:
    """One stream entry handed to the owner: ack it once its URLs are in the ledger."""

    id: str
    links: list[RemoteLink] = field(default_factory=list)
    sender: int = -1



class Keys:
    def __init__(self, crawl_id: str) -> None:
        if not crawl_id or any(c in crawl_id for c in "{}\r\n "):
            raise ValueError(f"crawl id must be non-empty without braces or spaces: {crawl_id!r}")
        p = f"bloomcrawl:{{{crawl_id}}}:"
        self.fleet, self.idle, self.gen = p + "fleet", p + "idle", p + "gen"
        self.counters, self.stop, self.stats, self.dead = (
            p + "counters", p + "stop", p + "stats", p + "dead")
        self._in = p + "in:"

    def stream(self, worker: int) -> str:
        return f"{self._in}{worker}"



def decode(payload: bytes) -> list[RemoteLink]:
    rows = msgpack.unpackb(payload, raw=False, use_list=True)
    if not isinstance(rows, list):
        raise ValueError("payload is not a list")
    links: list[RemoteLink] = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str)
                and isinstance(row[1], str) and isinstance(row[2], str)
                and isinstance(row[3], int)):
            raise ValueError(f"bad link {row!r:.80}")
        links.append((row[0], row[1], row[2], row[3]))
    return links

