"""``FingerprintIndex.held_among``, the seen-test's lookup of a page's (or a URL's) few
keys: the compiled ``IndexParts`` probe (every part asked in one C call, its buffers
kept between calls) answers exactly as the Python path (``BLOOMCRAWL_NO_KERNEL``'s),
as the batch :meth:`~dedup.index.fpindex.FingerprintIndex.lookup` and as a dict of the
ledger, on indexes of several runs, a buffer, forgotten and re-admitted keys, and
while parts change under a kept probe (adds, a grown table, flushes, merges)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np
import pytest

from dedup.index.fpindex import SMALL_BATCH, FingerprintIndex
from dedup.native import compiled
from tests.dedup.conftest import require_kernel
from tests.dedup.fpmodel import add_rows, model_of

Row = tuple[int, int, int, bool]
Op = tuple[str, list[Row]]


def _ledger(seed: int, n_keys: int = 3000) -> tuple[list[Op], list[tuple[int, int]]]:
    """A ledger's ops (``rows`` batches, ``flush`` marks) that leave several runs and
    a buffer: admissions, forgets of keys in older runs and in the buffer,
    re-admissions after a forget; keys sharing ``hi`` (equal-hi streaks in a
    bucket); and keys never admitted."""
    rng = np.random.default_rng(seed)
    his = rng.integers(0, 2**64, n_keys, dtype=np.uint64).tolist()
    los = rng.integers(0, 2**64, n_keys, dtype=np.uint64).tolist()
    for i in range(0, n_keys, 10):  # streaks: ten keys of one hi
        his[i:i + 10] = [his[i]] * len(his[i:i + 10])
    keys = list(zip(his, los, strict=True))
    absent = [(int(h), int(lo)) for h, lo in zip(
        rng.integers(0, 2**64, 500, dtype=np.uint64).tolist(),
        rng.integers(0, 2**64, 500, dtype=np.uint64).tolist(), strict=True)]
    absent += [(keys[i][0], keys[i][1] ^ 1) for i in range(0, n_keys, 37)]  # a held key's hi
    ops: list[Op] = []
    seq = 0
    admitted: list[tuple[int, int]] = []

    def rows(batch: list[tuple[int, int]], tomb: bool) -> None:
        nonlocal seq
        out = [(seq + 1 + i, h, lo, tomb) for i, (h, lo) in enumerate(batch)]
        seq += len(out)
        ops.append(("forget" if tomb else "add", out))

    for start in range(0, n_keys, 500):  # six runs of 500 admissions, some forgotten
        batch = keys[start:start + 500]
        rows(batch, False)
        admitted += batch
        gone = [admitted[int(j)] for j in rng.choice(len(admitted), 40, replace=False)]
        rows(gone, True)
        back = gone[:10]  # forgotten, then admitted again
        rows(back, False)
        ops.append(("flush", [(seq, 0, 0, False)]))
    # the buffer: forgets of run keys, some admitted again
    gone = [admitted[int(j)] for j in rng.choice(len(admitted), 60, replace=False)]
    rows(gone, True)
    rows(gone[:20], False)
    return ops, keys + absent


def _build(path: Path, ops: list[Op]) -> FingerprintIndex:
    index = FingerprintIndex(path, buffer_records=1 << 12, fanout=64, background=False,
                             block_records=4)
    for op, rows in ops:
        if op == "flush":
            index.flush(rows[0][0])
        else:
            add_rows(index, rows, tombstone=op == "forget")
    return index


def _fps(keys: list[tuple[int, int]]) -> bytes:
    return np.array(keys, dtype="<u8").reshape(-1, 2).tobytes()


def _pages(keys: list[tuple[int, int]], seed: int) -> list[list[tuple[int, int]]]:
    """The keys in shuffled batches of 1 to 100 (a URL's, a page's, past the C
    call's 64 on its stack)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(keys)).tolist()
    out, i = [], 0
    while i < len(order):
        k = int(rng.choice([1, 2, 7, 13, 64, 65, 100]))
        out.append([keys[j] for j in order[i:i + k]])
        i += k
    return out


def _answers(index: FingerprintIndex, pages: list[list[tuple[int, int]]]) -> list[list[int]]:
    return [index.held_among(_fps(p)) for p in pages]


@pytest.mark.parametrize("seed", [1, 2])
def test_compiled_python_batch_and_model_agree(tmp_path: Path, seed: int,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    require_kernel()
    ops, keys = _ledger(seed)
    model = model_of(r for op, rows in ops if op != "flush" for r in rows)
    pages = _pages(keys, seed)
    want = [[j for j, k in enumerate(p) if k in model] for p in pages]
    assert sum(map(len, want)) > 2000 and sum(len(p) for p in pages) - sum(map(len, want)) > 500

    index = _build(tmp_path / "c", ops)
    try:
        assert len(index.stats()["run_records"]) == 6 and index.stats()["buffer"] > 0
        got = _answers(index, pages)
        assert type(index._probe).__name__ == "IndexParts"  # the compiled path answered
        his = np.array([k[0] for k in keys], np.uint64)
        los = np.array([k[1] for k in keys], np.uint64)
        assert len(keys) > SMALL_BATCH
        present, _ = index.lookup(his, los)  # the batch path
        batch = dict(zip(keys, present.tolist(), strict=True))
    finally:
        index.close()
    assert got == want
    assert [[j for j, k in enumerate(p) if batch[k]] for p in pages] == want

    monkeypatch.setattr(compiled, "lookup", None)  # BLOOMCRAWL_NO_KERNEL's path
    with _build(tmp_path / "p", ops) as python:
        assert _answers(python, pages) == want
        assert python._probe is None


def test_a_kept_probe_follows_every_change_of_the_parts(tmp_path: Path) -> None:
    """Asked between every change, the probe (kept between calls) never answers from
    parts that are gone: adds and forgets in the table, a table grown past its
    size, a flush (the table taken, a run added), a merge (runs closed, one opened)."""
    require_kernel()
    rng = np.random.default_rng(7)
    keys = [(int(h), int(lo)) for h, lo in rng.integers(0, 2**64, (4000, 2), dtype=np.uint64)]
    index = FingerprintIndex(tmp_path, buffer_records=64, fanout=2, background=False,
                             block_records=4)
    ledger: list[Row] = []
    made = []
    make = index._parts_probe
    index._parts_probe = lambda lookup: made.append(1) or make(lookup)  # type: ignore[method-assign]

    def check() -> None:
        model = model_of(ledger)
        for p in _pages(keys[:400] + keys[1000:1200], len(ledger)):
            assert index.held_among(_fps(p)) == [j for j, k in enumerate(p) if k in model]
        assert type(index._probe).__name__ == "IndexParts"

    def step(batch: list[tuple[int, int]], tomb: bool) -> None:
        rows = [(len(ledger) + 1 + i, h, lo, tomb) for i, (h, lo) in enumerate(batch)]
        ledger.extend(rows)
        add_rows(index, rows, tombstone=tomb)

    try:
        check()
        for i in range(0, 400, 40):
            step(keys[i:i + 40], False)
            check()
            step(keys[i:i + 5], True)  # forgotten in the table or in a run
            check()
            if i % 80 == 0:
                step(keys[i:i + 2], False)  # admitted again
                check()
            if i % 120 == 0:
                gen = index._buffer.generation
                step(keys[1000 + 3 * i:1250 + 3 * i], False)  # past the table's size: it grows
                assert index._buffer.generation > gen
                check()
            index.flush(len(ledger))  # a run; fanout 2 merges
            check()
        assert index.stats()["runs"] >= 2
    finally:
        index.close()
    assert len(made) == 1 + 10 + 4  # once, then after each flush and each grown table


def test_a_probe_lets_go_of_merged_away_runs(tmp_path: Path) -> None:
    """The probe keeps its own descriptors of the run files: a merge's install drops
    it, so the inputs' unlinked files are not held open (their disk space kept)."""
    require_kernel()
    rng = np.random.default_rng(3)
    keys = [(int(h), int(lo)) for h, lo in rng.integers(0, 2**64, (200, 2), dtype=np.uint64)]
    with FingerprintIndex(tmp_path, buffer_records=64, fanout=2, background=True) as index:
        for i in (0, 100):
            rows = [(i + 1 + j, h, lo, False) for j, (h, lo) in enumerate(keys[i:i + 100])]
            add_rows(index, rows, tombstone=False)
            index.flush(i + 100)  # the second starts a merge of the two runs
        assert index.stats()["merging"]
        index._parts_probe(compiled.lookup)  # over the inputs, before the install
        index.wait_merges()
        assert index.stats()["runs"] == 1
        assert not [p for p in _open_files() if str(tmp_path) in p and p.endswith("(deleted)")]
        assert index.held_among(_fps(keys)) == list(range(200))


def _open_files() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own, closed since
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
    return out


def test_runs_read_from_the_page_cache_keep_the_gil_and_answer_alike(tmp_path: Path) -> None:
    """A fresh probe reads each run as waiting on the disk (the GIL released, read
    ahead) until a call's reads are seen to come from the page cache (the run files
    were just written: cached), then keeps the GIL; both ways answer exactly."""
    require_kernel()
    ops, keys = _ledger(3)
    model = model_of(r for op, rows in ops if op != "flush" for r in rows)
    index = _build(tmp_path, ops)
    try:
        probe = index._parts_probe(compiled.lookup)
        assert probe.waiting() == [True] * 6
        first = keys[::5]  # from every run: the first call reads each one
        assert probe.held(_fps(first)) == [j for j, k in enumerate(first) if k in model]
        assert probe.waiting() == [False] * 6
        for p in _pages(keys, 3):
            assert probe.held(_fps(p)) == [j for j, k in enumerate(p) if k in model]
        assert probe.waiting() == [False] * 6
    finally:
        index.close()


def test_a_run_gone_cold_is_seen_within_a_sample_of_calls(tmp_path: Path) -> None:
    """A run whose reads came from the page cache is still timed one call in 16: its
    pages dropped (reads then wait ~30 us on the disk), it is seen waiting again (the
    GIL released around its reads, read ahead) within 16 calls."""
    require_kernel()
    rng = np.random.default_rng(11)
    keys = rng.integers(0, 2**64, (200_000, 2), dtype=np.uint64)  # 4.8 MB: ~1200 pages
    with FingerprintIndex(tmp_path, buffer_records=1 << 18, background=False) as index:
        index.add_consecutive(keys[:, 0].copy(), keys[:, 1].copy(), 1)
        index.flush(len(keys))
        probe = index._parts_probe(compiled.lookup)
        asked = [(int(h), int(lo)) for h, lo in keys[rng.permutation(len(keys))[:40]]]
        run = next(tmp_path.glob("run-*"))
        run.read_bytes()  # cached
        # cached: not waiting, once a call is not slowed by another process (a busy box
        # can stretch one read past the threshold; a waiting run times every call)
        for _ in range(8):
            assert probe.held(_fps(asked[:1])) == [0]
            if probe.waiting() == [False]:
                break
        assert probe.waiting() == [False]
        fd = os.open(run, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        seen = []
        for key in asked[1:18]:  # one read a call, each of a page not read since
            assert probe.held(_fps([key])) == [0]
            seen.append(probe.waiting()[0])
        assert any(seen)
