"""Newest-wins merging of fingerprint records: one batch, or runs streamed in chunks.

Both the flush of the index buffer and the background merge of runs reduce many
records of one fingerprint to the newest (highest ledger seq, tombstone bit
masked; ledger seqs only grow), and may drop tombstones when nothing older is
left for them to hide. The run merge streams: it holds one chunk per input run,
whatever the runs' sizes, so a merge of billions of records runs in a few MB.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from dedup.index.runs import Run
from dedup.index.sortedkeys import SEQ_MASK, TOMBSTONE

# records read per input run per step (96 KiB): a step's temporaries (the chunks,
# their concatenation, its sorted copy) are a few times fanout * MERGE_CHUNK records
# (fanout 4: 1.3 MB here, 5 MB at 1 << 14), and a merge's step was the transient peak
# of a whole Scrapy run (bench/README.md, "Scrapy dupefilter"); a merge of 2M records
# took the same CPU at 1 << 12 as at 1 << 14, below it the per-step Python shows
MERGE_CHUNK = 1 << 12


def key_order(hi: np.ndarray, lo: np.ndarray, seq: np.ndarray | None = None, *,
              in_runs: bool = False) -> np.ndarray:
    """The indexes that sort records by ``(hi, lo)``, then masked ``seq`` if given,
    stably. Fingerprints almost never share ``hi``, so one sort of ``hi`` is checked
    and kept: a three-key ``lexsort`` cost ten times as much on a merge's
    concatenated runs. Where no two share ``hi`` any sort gives the one order, and
    where two do the ``lexsort`` decides, so the first sort need not be stable:
    numpy's quicksort took a quarter of a stable sort's time on records in no order
    (the index buffer's 786k at a flush: 30 against 130 ms), while ``in_runs``
    (sorted runs one after another, a merge's) keeps the stable sort, which takes
    them as they come."""
    order = np.argsort(hi, kind="stable" if in_runs else "quicksort")
    ranked = hi[order]
    if len(ranked) > 1 and bool((ranked[1:] == ranked[:-1]).any()):
        return np.lexsort((lo, hi) if seq is None else (seq & SEQ_MASK, lo, hi))
    return order


def newest_unique(hi: np.ndarray, lo: np.ndarray, seq: np.ndarray, *,
                  drop_tombstones: bool, in_runs: bool = False
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort by ``(hi, lo)`` keeping only the newest record of each fingerprint
    (``in_runs``: see :func:`key_order`)."""
    order = key_order(hi, lo, seq, in_runs=in_runs)
    hi, lo, seq = hi[order], lo[order], seq[order]
    last = np.ones(len(hi), dtype=bool)
    last[:-1] = (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])
    if drop_tombstones:
        last &= (seq & TOMBSTONE) == 0
    if last.all():  # the rule in a merge of runs (each unique): no third copy
        return hi, lo, seq
    return hi[last], lo[last], seq[last]


def _count_upto(hi: np.ndarray, lo: np.ndarray, bound: tuple[int, int]) -> int:
    """How many records of a sorted chunk are <= ``bound`` by ``(hi, lo)``."""
    bh, bl = np.uint64(bound[0]), np.uint64(bound[1])
    i = int(np.searchsorted(hi, bh, side="left"))
    j = int(np.searchsorted(hi, bh, side="right"))
    return i + int(np.searchsorted(lo[i:j], bl, side="right"))


def merge_runs(runs: Sequence[Run], *, drop_tombstones: bool,
               chunk: int = MERGE_CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Yield the newest-wins union of ``runs`` as sorted ``(hi, lo, seq)`` chunks.

    Each step reads the next ``chunk`` records of every run, cuts every chunk at
    the smallest last key among the runs not yet at their end (no later record of
    any run can sort before it), merges what is below the cut and moves on; the
    run whose chunk set the cut is consumed whole, so every step progresses.
    """
    cursors = [0] * len(runs)
    while True:
        parts, bound = [], None
        for run, c in zip(runs, cursors, strict=True):
            rec = run.records(c, c + chunk)
            parts.append(rec)
            if len(rec) and c + len(rec) < run.count:
                last = (int(rec[-1, 0]), int(rec[-1, 1]))
                bound = last if bound is None or last < bound else bound
        if not any(len(p) for p in parts):
            return
        takes = []
        for k, rec in enumerate(parts):
            take = len(rec) if bound is None else _count_upto(rec[:, 0], rec[:, 1], bound)
            takes.append(take)
            cursors[k] += take
        cols = [np.concatenate([rec[:take, j] for rec, take in zip(parts, takes, strict=True)])
                for j in range(3)]
        del parts, rec  # the chunks read: not alive beside the sort's copies
        yield newest_unique(*cols, drop_tombstones=drop_tombstones, in_runs=True)


def merge_newer(old: tuple[np.ndarray, np.ndarray, np.ndarray],
                new: tuple[np.ndarray, np.ndarray, np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge two sorted unique record sets, the higher seq winning on equal keys:
    the index buffer folding its recent records into its sorted part.

    The new records are inserted at their places in the old columns
    (``np.insert``): one output array per column and a mask, so a fold of a
    million records needs its own size in temporaries, not three times it.
    Only when a new record shares its ``hi`` with an old one (a re-admission, a
    forget, or skewed keys) does it fall back to the general :func:`newest_unique`.
    """
    at = np.searchsorted(old[0], new[0])
    inside = at < len(old[0])
    if bool((old[0][at[inside]] == new[0][inside]).any()):
        return newest_unique(*(np.concatenate((a, b)) for a, b in zip(old, new, strict=True)),
                             drop_tombstones=False)
    hi, lo, seq = (np.insert(a, at, b) for a, b in zip(old, new, strict=True))
    return hi, lo, seq
