"""The exact URL-seen test: canonicalize, fingerprint, Bloom filter, SQLite ledger.

A plain synchronous library (no asyncio, no network) usable for any string keys::

    from dedup import BloomFilter, ShardedBloom, Ledger, UrlSeen, canonicalize, fingerprint
"""

from dedup.bloom import BloomFilter
from dedup.canonical import Canonicalizer, CanonRules, UrlRejected, canonicalize, normalize
from dedup.errors import (
    GeometryMismatch,
    IndexDamaged,
    LedgerDamaged,
    SnapshotError,
    StateFormatError,
    StateLocked,
)
from dedup.fingerprint import fingerprint, fingerprint_many
from dedup.geometry import Geometry
from dedup.host import host_of
from dedup.ledger import Ledger, QueuedRow, State
from dedup.seen import NewUrl, UrlSeen
from dedup.shards import ShardedBloom

__all__ = [
    "BloomFilter",
    "CanonRules",
    "Canonicalizer",
    "Geometry",
    "GeometryMismatch",
    "IndexDamaged",
    "Ledger",
    "LedgerDamaged",
    "NewUrl",
    "QueuedRow",
    "ShardedBloom",
    "SnapshotError",
    "State",
    "StateFormatError",
    "StateLocked",
    "UrlRejected",
    "UrlSeen",
    "canonicalize",
    "fingerprint",
    "fingerprint_many",
    "host_of",
    "normalize",
]
