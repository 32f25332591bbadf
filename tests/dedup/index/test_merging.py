"""Newest-wins merging: the buffer's fold (merge_newer) against the general sort."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.index.merging import MERGE_CHUNK, merge_newer, merge_runs, newest_unique
from dedup.index.runs import Run, write_run
from dedup.index.sortedkeys import RECORD_SIZE, filter_size
from tests.dedup.conftest import require_kernel

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


def merged_peak(tmp_path: Path, rng: np.random.Generator, fanout: int, per: int
                ) -> tuple[list[np.ndarray], int]:
    """Merge ``fanout`` runs of ``per`` random records into ``tmp_path/m.fpr``: each run's
    sorted his, and the merge's traced peak beyond the filter it stores (written at the
    end: not transient)."""
    runs, his = [], []
    for i in range(fanout):
        hi = np.sort(rng.integers(0, 2**64, per, dtype=np.uint64))
        lo = rng.integers(0, 2**64, per, dtype=np.uint64)
        write_run(tmp_path / f"r{i}.fpr",
                  [(hi, lo, np.arange(i * per, (i + 1) * per, dtype=np.uint64))])
        runs.append(Run(tmp_path / f"r{i}.fpr"))
        his.append(hi)
    tracemalloc.start()
    try:
        n = write_run(tmp_path / "m.fpr", merge_runs(runs, drop_tombstones=False),
                      expect=fanout * per)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert n == fanout * per
    return his, peak - filter_size(fanout * per) // 8


def test_a_merge_holds_a_few_steps_of_records_not_more(tmp_path: Path) -> None:
    """The background merge runs beside the whole crawl, so its transient RAM is the
    process's peak (a Scrapy run's, bench/README.md): a step holds its chunks, their
    concatenation and its sorted copy (a few times ``fanout * MERGE_CHUNK`` records),
    and the writer lets each written chunk go before the next is made; at 1 << 16
    records a step, holding all of them at once, it was 30 MB at this size."""
    require_kernel()  # the bound is the compiled path's; the numpy/Python one holds more
    fanout, per = 4, 16 * MERGE_CHUNK
    his, peak = merged_peak(tmp_path, np.random.default_rng(5), fanout, per)
    assert peak < 4 * fanout * MERGE_CHUNK * RECORD_SIZE, peak
    n = fanout * per
    merged = Run(tmp_path / "m.fpr")  # many steps, each cut where every run agrees
    assert np.array_equal(merged.records(0, n)[:, 0], np.sort(np.concatenate(his)))


def test_a_merge_of_four_runs_holds_under_a_megabyte_and_a_half(tmp_path: Path) -> None:
    """The merge's steps are small in absolute terms too: beside the whole Scrapy
    dupefilter (a few tens of MB, issue 26) a step of four 384 KiB chunks, their
    concatenation and sorted copy (5 MB) was its transient peak; at 96 KiB chunks
    a merge of four runs holds ~1.3 MB besides the stored filter it builds."""
    require_kernel()  # the bound is the compiled path's; the numpy/Python one holds more
    _, peak = merged_peak(tmp_path, np.random.default_rng(6), 4, 200_000)
    assert peak < 1.5 * (1 << 20), f"{peak / (1 << 20):.1f} MB"
