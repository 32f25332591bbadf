"""Run files: round trip, batched lookup against a dict, hostile and truncated files."""

from __future__ import annotations

import re
import struct
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedup.base.errors import IndexDamaged
from dedup.index import runs
from dedup.index.runs import HEADER_SIZE, TOMBSTONE, Run, RunFileError, verify_run, write_run
from dedup.index.sortedkeys import bucket_counts, filter_add, filter_passes

pytestmark = pytest.mark.usefixtures("lookup_impl")  # compiled loops and Python alike


def _sorted(keys: set[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    ks = sorted(keys)
    return np.array([k[0] for k in ks], np.uint64), np.array([k[1] for k in ks], np.uint64)


@settings(max_examples=80, deadline=None)
@given(keys=st.sets(st.tuples(st.integers(0, 5), st.integers(0, 2**64 - 1)), max_size=300),
       probes=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 2**64 - 1)), max_size=50),
       block=st.integers(1, 9), split=st.integers(0, 300))
def test_contains_matches_a_dict(tmp_path_factory: pytest.TempPathFactory, keys: set,
                                 probes: list, block: int, split: int) -> None:
    path = tmp_path_factory.mktemp("run") / "r.fpr"
    hi, lo = _sorted(keys)
    seq = np.arange(len(hi), dtype=np.uint64) * np.uint64(3) + np.uint64(1)
    seq[::5] |= TOMBSTONE
    chunks = [(hi[:split], lo[:split], seq[:split]), (hi[split:], lo[split:], seq[split:])]
    assert write_run(path, chunks, block_records=block) == len(hi)
    run = Run(path)
    truth = dict(zip(zip(hi.tolist(), lo.tolist(), strict=True), seq.tolist(), strict=True))
    asked = sorted(set(probes) | set(list(keys)[:20]))
    found, got = run.contains(np.array([a[0] for a in asked], np.uint64),
                              np.array([a[1] for a in asked], np.uint64))
    assert found.tolist() == [a in truth for a in asked]
    assert got.tolist() == [truth.get(a, 0) for a in asked]
    # a group's batch from the file: filter, then one bucket read per candidate
    found, got = _find_many(run.keys, np.array([a[0] for a in asked], np.uint64),
                            np.array([a[1] for a in asked], np.uint64))
    assert found.tolist() == [a in truth for a in asked]
    assert got.tolist() == [truth.get(a, 0) for a in asked]
    # the key-by-key path (page-sized batches), with the keys in any order
    todo = [(i, h, lo) for i, (h, lo) in enumerate(reversed(asked))]
    hits, miss = run.find_each(todo)
    want = {i: truth[(h, lo)] for i, h, lo in todo if (h, lo) in truth}
    assert dict(hits) == want and len(hits) == len(want)
    assert sorted(t for t in todo if t[0] not in want) == sorted(miss)


