"""A ledger stand-in and a dict model for the fingerprint index tests.

The "ledger" is a list of committed rows ``(seq, hi, lo, tombstone)``; the model
is what a Python dict of the same rows answers. Shared by the property test and
the kill -9 test (whose child process appends rows to a text file).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from dedup.index import fpindex
from dedup.index.fpindex import SMALL_BATCH, FingerprintIndex

Row = tuple[int, int, int, bool]


def replay(index: FingerprintIndex, rows: Iterable[Row]) -> None:
    """Feed the rows past the index's mark back in, as the owner does on open."""
    for seq, hi, lo, tomb in rows:
        if seq > index.mark:
            index.add(np.array([hi], np.uint64), np.array([lo], np.uint64),
                      np.array([seq], np.uint64), tombstone=tomb)


def add_rows(index: FingerprintIndex, rows: Sequence[Row], *, tombstone: bool) -> None:
    """Index ledger rows ``(seq, hi, lo, _)`` in one call: ``add``, or for admissions
    at consecutive seqs starting odd, the ledger's own ``add_consecutive`` (so a
    model run exercises both)."""
    his = np.array([r[1] for r in rows], np.uint64)
    los = np.array([r[2] for r in rows], np.uint64)
    seqs = [r[0] for r in rows]
    if not tombstone and seqs[0] % 2 and seqs == list(range(seqs[0], seqs[0] + len(seqs))):
        index.add_consecutive(his, los, seqs[0])
    else:
        index.add(his, los, np.array(seqs, np.uint64), tombstone=tombstone)


def model_of(rows: Iterable[Row]) -> dict[tuple[int, int], int]:
    """fingerprint -> seq of its admission, for the keys present after ``rows``."""
    model: dict[tuple[int, int], int] = {}
    for seq, hi, lo, tomb in rows:
        if tomb:
            model.pop((hi, lo), None)
        else:
            model[(hi, lo)] = seq
    return model


def assert_answers(index: FingerprintIndex, model: dict[tuple[int, int], int],
                   keys: Sequence[tuple[int, int]]) -> None:
    """The index answers every key (present and seq) exactly like the model, asked
    all at once (the vectorized paths: with pread, and through the runs' maps as a
    batch above ``MAPLESS_BATCH`` is) and a page at a time (key by key)."""
    his = np.array([k[0] for k in keys], np.uint64)
    los = np.array([k[1] for k in keys], np.uint64)
    want_p = [k in model for k in keys]
    want_s = [model.get(k, -1) for k in keys]
    assert SMALL_BATCH < len(keys) <= fpindex.MAPLESS_BATCH  # else a path went untested
    mapless = fpindex.MAPLESS_BATCH
    try:
        for fpindex.MAPLESS_BATCH in (mapless, SMALL_BATCH):
            present, seq = index.lookup(his, los)
            assert present.tolist() == want_p
            assert seq.tolist() == want_s
    finally:
        fpindex.MAPLESS_BATCH = mapless
    for i in range(0, len(keys), 13):
        present, seq = index.lookup(his[i:i + 13], los[i:i + 13])
        assert present.tolist() == want_p[i:i + 13]
        assert seq.tolist() == want_s[i:i + 13]
        # the seen-test's page path: the same keys as 16-byte fingerprints
        fps = np.stack([his[i:i + 13], los[i:i + 13]], axis=1).astype("<u8").tobytes()
        assert index.held_among(fps) == [j for j, p in enumerate(want_p[i:i + 13]) if p]
