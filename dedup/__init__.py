"""The exact URL-seen test: canonicalize, fingerprint, Bloom filter, SQLite ledger.

A plain synchronous library (no asyncio, no network) usable for any string keys::

    from dedup import BloomFilter, ShardedBloom, Ledger, UrlSeen, canonicalize, fingerprint
"""

from dedup.bloom import BloomFilter
from dedup.canonical import Canonicalizer, CanonRules, UrlRejected, canonicalize, normalize
from dedup.fingerprint import fingerprint, fingerprint_many
from dedup.ledger import Ledger, QueuedRow, State
from dedup.seen import NewUrl, StateLocked, UrlSeen
from dedup.shards import ShardedBloom
from dedup.snapshot import GeometryMismatch, SnapshotError

__all__ = [
    "BloomFilter",
    "CanonRules",
    "Canonicalizer",
    "GeometryMismatch",
    "Ledger",
    "NewUrl",
    "QueuedRow",
    "ShardedBloom",
    "SnapshotError",
    "State",
    "StateLocked",
    "UrlRejected",
    "UrlSeen",
    "canonicalize",
    "fingerprint",
    "fingerprint_many",
    "normalize",
]