def _find_many(keys, hi: np.ndarray, lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(found, raw seq)`` per key through :meth:`SortedKeys.find_into`, as the index
    asks a part (every key still to find)."""
    todo = np.ones(len(hi), dtype=np.uint8)
    raw = np.zeros(len(hi), dtype=np.uint64)
    keys.find_into(np.ascontiguousarray(hi, np.uint64), np.ascontiguousarray(lo, np.uint64),
                   todo, raw)
    return todo == 0, raw


@settings(max_examples=60, deadline=None)
@given(keys=st.sets(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 3)), max_size=400),
       bits=st.integers(1, 12))
def test_directory_buckets_by_top_bits(keys: set, bits: int) -> None:
    """Keys spread over the whole hi range (the fingerprints' case) and a directory of
    any size: every bucket's records are found, absent neighbours are not."""
    hi, lo = _sorted(keys)
    seq = np.arange(1, len(hi) + 1, dtype=np.uint64)
    sk = runs.SortedKeys(hi, lo, seq, bucket_counts(hi, bits), bits)
    asked = sorted(keys) + [(h, lo_ + 4) for h, lo_ in list(keys)[:30]] + [(0, 9), (2**64 - 1, 9)]
    truth = dict(zip(sorted(keys), seq.tolist(), strict=True))
    found, got = sk.contains(np.array([a[0] for a in asked], np.uint64),
                             np.array([a[1] for a in asked], np.uint64))
    assert found.tolist() == [a in truth for a in asked]
    assert got.tolist() == [truth.get(a, 0) for a in asked]
    hits, _ = sk.find_each([(i, h, lo_) for i, (h, lo_) in enumerate(asked)])
    assert dict(hits) == {i: truth[a] for i, a in enumerate(asked) if a in truth}


def test_writer_refuses_unsorted_and_abandons_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "r.fpr"
    a = np.array([1, 2], np.uint64)
    with pytest.raises(ValueError, match="strictly increase"):
        write_run(path, [(a, a, a), (a, a, a)])
    with pytest.raises(InterruptedError, match=r"^run write abandoned$"):
        write_run(path, [(a, a, a)], should_stop=lambda: True)
    assert list(tmp_path.iterdir()) == []
    write_run(path, [])
    assert Run(path).contains(a, a)[0].tolist() == [False, False]


def _header(magic=b"BCFPRUN1", version=1, block=170, count=2, mn=1, mx=2, crc=0) -> bytes:
    body = struct.pack("<8sIIQQQI", magic, version, block, count, mn, mx, crc)
    return (body + struct.pack("<I", zlib.crc32(body))).ljust(HEADER_SIZE, b"\0")


@pytest.mark.parametrize(("head", "tail", "message"), [
    (b"", b"", "truncated header"),
    (_header()[:40], b"", "truncated header"),
    (_header(magic=b"SQLite f"), b"\0" * 48, "bad magic"),
    (_header()[:-1] + b"\1", b"\0" * 48, "header checksum"),
    (_header()[:20] + b"\7" + _header()[21:], b"\0" * 48, "header checksum"),
    (_header(version=9), b"\0" * 48, "format version 9"),
    (_header(block=0), b"\0" * 48, "bad block size"),
    (_header(count=2**61), b"\0" * 48, "truncated or damaged"),  # no 48 EB allocation
    (_header(count=3), b"\0" * 48, "truncated or damaged"),
    (_header(mn=5, mx=2), b"\0" * 48, "bad seq range"),
    (_header(mx=2**63), b"\0" * 48, "bad seq range"),
    (_header(), b"\0" * 48, "record checksum mismatch: the records are damaged"),
    (_header(crc=zlib.crc32(b"\0" * 48)), b"\0" * 48, "out of order .* checksum matches"),
])
def test_hostile_headers(tmp_path: Path, head: bytes, tail: bytes, message: str) -> None:
    path = tmp_path / "bad.fpr"
    path.write_bytes(head + tail)
    with pytest.raises(RunFileError, match=message):
        Run(path)
    with pytest.raises(RunFileError, match=message):
        verify_run(path)


def test_every_truncation_and_bit_flip_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.fpr"
    rng = np.random.default_rng(2)
    hi, lo = _sorted({(int(h), int(x)) for h, x in rng.integers(0, 2**63, (40, 2))})
    write_run(path, [(hi, lo, np.arange(1, len(hi) + 1, dtype=np.uint64))], block_records=4)
    data = path.read_bytes()
    for cut in range(0, len(data), 7):
        path.write_bytes(data[:cut])
        with pytest.raises(RunFileError, match=f"^run file {re.escape(str(path))}: "):
            Run(path)
        with pytest.raises(RunFileError, match=f"^run file {re.escape(str(path))}: "):
            verify_run(path)
    for pos in range(0, len(data), 5):
        flipped = bytearray(data)
        flipped[pos] ^= 0x10
        path.write_bytes(bytes(flipped))
        with pytest.raises(RunFileError, match=f"^run file {re.escape(str(path))}: "):
            Run(path)
        with pytest.raises(RunFileError, match=f"^run file {re.escape(str(path))}: "):
            verify_run(path)
    path.write_bytes(data)
    assert verify_run(path) == len(hi)
    path.unlink()
    with pytest.raises(IndexDamaged, match="missing"):
        verify_run(path)


def test_writer_slices_large_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flush hands its whole buffer over as one chunk: it is written in slices
    (bounded copies), with the order still checked across the slices' seams."""
    monkeypatch.setattr(runs, "_CHUNK", 3)
    hi = np.arange(10, dtype=np.uint64) * np.uint64(7)
    lo = np.arange(10, dtype=np.uint64)
    seq = np.arange(1, 11, dtype=np.uint64)
    assert write_run(tmp_path / "r.fpr", [(hi, lo, seq)]) == 10
    found, got = Run(tmp_path / "r.fpr").contains(hi, lo)
    assert found.all() and got.tolist() == seq.tolist()
    hi[6] = hi[5]  # a duplicate key right at a seam (slices of 3: positions 5 | 6)
    lo[6] = lo[5]
    with pytest.raises(ValueError, match="strictly increase"):
        write_run(tmp_path / "s.fpr", [(hi, lo, seq)])
    assert not (tmp_path / "s.fpr").exists()


def test_probe_ignores_matches_across_fields(tmp_path: Path) -> None:
    """A run file's bucket is searched for a key's 16 bytes: a match that straddles
    two fields (a record's lo and seq, or a seq and the next hi) is not the key."""
    rows = [(1, 2, 3), (2, 3, 7), (5, 9, 11), (11, 20, 21)]
    hi, lo, seq = (np.array(c, np.uint64) for c in zip(*rows, strict=True))
    write_run(tmp_path / "r.fpr", [(hi, lo, seq)], block_records=64)
    run = Run(tmp_path / "r.fpr")
    todo = [(0, 2, 3), (1, 9, 11), (2, 3, 7), (3, 11, 11), (4, 11, 20)]
    hits, miss = run.find_each(todo)
    # (2, 3) is stored, and also straddles record 0's lo|seq, which comes first
    assert hits == [(0, 7), (4, 21)]
    assert [t[0] for t in miss] == [1, 2, 3]


def test_probe_filter_passes_every_key_and_few_absent_ones(tmp_path: Path) -> None:
    """The run filter is what spares a bucket read: it must pass every key it holds
    and, at 8 bits a record, let few absent keys through (one probe let ~12%)."""
    rng = np.random.default_rng(7)
    hi, lo = _sorted(set(zip(rng.integers(0, 2**63, 50_000).tolist(),
                             rng.integers(0, 2**63, 50_000).tolist(), strict=True)))
    hi, lo = hi * np.uint64(2), lo * np.uint64(2) + np.uint64(1)  # spread over all bits
    path = tmp_path / "r.fpr"
    write_run(path, [(hi, lo, np.arange(1, len(hi) + 1, dtype=np.uint64))])
    keys = Run(path).keys
    assert filter_passes(keys.bloom, hi, lo).all()
    absent_hi = rng.integers(0, 2**63, 100_000).astype(np.uint64) * np.uint64(2)
    absent_lo = rng.integers(0, 2**63, 100_000).astype(np.uint64) * np.uint64(2)  # even: absent
    rate = filter_passes(keys.bloom, absent_hi, absent_lo).mean()
    assert 0 < rate < 0.05


@pytest.mark.parametrize("readahead", [True, False])
def test_file_lookups_answer_alike_with_and_without_read_ahead(tmp_path: Path,
                                                            readahead: bool) -> None:
    rng = np.random.default_rng(3)
    hi, lo = _sorted(set(zip(rng.integers(0, 2**64, 5000, dtype=np.uint64).tolist(),
                             rng.integers(0, 2**64, 5000, dtype=np.uint64).tolist(),
                             strict=True)))
    seq = np.arange(1, len(hi) + 1, dtype=np.uint64)
    write_run(tmp_path / "r.fpr", [(hi, lo, seq)])
    keys = Run(tmp_path / "r.fpr").keys
    keys._readahead = readahead
    ask_hi = np.concatenate([hi[::7], rng.integers(0, 2**64, 500, dtype=np.uint64)])
    ask_lo = np.concatenate([lo[::7], rng.integers(0, 2**64, 500, dtype=np.uint64)])
    found, got = _find_many(keys, ask_hi, ask_lo)
    assert found[:len(hi[::7])].all() and not found[len(hi[::7]):].any()
    assert got[:len(hi[::7])].tolist() == seq[::7].tolist()
    keys._readahead = readahead
    todo = list(zip(range(len(ask_hi)), ask_hi.tolist(), ask_lo.tolist(), strict=True))
    hits, miss = keys.find_each(todo[:40] + todo[-8:])  # a page's worth, key by key
    assert sorted(hits) == [(i, int(got[i])) for i in range(40)]
    assert sorted(t[0] for t in miss) == list(range(len(todo) - 8, len(todo)))


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
                     max_size=200),
       nbytes=st.sampled_from([1, 2, 7, 64, 4096]))
