"""The exact URL-seen test: canonicalize, fingerprint, Bloom filter, SQLite ledger.

A plain synchronous library (no asyncio, no network) usable for any string keys::

    from dedup import UrlSeen

    with UrlSeen("state") as seen:
        new = seen.filter_new(links, base_url)   # canonical keys never seen before

These names are dedup's public API, what a library user needs; the crawler imports
dedup only from here and from ``dedup.admin`` (the ``dedup-public-api`` contract
in pyproject.toml); the subpackages are its layers (README.md, "Architecture"):

- the seen-test, ``UrlSeen``: ``add``, ``filter_new``, ``filter_new_pages``,
  ``forget``, ``commit``, ``close`` and ``admit_pages`` (``SeenPort``, the port a
  crawler or a dupefilter uses; ``CrawlPort`` adds what a running crawl needs).
  Its crawl-specific part keeps URL text: ``admit_pages`` and
  ``UrlSeen.records`` (``CrawlRecords``; ``open_records`` for a stopped
  directory: the frontier's text, fetch outcomes ``State``, referrers, captures,
  named values). dedup keeps them because they commit in the same transaction as
  the keys;
- what a crawl learns about content (``dedup.learn``: ``text_print``,
  ``Shingles``, ``NearIndex``, ``RuleLearner``, ``Rule``, ``Budgets``) and the
  rows its records keep it in (``PrintRow``, ``RuleRow``, ``HeldRow``:
  ``CrawlRecords``' prints, rules and held URLs);
- its parts, for a caller that wants one of them alone: ``BloomFilter``,
  ``ShardedBloom``, ``Geometry``, ``canonicalize``/``Canonicalizer``,
  ``fingerprint``, ``host_of``, and the errors;
- a state directory's layout and safe files: ``is_state_dir``, ``in_use``,
  ``LEDGER_FILE``, ``shards_dir``, ``atomic_write_bytes``, ``fsync_dir``.

State-directory administration (merge, resize, repair, migrate, diagnose) is
``dedup.admin``'s. The ledger itself (``dedup.store.ledger``, the journal, the
fingerprint index) is no public name: a caller goes through ``UrlSeen`` and its
records (the ``crawler-not-ledger`` contract).
"""


from dedup.base.atomic import atomic_write_bytes, fsync_dir
from dedup.base.errors import (
    FileError,
    GeometryMismatch,
    IndexDamaged,
    LedgerDamaged,
    SnapshotError,
    StateFormatError,
    StateLocked,
    naming,
)
from dedup.filter.bloom import BloomFilter
from dedup.filter.geometry import Geometry, first_difference, layer_geometry
from dedup.filter.shards import ShardedBloom
from dedup.filter.snapshot import CRAWL_ID_BYTES
from dedup.journal.format import HELD_KINDS, NOVELTY, HeldRow, PrintRow, QueuedRow, RuleRow, State
from dedup.learn.learner import LearnConfig, RuleLearner, RuleState
from dedup.learn.nearindex import NearIndex
from dedup.learn.novelty import BudgetConfig, Budgets
from dedup.learn.rules import Rule, apply_rules, parse_key, pattern_of, rule_from_spec
from dedup.learn.simhash import Shingles, distance, text_print
from dedup.store.crawl import CrawlRecords, Outcome, open_records
from dedup.store.port import CrawlPort, SeenPort
from dedup.store.seen import CONFIRM_CACHE_SIZE, NewUrl, UrlSeen
from dedup.store.statedir import LEDGER_FILE, in_use, is_state_dir, shards_dir
from dedup.url.canonical import (
    DEFAULT_TRACKING_PARAMS,
    Canonicalizer,
    CanonRules,
    UrlRejected,
    canonicalize,
    normalize,
)
from dedup.url.fingerprint import HASH_ALGO, fingerprint, fingerprint_many
from dedup.url.host import host_of

__all__ = [
    "CONFIRM_CACHE_SIZE",
    "CRAWL_ID_BYTES",
    "DEFAULT_TRACKING_PARAMS",
    "HASH_ALGO",
    "HELD_KINDS",
    "LEDGER_FILE",
    "NOVELTY",
    "BloomFilter",
    "BudgetConfig",
    "Budgets",
    "CanonRules",
    "Canonicalizer",
    "CrawlPort",
    "CrawlRecords",
    "FileError",
    "Geometry",
    "GeometryMismatch",
    "HeldRow",
    "IndexDamaged",
    "LearnConfig",
    "LedgerDamaged",
    "NearIndex",
    "NewUrl",
    "Outcome",
    "PrintRow",
    "QueuedRow",
    "Rule",
    "RuleLearner",
    "RuleRow",
    "RuleState",
    "SeenPort",
    "ShardedBloom",
    "Shingles",
    "SnapshotError",
    "State",
    "StateFormatError",
    "StateLocked",
    "UrlRejected",
    "UrlSeen",
    "apply_rules",
    "atomic_write_bytes",
    "canonicalize",
    "distance",
    "fingerprint",
    "fingerprint_many",
    "first_difference",
    "fsync_dir",
    "host_of",
    "in_use",
    "is_state_dir",
    "layer_geometry",
    "naming",
    "normalize",
    "open_records",
    "parse_key",
    "pattern_of",
    "rule_from_spec",
    "shards_dir",
    "text_print",
]
