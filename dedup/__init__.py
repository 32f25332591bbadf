"""The exact URL-seen test: canonicalize, fingerprint, Bloom filter, SQLite ledger.

A plain synchronous library (no asyncio, no network) usable for any string keys::

    from dedup import UrlSeen

    with UrlSeen("state") as seen:
        new = seen.filter_new(links, base_url)   # canonical keys never seen before

These names are dedup's public API: the crawler imports dedup only from here
(the ``dedup-public-api`` contract in pyproject.toml); the subpackages are its
layers (README.md, "Architecture"). They come in two groups:

- the library: the seen-test and its parts (``UrlSeen``, ``BloomFilter``,
  ``ShardedBloom``, ``Ledger``, ``canonicalize``, ``fingerprint``, ...) and its
  errors; what a crawl learns about content (``dedup.learn``: ``text_print``,
  ``NearIndex``, ``RuleLearner``, ``Rule``, ``Budgets``) and the ledger rows it
  keeps it in (``PrintRow``, ``RuleRow``, ``HeldRow``). ``UrlSeen.filter_new``
  keeps keys only; ``UrlSeen.admit`` and the methods of ``dedup.store.crawl`` are
  its crawl-specific part (frontier text, hosts, fetch outcomes ``State``,
  referrers, content prints, rules): dedup keeps them because they
  commit in the same transaction as the keys, and says so there;
- state-directory administration, what tools over a state directory need
  (inspect, merge, resize, repair, migrate: the crawler's commands of those names)
  and the seen-test itself never calls: ``diagnose``, ``index_damage``,
  ``index_keys``, ``repair``, ``RepairReport``, ``Diagnosis``, ``merge_states``,
  ``merge_files``, ``check_compatible``, ``resize``, ``migrate``, ``V1_BACKUP``,
  ``read_header``, ``first_difference``, ``layer_geometry``, ``planned_capacity``,
  ``PortableRow``, ``CRAWL_ID_BYTES``, ``LEDGER_FILE``, ``shards_dir``,
  ``is_state_dir``, ``in_use``, ``atomic_write_bytes`` and ``fsync_dir``.
"""


from dedup.admin.diagnose import Diagnosis, diagnose, index_damage
from dedup.admin.migrate import V1_BACKUP, migrate
from dedup.admin.repair import RepairReport, index_keys, repair
from dedup.admin.resize import check_compatible, merge_states, resize
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
from dedup.filter.shards import ShardedBloom, merge_files, planned_capacity
from dedup.filter.snapshot import CRAWL_ID_BYTES, read_header
from dedup.journal.format import PortableRow
from dedup.journal.learned import HELD_KINDS, NOVELTY, HeldRow, PrintRow, RuleRow
from dedup.learn.learner import LearnConfig, RuleLearner, RuleState
from dedup.learn.nearindex import NearIndex
from dedup.learn.novelty import BudgetConfig, Budgets
from dedup.learn.rules import Rule, apply_rules, parse_key, pattern_of, rule_from_spec
from dedup.learn.simhash import Shingles, distance, text_print
from dedup.store.ledger import Ledger, State
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
    "V1_BACKUP",
    "BloomFilter",
    "BudgetConfig",
    "Budgets",
    "CanonRules",
    "Canonicalizer",
    "Diagnosis",
    "FileError",
    "Geometry",
    "GeometryMismatch",
    "HeldRow",
    "IndexDamaged",
    "LearnConfig",
    "Ledger",
    "LedgerDamaged",
    "NearIndex",
    "NewUrl",
    "PortableRow",
    "PrintRow",
    "RepairReport",
    "Rule",
    "RuleLearner",
    "RuleRow",
    "RuleState",
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
    "check_compatible",
    "diagnose",
    "distance",
    "fingerprint",
    "fingerprint_many",
    "first_difference",
    "fsync_dir",
    "host_of",
    "in_use",
    "index_damage",
    "index_keys",
    "is_state_dir",
    "layer_geometry",
    "merge_files",
    "merge_states",
    "migrate",
    "naming",
    "normalize",
    "parse_key",
    "pattern_of",
    "planned_capacity",
    "read_header",
    "repair",
    "resize",
    "rule_from_spec",
    "shards_dir",
    "text_print",
]