def test_filter_bits_are_those_of_the_numpy_positions(keys: list, nbytes: int) -> None:
    """The filter's bits, set and tested by either implementation, are exactly the
    three positions :func:`filter_positions` names (the format of every run file)."""
    from dedup.index.sortedkeys import filter_positions
    hi = np.array([k[0] for k in keys], np.uint64)
    lo = np.array([k[1] for k in keys], np.uint64)
    bloom = np.zeros(nbytes, np.uint8)
    filter_add(bloom, hi, lo)
    want = np.zeros(nbytes * 8, bool)
    for x in filter_positions(hi, lo, nbytes * 8):
        want[x.astype(np.intp)] = True
    assert np.unpackbits(bloom, bitorder="little").astype(bool).tolist() == want.tolist()
    assert filter_passes(bloom, hi, lo).all()


def test_a_run_file_cut_short_under_a_lookup_is_an_error(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    hi, lo = _sorted(set(zip(rng.integers(0, 2**64, 2000, dtype=np.uint64).tolist(),
                             rng.integers(0, 2**64, 2000, dtype=np.uint64).tolist(),
                             strict=True)))
    path = tmp_path / "r.fpr"
    write_run(path, [(hi, lo, np.arange(1, len(hi) + 1, dtype=np.uint64))])
    keys = Run(path).keys
    with open(path, "r+b") as f:
        f.truncate(HEADER_SIZE + 24 * 10)
    with pytest.raises(ValueError, match="short read"):
        _find_many(keys, hi[-50:], lo[-50:])


def _keys(n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    hi, lo = _sorted({(int(h), int(x)) for h, x in rng.integers(0, 2**63, (n, 2))})
    return hi, lo, np.arange(1, len(hi) + 1, dtype=np.uint64)


def test_filter_is_stored_and_a_damaged_one_refused(tmp_path: Path) -> None:
    """write_run stores the probe filter after the records, under its own CRC:
    opening reads it instead of computing it, and a flipped bit in it (which would
    turn present keys into misses) is damage, found by Run and verify_run alike."""
    path = tmp_path / "r.fpr"
    hi, lo, seq = _keys(200)
    write_run(path, [(hi, lo, seq)])
    data = path.read_bytes()
    end = HEADER_SIZE + len(hi) * 24
    assert len(data) > end  # the filter follows the records
    bloom = np.zeros(len(data) - end, dtype=np.uint8)
    filter_add(bloom, hi, lo)
    assert data[end:] == bloom.tobytes()
    assert np.array_equal(Run(path).keys.bloom, bloom)
    flipped = bytearray(data)
    flipped[end + 3] ^= 0x01
    path.write_bytes(bytes(flipped))
    with pytest.raises(RunFileError, match="filter checksum mismatch"):
        Run(path)
    with pytest.raises(RunFileError, match="filter checksum mismatch"):
        verify_run(path)


def test_format_1_run_and_unsized_writes_still_open(tmp_path: Path) -> None:
    """A run of format 1 (no stored filter) opens and answers, its filter computed
    at open; so does a run written from a stream of unknown length."""
    hi, lo, seq = _keys(300)
    path = tmp_path / "v2.fpr"
    write_run(path, iter([(hi, lo, seq)]))  # a generator: no count to size a filter by
    assert path.stat().st_size == HEADER_SIZE + len(hi) * 24
    sized = tmp_path / "sized.fpr"
    write_run(sized, iter([(hi, lo, seq)]), expect=len(hi) + 5)  # an upper bound will do
    assert sized.stat().st_size == HEADER_SIZE + len(hi) * 24 + runs.filter_size(len(hi) + 5) // 8
    records = path.read_bytes()[HEADER_SIZE:]
    old = tmp_path / "v1.fpr"
    old.write_bytes(_header(block=16, count=len(hi), mn=1, mx=len(hi),
                            crc=zlib.crc32(records)) + records)
    for p in (path, sized, old):
        run = Run(p)
        found, got = run.contains(hi, lo)
        assert found.all() and got.tolist() == seq.tolist()
        assert filter_passes(run.keys.bloom, hi, lo).all()
        assert verify_run(p) == len(hi)
        run.close()


def test_segments_checked_in_parallel_join_exactly(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A large run is checked in segments on threads: the combined CRC is the
    whole run's, and keys out of order across a segment's seam are still refused."""
    monkeypatch.setattr(runs, "_CHUNK", 8)
    monkeypatch.setattr(runs, "_PARALLEL_MIN", 16)
    monkeypatch.setattr(runs.os, "cpu_count", lambda: 4)
    hi, lo, seq = _keys(100)
    path = tmp_path / "r.fpr"
    write_run(path, [(hi, lo, seq)])
    assert len(runs._segments(len(hi))) == 4
    run = Run(path)
    assert run.contains(hi, lo)[0].all()
    assert run.keys.start[-1] == len(hi)
    run.close()
    seam = runs._segments(len(hi))[1][0]
    hi[seam - 1], hi[seam] = hi[seam], hi[seam - 1]  # swapped across the seam, CRC made to match
    lo[seam - 1], lo[seam] = lo[seam], lo[seam - 1]
    rec = np.stack([hi, lo, seq], axis=1).astype("<u8").tobytes()
    path.write_bytes(_header(block=16, count=len(hi), mn=1, mx=len(hi), crc=zlib.crc32(rec))
                     + rec)
    with pytest.raises(RunFileError, match=f"from record {seam} on"):
        Run(path)
    flipped = bytearray(path.read_bytes())
    flipped[HEADER_SIZE + 24 * 90 + 20] ^= 1  # a seq's high byte, in the last segment
    path.write_bytes(bytes(flipped))
    with pytest.raises(RunFileError, match="record checksum mismatch"):
        Run(path)


def test_crc32_combine_matches_zlib() -> None:
    rng = np.random.default_rng(5)
    for n1, n2 in [(0, 0), (0, 5), (5, 0), (1, 1), (1000, 4097), (3, 1 << 16)]:
        a, b = rng.bytes(n1), rng.bytes(n2)
        assert runs.crc32_combine(zlib.crc32(a), zlib.crc32(b), n2) == zlib.crc32(a + b)


def test_opening_a_run_streams_it_in_small_steps(tmp_path: Path) -> None:
    """The owner opens a merged run while the crawl holds its steady RAM, so what the
    check allocates on the way is peak: a few hundred KB a step, whatever the run's
    size; the run keeps only its filter and directory (it was 4 MB at 1.5 MB a step)."""
    rng = np.random.default_rng(2)
    n = 1 << 18  # 6 MB of records, checked on one thread (below _PARALLEL_MIN)
    hi = np.sort(rng.integers(0, 2**64, n, dtype=np.uint64))
    lo = rng.integers(0, 2**64, n, dtype=np.uint64)
    write_run(tmp_path / "r.fpr", [(hi, lo, np.arange(n, dtype=np.uint64))])
    tracemalloc.start()
    try:
        run = Run(tmp_path / "r.fpr")
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert run.count == n
    assert peak - kept < 2 << 20, (peak, kept)
