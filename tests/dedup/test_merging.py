"""Newest-wins merging: the buffer's fold (merge_newer) against the general sort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.index.merging import merge_newer, newest_unique

_KEYS = st.sets(st.tuples(st.integers(0, 6), st.integers(0, 4)), max_size=30)


def _records(keys: set[tuple[int, int]], first_seq: int) -> tuple[np.ndarray, ...]:
    ks = sorted(keys)
    hi = np.array([k[0] for k in ks], np.uint64)
    lo = np.array([k[1] for k in ks], np.uint64)
    return hi, lo, np.arange(first_seq, first_seq + len(ks), dtype=np.uint64)


@settings(max_examples=200, deadline=None)
@given(old=_KEYS, new=_KEYS)
def test_merge_newer_is_the_newest_wins_union(old: set, new: set) -> None:
    """Disjoint hi (the insertion path), shared hi and shared keys (the fallback):
    the result is sorted, unique, and a key present in both keeps the new seq."""
    a, b = _records(old, 1), _records(new, 100)
    got = merge_newer(a, b)
    want = newest_unique(*(np.concatenate((x, y)) for x, y in zip(a, b, strict=True)),
                         drop_tombstones=False)
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    truth = {k: s for k, s in zip(sorted(old), a[2].tolist(), strict=True)}
    truth.update(zip(sorted(new), b[2].tolist(), strict=True))
    assert list(zip(got[0].tolist(), got[1].tolist(), strict=True)) == sorted(truth)
    assert got[2].tolist() == [truth[k] for k in sorted(truth)]
