"""The exact truth behind the Bloom filter: an append-only journal plus the
fingerprint index it owns (ledger format 2).

Format 1 kept one SQLite row per URL behind a UNIQUE fingerprint index, so every
admission dirtied random B-tree pages (217 B stored and ~14 KB written per URL
at 20M) and every "maybe seen" was a random read. Here the two jobs are split
the way IRLbot's DRUM and LSM trees split them:

- ``dedup.journal.journal`` (SQLite) is the record of truth: one appended row per batch,
  seqs that are never reused, outcomes, the frontier's text, kept counters;
- ``dedup.index.fpindex`` is the exact seen-set: 24-byte records ``(fingerprint, seq)``
  in sorted immutable runs plus an in-memory buffer, looked up a batch at a time
  and merged in the background. Its ``mark`` says which journal seqs its runs
  cover; everything past it is replayed from the journal on open, so the index
  is never ahead of, and never loses anything behind, the journal.

Order of writes: journal append (durable at commit) -> index buffer; the buffer
becomes a run only after the commit that covers it (``commit``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dedup.base.errors import StateFormatError
from dedup.index.fpindex import FingerprintIndex
from dedup.index.runs import RunFileError
from dedup.journal.format import FORGET, PortableRow, QueuedRow, State
from dedup.journal.journal import Journal
from dedup.journal.transfer import import_rows as _import_rows
from dedup.journal.transfer import rows as _rows
from dedup.store.statedir import ledger_path
from dedup.url.fingerprint import halves

__all__ = ["INDEX_SUFFIX", "Ledger", "QueuedRow", "State", "StateFormatError"]

INDEX_SUFFIX = ".index"  # ledger.sqlite -> ledger.index/: beside the file it belongs to
# Records buffered in RAM before they become a run: 3/4 of the 2**20 slots of the
# compiled table (dedup/index/fptable.py, 25 MB), which leaves room for the records
# admitted before the flush that follows the commit; ~27 B each in the sorted
# columns without it (dedup/index/fpbuffer.py). A larger first tier means fewer merges
# (measured: 44 instead of 66 B written per record at 10M, 1M against 64k).
INDEX_BUFFER = 3 << 18
# Up to this many keys a lookup asks the index's probe key by key (a page's few);
# more take one sorted pass over the buffer and the runs.
_FEW_KEYS = 1024
_READ_RETRIES = 5


class Ledger:
    """Journal + fingerprint index of one state directory, behind one small API.

    One writer (the process holding the state dir's lock); readers such as
    ``bloomcrawl stats`` open it with ``readonly=True`` beside a running crawl.
    With ``autocommit=False`` writes accumulate until ``commit()`` (group commit).
    """

    def __init__(self, path: str | Path, *, readonly: bool = False,
                 autocommit: bool = True, index_buffer: int = INDEX_BUFFER,
                 cache_kib: int | None = None) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.journal = Journal(self.path, readonly=readonly, autocommit=autocommit,
                               cache_kib=cache_kib)
        self._index: FingerprintIndex | None = None
        self._index_buffer = index_buffer

    @classmethod
    def in_dir(cls, state_dir: str | Path, *, readonly: bool = False) -> Ledger:
        """The ledger of a state directory (its meta and rows, without the filter or
        the lock ``UrlSeen`` takes): for tools that only read or fix its metadata."""
        return cls(ledger_path(state_dir), readonly=readonly)

    @property
    def index_dir(self) -> Path:
        """The fingerprint index's directory, beside the journal."""
        return self.path.with_name(self.path.stem + INDEX_SUFFIX)

    @property
    def index(self) -> FingerprintIndex:
        """The fingerprint index, opened on first use: opening checks every run whole
        and builds its in-RAM directory (O(runs' size)), which ``stats`` and other
        readers of the kept counters never need. A damaged run or manifest raises
        :class:`~dedup.base.errors.IndexDamaged` (the way out: :meth:`rebuild_index`)."""
        if self._index is None:
            self._index = self._open_index(self._index_buffer)
        return self._index

    @property
    def autocommit(self) -> bool:
        return self.journal.autocommit

    def _open_index(self, buffer: int) -> FingerprintIndex:
        """Open the runs and replay the journal past their mark into the buffer.

        An index ahead of the journal (a journal copied or imported without its
        index, as merge and resize do) is rebuilt from the journal alone."""
        directory = self.index_dir
        for attempt in range(_READ_RETRIES):
            try:
                index = FingerprintIndex(directory, buffer_records=buffer,
                                         readonly=self.readonly)
                break
            except RunFileError:
                # a reader raced a merge that replaced the runs it read about
                if not self.readonly or attempt == _READ_RETRIES - 1:
                    raise
                time.sleep(0.05)
        last_seq = self.journal.last_seq()
        if index.mark > last_seq:
            index.close()
            if self.readonly:
                raise StateFormatError(f"{directory}: index covers seq {index.mark}, "
                                       f"the ledger only {last_seq}: open it once to rebuild")
            index = FingerprintIndex.rebuild(directory, self._records(0), mark=last_seq,
                                             buffer_records=buffer)
            return index
        for his, los, seqs, tomb in self._records(index.mark):
            index.add(his, los, seqs, tombstone=tomb)
        return index

    def rebuild_index(self) -> None:
        """Rebuild the fingerprint index from the journal alone, in bounded memory,
        without reading the old one (damaged, or after ``bloomcrawl repair``
        re-issued every seq); swapped in atomically (see FingerprintIndex.rebuild)."""
        if self.readonly:
            raise PermissionError(f"{self.path}: opened read-only")
        if self._index is not None:
            self._index.close()
            self._index = None
        self._index = FingerprintIndex.rebuild(self.index_dir, self._records(0),
                                               mark=self.journal.last_seq(),
                                               buffer_records=self._index_buffer)

    def _records(self, after: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, bool]]:
        """Journal seqs past ``after`` as index records, admissions and tombstones apart."""
        for seqs, fps, kinds in self.journal.batches_after(after):
            h = halves(fps)
            tomb = kinds == FORGET
            if not tomb.any():
                yield h[:, 0], h[:, 1], seqs, False
                continue
            for mask, flag in ((~tomb, False), (tomb, True)):
                if mask.any():
                    yield h[mask, 0], h[mask, 1], seqs[mask], flag

    # -- the URL-seen path -----------------------------------------------------------

    def held_among(self, fps: bytes | bytearray | memoryview) -> list[int]:
        """Indexes, ascending, of the fingerprints (16 bytes each, ``hi || lo``
        little-endian, concatenated) the ledger holds: the one exact lookup. A page's
        few keys go to the index's compiled probe (``FingerprintIndex.held_among``);
        a large batch (a merge's, a repair's check) takes one sorted pass over the
        buffer and the runs (``FingerprintIndex.lookup``)."""
        if len(fps) <= 16 * _FEW_KEYS:
            return self.index.held_among(bytes(fps)) if len(fps) else []
        h = halves(fps)
        present, _ = self.index.lookup(h[:, 0], h[:, 1])
        return np.flatnonzero(present).tolist()  # type: ignore[no-any-return]

    def forgotten_among(self, fps: bytes) -> list[int]:
        """Indexes, ascending, of the fingerprints (as :meth:`held_among` takes them)
        forgotten (:meth:`forget`) and not admitted since."""
        return self.index.forgotten_among(bytes(fps)) if len(fps) else []

    def append(self, fps: bytes, *, depth: int = 0, urls: Sequence[str] | None = None,
               hosts: Sequence[str] | None = None, h: np.ndarray | None = None) -> range:
        """Admit fingerprints known to be absent (one journal row, one index add).

        ``urls``/``hosts`` keep the frontier text (the crawler); the pure seen-set
        passes none. ``h`` saves recomputing the halves the caller already has."""
        seqs = self.journal.append(fps, depth=depth, urls=urls, hosts=hosts)
        if len(seqs):
            h = halves(fps) if h is None else h
            self.index.add_consecutive(h[:, 0], h[:, 1], seqs.start)
            if self.journal.autocommit:
                self._flush_if_full()
        return seqs

    def last_seq(self) -> int:
        """Highest seq ever handed out (tombstones included)."""
        return self.journal.last_seq()

    def batches_after(self, seq: int) -> Iterator[tuple[np.ndarray, bytes, np.ndarray]]:
        """``(seqs, fps, kinds)`` past ``seq``: the Bloom filter's replay stream."""
        return self.journal.batches_after(seq)

    # -- rows ------------------------------------------------------------------------

    def get(self, fp: bytes) -> dict[str, Any] | None:
        """What the ledger knows of one fingerprint (None if absent or forgotten)."""
        present, seq = self.index.lookup(*halves(fp).T)
        if not present[0]:
            return None
        row = self.journal.row(int(seq[0]))
        if row is None:  # pragma: no cover - the index never runs ahead of the journal
            return None
        return {"seq": row.seq, "url": row.url, "host": row.host, "depth": row.depth,
                "state": row.state.name.lower() if row.state is not None else None,
                "status": row.status, "error": row.error, "updated_at": row.at}

    def forget(self, fps: Iterable[bytes]) -> int:
        """Tombstone the present fingerprints so they count as new again; returns how
        many. A forgotten URL still queued leaves the frontier (marked skipped)."""
        fps = list(dict.fromkeys(fps))
        if not fps:
            return 0
        h = halves(b"".join(fps))
        present, old = self.index.lookup(h[:, 0], h[:, 1])
        idx = np.flatnonzero(present)
        if not len(idx):
            return 0
        seqs = self.journal.append_forget(b"".join(fps[i] for i in idx.tolist()))
        self.index.forget(h[idx, 0], h[idx, 1], np.arange(seqs.start, seqs.stop, dtype=np.uint64))
        queued = [int(s) for s in old[idx] if self._is_queued(int(s))]
        self.journal.mark_many([(s, State.SKIPPED, None, "forgotten") for s in queued])
        if self.journal.autocommit:
            self._flush_if_full()
        return len(idx)

    def _is_queued(self, seq: int) -> bool:
        row = self.journal.row(seq)
        return row is not None and row.state is State.QUEUED

    def mark(self, seq: int, state: State, *, status: int | None = None,
             error: str | None = None) -> None:
        self.journal.mark(seq, state, status=status, error=error)

    def mark_many(self, rows: Iterable[tuple[int, State, int | None, str | None]]) -> None:
        """Record fetch outcomes in the open transaction."""
        self.journal.mark_many(rows)

    def outcomes(self) -> Iterator[tuple[int, State, int | None, str | None, float]]:
        """``(seq, state, status, error, at)`` of every row marked done, in seq order."""
        return self.journal.outcomes()

    def queued(self, limit: int, *, after_seq: int = 0, host: str | None = None
               ) -> list[QueuedRow]:
        """Page in the durable frontier, oldest first (optionally one host's)."""
        return self.journal.queued(limit, after_seq=after_seq, host=host)

    def queued_hosts(self) -> list[str]:
        return self.journal.queued_hosts()

    def counts(self) -> dict[str, int]:
        """Per-state counts from kept counters: O(1) at any size."""
        return self.journal.counts()

    def __len__(self) -> int:
        """URLs admitted and not forgotten (from the kept counters)."""
        c = self.journal.counts()
        return c["admitted"] - c["forgotten"]

    # -- bulk copy (fleet merge / resize) -----------------------------------------------

    def rows(self) -> Iterator[PortableRow]:
        """Every seq in order, in the portable form merge and resize move."""
        return _rows(self.journal)

    def live_rows(self) -> Iterator[PortableRow]:
        """The rows of the keys present now: an admission later forgotten is left out
        (two passes; tombstones are rare, so only their keys are held in memory).
        Seq order, except that a key readmitted after a forget comes last."""
        forgotten = {r.fp for r in self.rows() if r.state is None}
        last: dict[bytes, PortableRow | None] = {}
        for row in self.rows():
            if row.fp in forgotten:
                last[row.fp] = row if row.state is not None else None
            else:
                yield row
        yield from (row for row in last.values() if row is not None)

    def import_rows(self, rows: Iterable[tuple]) -> int:
        """Append rows in the form ``live_rows()`` yields, skipping fingerprints
        already present (union by fingerprint); returns how many were added.
        Tombstones are ignored: feed ``live_rows()``, not ``rows()``."""
        added = 0
        chunk: list[PortableRow] = []
        for raw in rows:
            chunk.append(PortableRow(*raw))
            if len(chunk) >= 8192:
                added += self._import(chunk)
                chunk = []
        added += self._import(chunk)
        return added

    def _import(self, chunk: list[PortableRow]) -> int:
        if not chunk:
            return 0
        keep = [r for r in chunk if r.state is not None]  # tombstones: nothing to add
        if not keep:
            return 0
        blob = b"".join(r.fp for r in keep)
        h = halves(blob)
        present = np.zeros(len(keep), dtype=bool)
        present[self.held_among(blob)] = True
        # a fingerprint twice in one chunk keeps its first row
        _, first = np.unique(h, axis=0, return_index=True)
        fresh = np.zeros(len(keep), dtype=bool)
        fresh[first] = True
        fresh &= ~present
        new = [keep[i] for i in np.flatnonzero(fresh).tolist()]
        if not new:
            return 0
        start = self.journal.last_seq() + 1
        _import_rows(self.journal, new)
        end = self.journal.last_seq() + 1
        hn = halves(b"".join(r.fp for r in new))
        self.index.add(hn[:, 0], hn[:, 1], np.arange(start, end, dtype=np.uint64))
        if self.journal.autocommit:
            self._flush_if_full()
        return len(new)

    # -- metadata --------------------------------------------------------------------

    def meta_get(self, key: str, default: Any = None) -> Any:
        return self.journal.meta_get(key, default)

    def meta_set(self, key: str, value: Any) -> None:
        self.journal.meta_set(key, value)

    def meta_items(self) -> dict[str, Any]:
        return self.journal.meta_items()

    # -- transactions ------------------------------------------------------------------

    def commit(self) -> None:
        """Make pending writes durable, then let the index write a run of them."""
        self.journal.commit()
        self._flush_if_full()

    def sync(self) -> None:
        """Make every committed row durable across a power cut (``Journal.sync``)."""
        self.journal.sync()

    def _flush_if_full(self) -> None:
        index = self._index
        if index is not None and index.needs_flush and not self.readonly:
            self._flush_index()

    def _flush_index(self) -> None:
        """Write the buffer as a run covering the journal's last seq, synced first: a
        run is fsynced, and a mark past what the journal made durable would have the
        whole index rebuilt after a power cut (O(ledger))."""
        assert self._index is not None
        self.journal.sync()
        self._index.flush(self.journal.last_seq())

    @property
    def in_transaction(self) -> bool:
        """Writes are waiting for ``commit`` (the open transaction)."""
        return self.journal.in_transaction

    def index_stats(self) -> dict[str, Any]:
        return self.index.stats()

    def close(self, *, commit: bool = True) -> None:
        """Commit pending writes and write the index buffer as a run, so the next
        open replays nothing (after a crash it replays at most a buffer's worth);
        an abandoned merge is redone on the next open. ``commit=False``: discard
        pending writes and the index buffer instead, as a crash would (a writer
        that failed halfway through a group)."""
        try:
            if not self.readonly and commit:
                self.journal.commit()
                if self._index is not None and self._index.stats()["buffer"]:
                    self._flush_index()
        finally:
            if self._index is not None:
                self._index.close()
            self.journal.close(commit=commit)

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
