"""Which parts of a state directory are damaged: decided here, once.

A state directory holds one record of truth, the ledger (the SQLite journal and
its WAL), and parts derived from it: the fingerprint index (runs + MANIFEST) and
the shard snapshots. The way out differs: a damaged ledger is salvaged
(``dedup.admin.salvage``, rows on bad pages are lost); a damaged derived part is
rebuilt from the journal and nothing is lost. ``bloomcrawl repair`` asks
:func:`diagnose` so that it touches only what is damaged and says what it found;
``bloomcrawl stats`` asks :func:`index_damage` to report a damaged index.
Everything here only reads (safe beside a running crawl, except that a WAL
being written may look torn).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dedup.admin.salvage import classify
from dedup.base.errors import IndexDamaged, SnapshotError
from dedup.filter.bloom import read_snapshot
from dedup.filter.shards import ShardedBloom
from dedup.index.fpindex import verify_index
from dedup.journal.journal import Journal
from dedup.store.ledger import INDEX_SUFFIX
from dedup.store.statedir import ledger_path, shards_dir

__all__ = ["Diagnosis", "diagnose", "index_damage", "ledger_damage"]


@dataclass(frozen=True)
class Diagnosis:
    """Each part's damage as a sentence naming the file ("" = whole)."""

    ledger: str = ""  # the journal file
    wal: str = ""  # its write-ahead log
    index: str = ""  # the fingerprint index: a run or the MANIFEST
    shards: list[str] = field(default_factory=list)  # unusable or missing shard files
    index_records: int = 0  # records checked in a whole index

    @property
    def ledger_damaged(self) -> bool:
        """The record of truth is damaged: only a salvage helps, and it may lose rows."""
        return bool(self.ledger or self.wal)

    @property
    def derived_damaged(self) -> bool:
        """The index or a shard file needs rebuilding from the journal (nothing lost)."""
        return bool(self.index or self.shards)


def diagnose(state_dir: str | Path) -> Diagnosis:
    """Check every part of ``state_dir``: the ledger (WAL frames, every row's
    checksum: :func:`ledger_damage`), the index (every run whole, see
    :func:`dedup.index.fpindex.verify_index`) and the shard files (checksums). Reads each
    file once; time proportional to the directory's size."""
    d = Path(state_dir)
    ledger, wal = ledger_damage(d)
    index, records = "", 0
    try:
        records = verify_index(_index_dir(d))
    except IndexDamaged as exc:
        index = str(exc)
    shards = [] if ledger else _shard_damage(d)
    return Diagnosis(ledger=ledger, wal=wal, index=index, shards=shards,
                     index_records=records)


def index_damage(state_dir: str | Path, *, records: bool = True) -> str:
    """What is wrong with ``state_dir``'s fingerprint index ("" if whole).
    ``records=False``: the manifest and each run's header and size only
    (``verify_index``), what ``bloomcrawl stats`` checks."""
    try:
        verify_index(_index_dir(Path(state_dir)), records=records)
    except IndexDamaged as exc:
        return str(exc)
    return ""


def ledger_damage(state_dir: str | Path) -> tuple[str, str]:
    """``(journal damage, WAL damage)`` of ``state_dir``'s ledger ("" where whole), as
    a resume checks it before its first fetch (:func:`dedup.admin.salvage.classify`: the
    WAL's frames, every row against its checksum)."""
    damage = classify(state_dir)
    return damage.ledger, damage.wal


def _index_dir(state_dir: Path) -> Path:
    path = ledger_path(state_dir)
    return path.with_name(path.stem + INDEX_SUFFIX)


def _shard_damage(state_dir: Path) -> list[str]:
    """The shard files a reopen would have to rebuild: unreadable, or missing while
    others exist (a crawl writes them all)."""
    with Journal(ledger_path(state_dir), readonly=True) as journal:
        meta = journal.meta_items()
    geometry = meta.get("geometry") or {}
    n = geometry.get("shards") if isinstance(geometry, dict) else None
    crawl_id = meta.get("crawl_id")
    out = []
    folder = shards_dir(state_dir)
    files = sorted(folder.glob("shard-*.bloom")) if folder.is_dir() else []
    count = n if isinstance(n, int) and n > 0 else len(files)
    for i in range(count):
        path = ShardedBloom.shard_path(folder, i)
        if not path.exists():
            if files:
                out.append(f"{path}: missing")
            continue
        try:
            read_snapshot(path, crawl_id=crawl_id if isinstance(crawl_id, str) else None)
        except SnapshotError as exc:
            out.append(f"{path}: {exc}")
    return out
