"""The exact seen-set: fingerprints in an LSM tree (a buffer + immutable sorted runs).

Owned by the ledger, which stays the record of truth: every record carries the
ledger seq that created it (top bit set = tombstone, "forgotten"), and the
``MANIFEST`` names the live runs and ``mark``, the highest ledger seq they cover.
The owner's protocol:

1. append ledger rows and :meth:`FingerprintIndex.add` / :meth:`forget` them at
   once, before their commit (the buffer is memory only: a crash loses it with
   the uncommitted rows);
2. after a commit, :meth:`flush` ``(upto_seq)`` once :attr:`needs_flush` says so:
   the buffered records with seq <= upto_seq become one new run and ``mark`` moves;
3. on open, replay ledger rows with seq > :attr:`mark` through ``add``/``forget``.

So a kill -9 anywhere loses nothing: what is not in a run listed by the manifest
is past ``mark`` and comes back from the ledger. Run files the manifest does not
list (a flush or merge killed before its manifest write, or merged-away inputs
killed before their unlink) are orphans and are deleted on open.

Every run named by the manifest is opened, and so checked whole (header, size,
records' CRC), when the index is opened; a damaged or missing run or manifest
raises :class:`~dedup.base.errors.IndexDamaged`. Since the index is derived from the
journal, :meth:`FingerprintIndex.rebuild` is the way out: it builds new runs
beside the old ones under a manifest of its own and swaps it in with one atomic
rename, so an interrupted rebuild leaves the old index as it was.

Newest wins by seq (ledger seqs only grow), so a tombstone hides older admissions
and an admission after a forget revives the key. Runs are merged size-tiered
(``fanout`` runs of a tier -> one run of the next) by a background thread that
streams a chunked k-way merge (memory: one chunk per input); the owner thread
installs a finished merge at its next call, so the run list only ever changes on
the owner's thread. Tombstones are dropped only by merges that include the
oldest run (nothing older is left for them to hide).

One owner: one process holds the directory (the state dir's lock) and calls the
index from one thread; only the merge thread runs beside it, on immutable files.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from dedup.base.atomic import atomic_write_bytes, fsync_dir
from dedup.base.errors import IndexDamaged
from dedup.base.heap import give_back
from dedup.index import fptable
from dedup.index.fpbuffer import Buffer
from dedup.index.merging import key_order, merge_runs
from dedup.index.runs import (
    SEQ_MASK,
    TOMBSTONE,
    Run,
    RunFileError,
    check_run_header,
    verify_run,
    write_run,
)
from dedup.index.sortedkeys import BLOCK_RECORDS, Query
from dedup.native import compiled as _compiled

MANIFEST = "MANIFEST"
REBUILD_MANIFEST = "MANIFEST.rebuild"  # a rebuild's manifest until it is swapped in
MANIFEST_FORMAT = 1
_RUN_PREFIX, _RUN_SUFFIX = "run-", ".fpr"
# Up to this many keys (a page's) a lookup goes key by key in C-level bisects;
# up to MAPLESS_BATCH (a group of pages') each part filters them vectorized and
# reads a candidate's bucket with pread; above it (replay, rebuild) each run is
# searched through its map, released after the lookup.
SMALL_BATCH = 48
MAPLESS_BATCH = 1 << 16
_TOMB = int(TOMBSTONE)


class ManifestError(IndexDamaged):
    """The index MANIFEST is damaged or names a file it cannot own."""


class FingerprintIndex:
    """Exact set of 128-bit fingerprints (as uint64 halves) with forgetting, on disk.

    ``buffer_records`` is when :attr:`needs_flush` turns True; ``fanout`` how many
    runs of one size tier are merged into one; ``background=False`` merges in the
    caller's thread during :meth:`flush` (deterministic, for tests and rebuilds).
    ``manifest`` and ``first_id`` are :meth:`rebuild`'s: an index built under a
    manifest of another name beside the live one, with run names of its own,
    deletes no orphans (the live index's runs are not its to delete).
    """

    def __init__(self, directory: str | os.PathLike[str], *, buffer_records: int = 1 << 20,
                 fanout: int = 4, background: bool = True,
                 block_records: int = BLOCK_RECORDS, readonly: bool = False,
                 manifest: str = MANIFEST, first_id: int = 0) -> None:
        if buffer_records < 1 or fanout < 2:
            raise ValueError("buffer_records must be >= 1 and fanout >= 2")
        self.directory = Path(directory)
        # A reader (``stats``/``check`` beside a live crawl) must not create, merge
        # or delete anything: an unlisted run may be the writer's merge in progress.
        self.readonly = readonly
        if not readonly:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.buffer_records, self.fanout = buffer_records, fanout
        self.background, self.block_records = background, block_records
        self._buffer: Buffer | fptable.TableBuffer = (
            fptable.TableBuffer(buffer_records) if fptable.available()
            else Buffer(recent_max=min(1 << 16, max(4, buffer_records // 16)),
                        capacity=buffer_records))
        self._merge: _Merge | None = None
        # the parts kept open in C for held_among (None: made at its next call);
        # dropped whenever a part changes: a run added, merged or closed, a new table
        self._probe: Any = None
        self._probe_table = -1  # the buffer table's generation the probe holds
        self._manifest = manifest
        self.mark, next_id, names = read_manifest(self.directory / manifest)
        self._next_id = max(next_id, first_id)
        self._runs: list[Run] = []  # newest first
        try:
            for name in names:
                self._runs.append(Run(self.directory / name))
        except BaseException:
            self._close_runs()
            raise
        if not readonly and manifest == MANIFEST:
            self._delete_orphans(set(names))

    # -- owner API ----------------------------------------------------------------------
    def add(self, his: np.ndarray, los: np.ndarray, seqs: np.ndarray, *,
            tombstone: bool = False) -> None:
        """Record that the fingerprints were admitted (or forgotten) at ledger ``seqs``."""
        self._install()
        hi, lo, seq = _u64(his), _u64(los), _u64(seqs)
        if not len(hi) == len(lo) == len(seq):
            raise ValueError("his, los and seqs must have the same length")
        if len(seq) and int(seq.max()) > int(SEQ_MASK):
            raise ValueError("seqs must be below 2**63")
        self._buffer.add(hi, lo, seq | TOMBSTONE if tombstone else seq)
        self._drop_stale_probe()

    def add_consecutive(self, his: np.ndarray, los: np.ndarray, first_seq: int) -> None:
        """:meth:`add` of admissions at ledger seqs ``first_seq, first_seq + 1, ...``:
        the ledger's append, the hot path."""
        self._install()
        hi, lo = _u64(his), _u64(los)
        if first_seq < 0 or first_seq + len(hi) > int(SEQ_MASK) + 1:
            raise ValueError("seqs must be below 2**63")
        self._buffer.add_consecutive(hi, lo, int(first_seq))
        self._drop_stale_probe()

    def forget(self, his: np.ndarray, los: np.ndarray, seqs: np.ndarray) -> None:
        """Tombstone the fingerprints at ledger ``seqs``: they read as absent until re-added."""
        self.add(his, los, seqs, tombstone=True)

    def lookup(self, his: np.ndarray, los: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(present, seq)`` per key, in input order; ``seq`` is -1 where not present.
        Buffer, then runs newest first: a key stops at its first (newest) record."""
        raw = self._raw(his, los)
        present = raw >= 0  # a tombstone's raw seq has its top bit set: negative here
        return present, np.where(present, raw, -1)

    def forgotten_among(self, fps: bytes) -> list[int]:
        """Indexes of the 16-byte fingerprints in ``fps`` whose newest record is a
        tombstone: forgotten (``forget``) and not admitted since. A merge that keeps
        nothing older drops tombstones, and with them this answer."""
        h = np.frombuffer(fps, dtype="<u8")
        return np.flatnonzero(self._raw(h[0::2], h[1::2]) < -1).tolist()  # type: ignore[no-any-return]

    def _raw(self, his: np.ndarray, los: np.ndarray) -> np.ndarray:
        """Per key the newest record's seq (negative for a tombstone), -1 where none."""
        self._install()
        hi, lo = _u64(his), _u64(los)
        if len(hi) <= SMALL_BATCH:
            return (self._find_few(hi, lo) if _compiled.lookup is not None
                    else self._find_each(hi.tolist(), lo.tolist()))
        return self._search(hi, lo, mapped=len(hi) > MAPLESS_BATCH)

    def held_among(self, fps: bytes) -> list[int]:
        """Indexes of the 16-byte fingerprints in ``fps`` (``hi || lo`` little-endian,
        a page's few) that the index holds, ascending: :meth:`lookup`'s answer with
        fewer numpy steps, for the seen-test's call per page (or per URL).

        Compiled, one C call asks every part (:meth:`_parts_probe`, buffers kept open
        between calls): asking each part from Python was ~4.5 us for one key, most
        of a "maybe seen" ``add``; without it, key by key in Python."""
        if self._merge is not None:
            self._install()
        lookup = _compiled.lookup
        probe = None
        if lookup is not None:
            probe = self._probe if self._probe is not None else self._parts_probe(lookup)
        if probe is not None:
            return probe.held(fps)  # type: ignore[no-any-return]
        h = np.frombuffer(fps, dtype="<u8")
        raw = self._find_each(h[0::2].tolist(), h[1::2].tolist()).tolist()
        return [i for i, r in enumerate(raw) if r >= 0]

    def _parts_probe(self, lookup: Any) -> Any:
        """The compiled ``IndexParts`` over the buffer's table and the runs, newest
        first, kept until a part changes; None where a part is not one it reads
        (the Python buffer; a run without its file)."""
        buf = self._buffer
        if not isinstance(buf, fptable.TableBuffer) or not hasattr(lookup, "IndexParts"):
            return None
        parts = [buf.probe_spec()]
        for run in self._runs:
            if run.count:
                spec = run.keys.probe_spec()
                if spec is None:
                    return None
                parts.append(spec)
        self._probe = lookup.IndexParts(tuple(parts))
        self._probe_table = buf.generation
        return self._probe

    def _drop_stale_probe(self) -> None:
        """Let go of the probe once the buffer's table is another (it grew): the
        probe holds the old one, which would else stay in RAM."""
        if self._probe is not None and \
                self._probe_table != self._buffer.generation:  # type: ignore[union-attr]
            self._probe = None

    def _find_few(self, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
        """A page-sized batch with the compiled lookup: each part's ``find_into`` (one
        C call) on the keys the newer parts did not hold, in the order asked (no
        sort, no query tuples: a page's lookup paid ~30 us of Python per call in
        them); the seq found (negative for a tombstone), -1 where none."""
        left = np.ones(len(hi), dtype=np.uint8)
        got = np.zeros(len(hi), dtype=np.uint64)
        for part in (*self._buffer.parts, *self._runs):
            if part.count:
                part.find_into(hi, lo, left, got)
        out = got.view(np.int64)  # tombstones (top bit): negative
        out[left != 0] = -1
        return out

    def _find_each(self, his: list[int], los: list[int]) -> np.ndarray:
        """A page-sized batch key by key: the seq found (negative for a tombstone),
        -1 where none."""
        raw = [-1] * len(his)
        todo: list[Query] = list(zip(range(len(his)), his, los, strict=True))
        for part in (*self._buffer.parts, *self._runs):
            if not todo:
                break
            if part.count:
                hits, todo = part.find_each(todo)
                for i, got in hits:
                    raw[i] = got if got < _TOMB else -2
        return np.array(raw, dtype=np.int64)

    def _search(self, hi: np.ndarray, lo: np.ndarray, *, mapped: bool) -> np.ndarray:
        """A larger batch, vectorized: buffer, then runs newest first, each one step
        over the keys still unanswered, sorted (``mapped``: a numpy search through
        the runs' maps, released after); the seq found (negative for a tombstone),
        -1 where none."""
        order = key_order(hi, lo)
        keys_hi, keys_lo = hi[order], lo[order]
        left = np.ones(len(order), dtype=np.uint8)  # each part is asked about the keys
        got = np.zeros(len(order), dtype=np.uint64)  # the newer ones did not hold
        for part in (*self._buffer.parts, *self._runs):
            if part.count:
                part.find_into(keys_hi, keys_lo, left, got, mapped=mapped)
        if mapped:
            for run in self._runs:
                run.release()
        out = np.full(len(hi), -1, dtype=np.int64)
        found = left == 0
        out[order[found]] = got[found].view(np.int64)  # tombstones (top bit): negative
        return out

    @property
    def needs_flush(self) -> bool:
        """True once the buffer holds ``buffer_records`` records."""
        return self._buffer.size >= self.buffer_records

    def flush(self, upto_seq: int) -> None:
        """Write the buffered records with seq <= ``upto_seq`` as a new run, move
        ``mark`` to ``upto_seq`` and start a merge if a tier is full.

        Call only after the ledger commit that covers ``upto_seq``.
        """
        if self.readonly:
            raise PermissionError(f"{self.directory}: index opened read-only")
        self._install()
        self._probe = None  # the table is taken and a run comes
        hi, lo, seq = self._buffer.take(upto_seq)  # sorted, one record per key
        if len(hi) and not self._runs:  # nothing older for a tombstone to hide
            live = (seq & TOMBSTONE) == 0
            if not live.all():
                hi, lo, seq = hi[live], lo[live], seq[live]
        if len(hi):
            name = self._new_name()
            write_run(self.directory / name, [(hi, lo, seq)], block_records=self.block_records)
            self._runs.insert(0, Run(self.directory / name))
        self.mark = max(self.mark, int(upto_seq))
        self._write_manifest()
        self._maybe_merge()
        give_back()  # the buffer's columns, just written out

    def wait_merges(self) -> None:
        """Block until no merge is running or pending, installing each as it ends."""
        while self._merge is not None:
            self._merge.thread.join()
            self._install()

    def close(self, *, wait: bool = False) -> None:
        """Stop: finish and install a running merge (``wait``) or abandon it (its
        temporary file is removed); unmap the runs. Unflushed records stay in the
        ledger past ``mark``."""
        if self._merge is not None:
            if wait:
                self.wait_merges()
            else:
                self._merge.stop.set()
                self._merge.thread.join()
                self._merge = None
        self._close_runs()

    def __enter__(self) -> FingerprintIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        """Records held (runs + buffer): an upper bound on the present keys, since a
        key may have records in several runs and tombstones count too."""
        return sum(r.count for r in self._runs) + self._buffer.size

    def stats(self) -> dict[str, Any]:
        """Runs, their records and bytes, the buffer's records and bytes (sorted part),
        the mark, whether merging."""
        return {"runs": len(self._runs), "run_records": [r.count for r in self._runs],
                "bytes": sum(r.nbytes for r in self._runs), "buffer": self._buffer.size,
                "buffer_bytes": self._buffer.nbytes(),
                "mark": self.mark, "merging": self._merge is not None}

    @classmethod
    def rebuild(cls, directory: str | os.PathLike[str],
                batches: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray, bool]], *,
                mark: int, **options: Any) -> FingerprintIndex:
        """A fresh index in ``directory`` from ledger rows ``(his, los, seqs, tombstone)``
        in seq order, covering up to ``mark``.

        Built beside the old index (new run names, under :data:`REBUILD_MANIFEST`),
        never reading it, so a damaged one is no obstacle; the new manifest then
        replaces ``MANIFEST`` in one rename and the old runs are deleted. Killed
        before the rename, the old index is untouched and the new runs are orphans
        that the next open deletes; after it, the old runs are."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / REBUILD_MANIFEST).unlink(missing_ok=True)
        background = options.pop("background", True)
        index = cls(directory, background=False, manifest=REBUILD_MANIFEST,
                    first_id=_free_id(directory), **options)
        try:
            top = 0
            for his, los, seqs, tomb in batches:
                index.add(his, los, seqs, tombstone=tomb)
                if len(seqs):
                    top = max(top, int(np.max(seqs)))
                if index.needs_flush:
                    index.flush(top)
            index.flush(mark)
            os.replace(directory / REBUILD_MANIFEST, directory / MANIFEST)
            fsync_dir(directory)
        except BaseException:
            index.close()
            raise
        index._manifest = MANIFEST
        index._delete_orphans({r.path.name for r in index._runs})
        index.background = background
        return index

    # -- internals ----------------------------------------------------------------------
    def _new_name(self) -> str:
        name = f"{_RUN_PREFIX}{self._next_id:012d}{_RUN_SUFFIX}"
        self._next_id += 1
        return name

    def _write_manifest(self) -> None:
        body = {"format": MANIFEST_FORMAT, "mark": self.mark, "next_id": self._next_id,
                "runs": [r.path.name for r in self._runs]}
        text = json.dumps(body, sort_keys=True)
        crc = zlib.crc32(text.encode())
        atomic_write_bytes(self.directory / self._manifest, f"{text}\n{crc}\n".encode())

    def _delete_orphans(self, live: set[str]) -> None:
        for p in self.directory.iterdir():
            orphan_run = p.name.startswith(_RUN_PREFIX) and p.name.endswith(_RUN_SUFFIX)
            stale_tmp = p.name.startswith(".") and p.name.endswith(".tmp")
            if (orphan_run and p.name not in live) or stale_tmp or p.name == REBUILD_MANIFEST:
                p.unlink(missing_ok=True)

    def _tiers(self) -> list[int]:
        # tier t holds runs of about buffer * fanout**t records; the bounds sit halfway
        # between, so a flush a little over ``buffer_records`` (the owner flushes
        # whole batches) or a merge that lost duplicates stays in its tier
        tiers = []
        for r in self._runs:
            t, size = 0, self.buffer_records * (1 + self.fanout) // 2
            while r.count > size:
                t, size = t + 1, size * self.fanout
            tiers.append(t)
        return tiers

    def _maybe_merge(self) -> None:
        if self._merge is not None:
            return
        tiers = self._tiers()
        for i in range(len(tiers) - self.fanout + 1):
            if len(set(tiers[i:i + self.fanout])) == 1:
                group = self._runs[i:i + self.fanout]
                oldest = i + self.fanout == len(self._runs)
                self._merge = _Merge(self.directory / self._new_name(), group, oldest,
                                     self.block_records)
                if self.background:
                    self._merge.thread.start()
                else:
                    self._merge.run()
                    self._install()
                return

    def _install(self) -> None:
        m = self._merge
        if m is None or m.thread.is_alive() or not m.done.is_set():
            return
        self._merge = None
        if m.error is not None:
            raise m.error
        self._probe = None  # it reads the inputs' files
        i = self._runs.index(m.inputs[0])
        # the inputs' directories and filters go before the merged run's are read: the
        # two at once were the transient peak of a Scrapy dupefilter's whole run
        # (bench/README.md); nothing looks them up in between (one owner thread)
        for r in m.inputs:
            r.close()
        try:
            new = [Run(m.path)] if m.count else []
        except BaseException:
            self._runs[i:i + len(m.inputs)] = [Run(r.path) for r in m.inputs]
            raise
        self._runs[i:i + len(m.inputs)] = new
        self._write_manifest()
        for r in m.inputs:
            r.path.unlink(missing_ok=True)
        give_back()  # what the merge thread freed in its arena
        self._maybe_merge()

    def _close_runs(self) -> None:
        self._probe = None
        for r in self._runs:
            r.close()
        self._runs = []


class _Merge:
    """One merge of contiguous runs into a new run file, run in a thread or inline."""

    def __init__(self, path: Path, inputs: list[Run], drop_tombstones: bool,
                 block_records: int) -> None:
        self.path, self.inputs = path, inputs
        self.drop_tombstones, self.block_records = drop_tombstones, block_records
        self.stop, self.done = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.count = 0
        self.thread = threading.Thread(target=self.run, name="fpindex-merge", daemon=True)

    def run(self) -> None:
        try:
            self.count = write_run(self.path,
                                   merge_runs(self.inputs, drop_tombstones=self.drop_tombstones),
                                   block_records=self.block_records,
                                   should_stop=self.stop.is_set,
                                   expect=sum(r.count for r in self.inputs))
            if not self.count:
                self.path.unlink(missing_ok=True)
            # now, not at the install: the owner's opening of the new run would
            # otherwise come on top of the pages this thread's steps freed
            give_back()
        except InterruptedError:
            pass
        except BaseException as exc:  # surfaced on the owner's thread by _install
            self.error = exc
        finally:
            self.done.set()


def verify_index(directory: str | os.PathLike[str], *, attempts: int = 5,
                 records: bool = True) -> int:
    """Check the index in ``directory`` whole without opening it: the MANIFEST and
    every run it names (header, size, records' CRC; :func:`dedup.index.runs.verify_run`),
    in bounded memory and no directory built. Returns the records checked; raises
    :class:`~dedup.base.errors.IndexDamaged`. A missing directory is an empty index.

    ``records=False`` checks each run's header and size only
    (:func:`dedup.index.runs.check_run_header`): O(runs), not O(records), for a
    report beside a running crawl; a run truncated or cut short is still found,
    a flipped byte inside its records only by the full check or by opening it.

    Safe beside the writer: a run that vanishes while it is read is a merge that
    replaced it (the manifest changed), and the check starts again, up to
    ``attempts`` times; a run still missing under an unchanged manifest is damage."""
    directory = Path(directory)
    for attempt in range(attempts):
        _, _, names = read_manifest(directory / MANIFEST)
        try:
            check = verify_run if records else check_run_header
            return sum(check(directory / name) for name in names)
        except RunFileError:
            if attempt == attempts - 1 or read_manifest(directory / MANIFEST)[2] == names:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _free_id(directory: Path) -> int:
    """A run id above every run file's in ``directory`` and the manifest's ``next_id``
    if it can be read: a rebuild's run names collide with no file, live or orphan."""
    top = 0
    with contextlib.suppress(IndexDamaged):
        top = read_manifest(directory / MANIFEST)[1]
    for p in directory.glob(f"{_RUN_PREFIX}*{_RUN_SUFFIX}"):
        digits = p.name[len(_RUN_PREFIX):-len(_RUN_SUFFIX)]
        if digits.isdigit():
            top = max(top, int(digits) + 1)
    return top


def _u64(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.uint64).reshape(-1)


def read_manifest(path: Path) -> tuple[int, int, list[str]]:
    """``(mark, next_id, run names newest first)``; a missing manifest is an empty index.
    Public for ``dedup.admin.salvage``, which lists the runs of a damaged index."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0, 0, []
    try:
        text, crc, *rest = data.decode().split("\n")
        if int(crc) != zlib.crc32(text.encode()) or rest != [""]:
            raise ValueError("checksum mismatch")
        body = json.loads(text)
        mark, next_id, names = body["mark"], body["next_id"], body["runs"]
        if body["format"] != MANIFEST_FORMAT:
            raise ValueError(f"format {body['format']}, this build reads {MANIFEST_FORMAT}")
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"index manifest {path} is damaged: {exc}") from exc
    ok = (isinstance(mark, int) and 0 <= mark < 1 << 63 and isinstance(next_id, int)
          and next_id >= 0 and isinstance(names, list)
          and all(isinstance(n, str) and n.startswith(_RUN_PREFIX) and n.endswith(_RUN_SUFFIX)
                  and "/" not in n and len(n) < 64 for n in names)
          and len(set(names)) == len(names))
    if not ok:
        raise ManifestError(f"index manifest {path} is damaged: bad fields")
    return mark, next_id, names
