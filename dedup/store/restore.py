"""Bringing a state dir's Bloom filter up to date with its ledger at open.

Why apart from ``UrlSeen``: it is the one place the crash-safety rule of the
snapshots is applied. Each shard snapshot records the ledger mark it covers;
every row past a shard's mark is replayed into it, so a snapshot that is old,
missing or damaged costs replay time and never a false negative.

A mark past the ledger's last row means the ledger lost rows the snapshot had
seen (a power cut before the ledger was synced: ``UrlSeen.sync`` prevents it, a
disk that lies about fsync or a ledger restored from a backup does not). Their
seqs will be given again, to other keys, which a mark above them would keep
from ever being replayed: the mark is cut back to the ledger's last row (the
bits stay: those of the lost rows are only extra bits), and a writer rewrites
the shard at once, with the ledger synced first, so that the next open sees the
lower mark even if this process dies before its next snapshot.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from dedup.base.errors import GeometryMismatch, SnapshotError
from dedup.filter.bloom import read_snapshot, write_snapshot
from dedup.filter.shards import ShardedBloom
from dedup.store.ledger import Ledger
from dedup.url.fingerprint import halves, shard_of

__all__ = ["load_shards", "replay"]

log = logging.getLogger("dedup.store.seen")


def load_shards(bloom: ShardedBloom, ledger: Ledger, shards_dir: Path,
                crawl_id: str | None, *, writable: bool = False) -> tuple[int, list[int]]:
    """Install the valid shard snapshots of ``shards_dir`` into ``bloom``, then replay
    the ledger past each one's mark: ``(the ledger's mark, damaged shard indexes)``.
    ``writable``: rewrite at once each shard whose mark is past the ledger's end
    (the module doc)."""
    n = len(bloom.shards)
    last = ledger.last_seq()
    marks = np.zeros(n, dtype=np.int64)
    damaged = []
    ahead = []
    top = last
    for i in range(n):
        path = ShardedBloom.shard_path(shards_dir, i)
        if not path.exists():
            continue
        try:
            bf, header = read_snapshot(path, crawl_id=crawl_id)
            if (header.shard_index, header.shard_count) != (i, n):
                raise SnapshotError(f"{path.name}: holds shard {header.shard_index} of "
                                    f"{header.shard_count}, expected {i} of {n}")
            want = bloom.shards[i]
            if (bf.m, bf.k, bf.seed) != (want.m, want.k, want.seed):
                raise GeometryMismatch(f"{path.name}: geometry differs from the crawl's")
        except SnapshotError as exc:
            # The ledger is the truth: a damaged shard is rebuilt by full replay.
            log.warning("shard %d unusable, rebuilding it from the ledger: %s", i, exc)
            damaged.append(i)
            continue
        bloom.shards[i] = bf
        marks[i] = min(header.hwm, last)
        if header.hwm > last:
            ahead.append(i)
            top = max(top, header.hwm)
    if ahead:
        log.warning("%d shard file(s) cover ledger rows up to %d, the ledger ends at %d "
                    "(rows lost in a power cut): their marks are cut back to it", len(ahead),
                    top, last)
    hwm = replay(bloom, ledger, marks)
    if ahead and writable:
        ledger.sync()  # the mark written must be one the disk keeps
        for i in ahead:
            write_snapshot(ShardedBloom.shard_path(shards_dir, i), bloom.shards[i],
                           shard_index=i, shard_count=n, hwm=last, crawl_id=crawl_id)
    return hwm, damaged


def replay(bloom: ShardedBloom, ledger: Ledger, marks: np.ndarray) -> int:
    """Add ledger rows past each shard's mark to the filter; return the ledger's mark."""
    hwm = ledger.last_seq()
    if marks.size and int(marks.min()) < hwm:
        for seqs, fps, _ in ledger.batches_after(int(marks.min())):
            h = halves(fps)
            behind = seqs > marks[shard_of(h[:, 0], len(marks))]
            bloom.add_hashes(h[behind])
    return hwm
