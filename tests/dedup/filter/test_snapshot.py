"""Snapshot files: round trip, damage and hostile headers, atomic writes, merge."""

from __future__ import annotations

import os
import re
import struct
import threading
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dedup.base.atomic as atomic
import dedup.filter.snapshot as snap
from dedup.filter.bloom import BloomFilter, read_snapshot, write_snapshot
from dedup.filter.geometry import layer_geometry
from dedup.filter.shards import ShardedBloom, merge_files
from dedup.filter.snapshot import HEADER_SIZE, GeometryMismatch, SnapshotError, read_header

fast = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def urls(n: int, prefix: str = "u") -> list[str]:
    return [f"https://example.com/{prefix}/{i}" for i in range(n)]


def filled(n: int = 3000, capacity: int = 1000, **kw) -> BloomFilter:
    bf = BloomFilter(capacity, 0.01, **kw)
    bf.add_many(urls(n))
    return bf


def craft(path: Path, *, version: int = 1, shard_index: int = 0, shard_count: int = 1,
          algo: int = 1, seed: int = 0, growth: int = 2, capacity: int = 1000,
          error_rate: float = 0.01, layers: list[tuple[int, int, int]] | None = None,
          element_count: int | None = None, body: bytes = b"") -> Path:
    """A file with the given header fields and *valid* checksums."""
    if layers is None:
        g = layer_geometry(capacity, error_rate, growth, 0)
        layers = [(g.m, g.k, 0)]
    if element_count is None:
        element_count = sum(c for _, _, c in layers)
    raw = snap._HEAD.pack(snap.MAGIC, version, HEADER_SIZE, shard_index, shard_count, algo,
                          seed, growth, len(layers), capacity, error_rate, element_count, 0,
                          time.time(), b"crawl")
    table = b"".join(struct.pack("<QQQ", *row) for row in layers)
    data = raw + struct.pack("<I", zlib.crc32(raw)) + table + struct.pack("<I", zlib.crc32(table))
    data += body
    path.write_bytes(data + struct.pack("<I", zlib.crc32(data)))
    return path


def refused_without_allocating(path: Path, match: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(SnapshotError, match=match):
            read_snapshot(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


# -- round trip -------------------------------------------------------------------------------


def test_round_trip_with_layers(tmp_path):
    bf = filled(3500, seed=77)
    assert bf.layers == 3
    path = tmp_path / "f.bloom"
    before = time.time()
    written = write_snapshot(path, bf, shard_index=3, shard_count=8, hwm=123, crawl_id="crawl-é")
    back, header = read_snapshot(path, crawl_id="crawl-é")
    assert back == bf and back.count == bf.count and back.layer_table() == bf.layer_table()
    assert header == written == read_header(path)
    assert (header.version, header.shard_index, header.shard_count, header.hwm) == (1, 3, 8, 123)
    assert header.hash_algo == "murmur3_x64_128" and header.seed == 77
    assert (header.capacity, header.error_rate, header.growth) == (1000, 0.01, 2)
    assert header.layers == bf.layer_table() and header.element_count == bf.count
    assert header.crawl_id == "crawl-é" and before <= header.created <= time.time()
    assert header.file_size == path.stat().st_size
    assert back.contains_many(urls(3500)).all()


@given(st.lists(st.text(max_size=20), max_size=200))
@fast
def test_no_false_negatives_after_save_and_load(tmp_path, keys):
    bf = BloomFilter(50, 0.01)
    bf.add_many(keys)
    bf.save(tmp_path / "h.bloom")
    back = BloomFilter.load(tmp_path / "h.bloom")
    assert back == bf and back.contains_many(keys).all()


def test_loaded_filter_keeps_working(tmp_path):
    bf = filled(500)
    bf.save(tmp_path / "a.bloom")
    back = BloomFilter.load(tmp_path / "a.bloom")
    bf.add_many(urls(2000, "x"))
    back.add_many(urls(2000, "x"))
    assert back == bf and back.count == bf.count


def test_shard_view_is_written_without_other_shards(tmp_path):
    sb = ShardedBloom(4, 4000)
    sb.add_many(urls(3000))
    write_snapshot(tmp_path / "s.bloom", sb.shards[2], shard_index=2, shard_count=4)
    back, header = read_snapshot(tmp_path / "s.bloom")
    assert back == sb.shards[2] and header.shard_index == 2
    assert header.file_size == HEADER_SIZE + 24 + 4 + sb.m // 8 + 4


# -- damaged files ------------------------------------------------------------------------------


@pytest.fixture
def good(tmp_path) -> Path:
    path = tmp_path / "shard-00003.bloom"
    write_snapshot(path, filled(1200), crawl_id="c")
    return path


def test_truncated_at_any_offset(good):
    data = good.read_bytes()
    for cut in [0, 4, 8, 100, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 30, 2000,
                len(data) // 2, len(data) - 4, len(data) - 1]:
        good.write_bytes(data[:cut])
        with pytest.raises(SnapshotError, match=r"^.*shard-00003\.bloom: truncated"):
            read_snapshot(good)


def test_truncated_message_says_the_sizes(good):
    data = good.read_bytes()
    good.write_bytes(data[:4096])
    with pytest.raises(SnapshotError, match=rf"truncated: expected {len(data)} bytes, found 4096$"):
        read_snapshot(good)
    good.write_bytes(data + b"x")
    with pytest.raises(SnapshotError, match="trailing bytes"):
        read_snapshot(good)


def test_every_byte_flip_in_header_and_table_is_caught(good):
    data = good.read_bytes()
    prefix = HEADER_SIZE + len(read_header(good).layers) * 24 + 4
    for i in range(prefix):
        damaged = bytearray(data)
        damaged[i] ^= 0x5A
        good.write_bytes(damaged)
        with pytest.raises(SnapshotError, match=f"^{re.escape(str(good))}: "):
            read_header(good)


def test_a_bit_flip_in_the_body_is_caught(good):
    data = good.read_bytes()
    bits_start = HEADER_SIZE + len(read_header(good).layers) * 24 + 4
    for i in (bits_start, len(data) // 2, len(data) - 5, len(data) - 1):
        damaged = bytearray(data)
        damaged[i] ^= 0x10
        good.write_bytes(damaged)
        with pytest.raises(SnapshotError, match="checksum mismatch"):
            read_snapshot(good)


def test_wrong_magic(tmp_path):
    (tmp_path / "x.bloom").write_bytes(b"PK\x03\x04" + bytes(500))
    with pytest.raises(SnapshotError, match="not a bloomcrawl snapshot"):
        read_snapshot(tmp_path / "x.bloom")


def test_newer_version_is_refused(tmp_path):
    with pytest.raises(SnapshotError, match=r"version 2 .*newer"):
        read_snapshot(craft(tmp_path / "v.bloom", version=2))


def test_crafted_file_with_valid_checksums_is_readable(tmp_path):
    g = layer_geometry(1000, 0.01, 2, 0)
    bf, _ = read_snapshot(craft(tmp_path / "ok.bloom", body=bytes(g.m // 8)))
    assert bf == BloomFilter(1000, 0.01)  # the crafting helper writes the real format


@pytest.mark.parametrize(("fields", "match"), [
    ({"shard_count": 0}, "shard count 0"),
    ({"shard_count": 70_000}, "shard count 70000"),
    ({"shard_index": 5, "shard_count": 5}, "shard index 5"),
    ({"algo": 9}, "hash algorithm"),
    ({"capacity": 0, "layers": [(10112, 7, 0)]}, "capacity"),
    ({"error_rate": float("nan"), "layers": [(10112, 7, 0)]}, "error rate"),
    ({"error_rate": 1.5, "layers": [(10112, 7, 0)]}, "error_rate"),
    ({"growth": 0}, "growth"),
    ({"layers": []}, "layer count 0"),
    ({"layers": [(9600, 7, 0)] * 65}, "layer count 65"),
    ({"layers": [(2**40 + 64, 7, 0)]}, "m 1099511627840"),
    ({"layers": [(100, 7, 0)]}, "multiple of 64"),
    ({"layers": [(10112, 0, 0)]}, "k 0"),
    ({"layers": [(2**39, 7, 0)]}, "do not match"),
    ({"layers": [(10112, 7, 5)], "element_count": 9}, "element count"),
])
def test_absurd_headers_are_refused_before_allocating(tmp_path, fields, match):
    refused_without_allocating(craft(tmp_path / "evil.bloom", **fields), match)


def test_huge_consistent_geometry_is_refused_by_the_size_check(tmp_path):
    # a header that is self-consistent but claims a 32-gigabit layer (4 GiB)
    g = layer_geometry(2**34, 0.5, 2, 0)
    assert g.m > 2**34
    path = craft(tmp_path / "huge.bloom", capacity=2**34, error_rate=0.5, layers=[(g.m, g.k, 0)])
    refused_without_allocating(path, "truncated: expected")


def test_tracemalloc_sees_a_real_load(tmp_path):
    big = BloomFilter(2_000_000, 0.01)
    big.save(tmp_path / "big.bloom")
    tracemalloc.start()
    read_snapshot(tmp_path / "big.bloom")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak >= big.m // 8  # so the < 1 MB checks above do measure numpy buffers


def test_crawl_id_mismatch(good):
    assert read_snapshot(good, crawl_id="c")[1].crawl_id == "c"
    with pytest.raises(SnapshotError, match="belongs to crawl 'c', not 'd'"):
        read_snapshot(good, crawl_id="d")


def test_bad_write_arguments(tmp_path):
    bf = BloomFilter(10)
    for kw in [{"crawl_id": "x" * 65}, {"crawl_id": "a\0b"}, {"shard_index": 2, "shard_count": 2},
               {"shard_count": 0}, {"hwm": -1}]:
        with pytest.raises(ValueError, match=f"^{next(iter(kw))} must be"):
            write_snapshot(tmp_path / "bad.bloom", bf, **kw)
    assert not list(tmp_path.iterdir())


# -- atomic writes --------------------------------------------------------------------------------


class Failing:
    """A file whose writes fail once ``limit`` bytes are written (a full disk)."""

    def __init__(self, f, limit: int) -> None:
        self._f, self._left = f, limit

    def write(self, data) -> int:
        if len(data) > self._left:
            self._f.write(bytes(data)[:self._left])
            raise OSError(28, "No space left on device")
        self._left -= len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


@pytest.mark.parametrize("fail", ["write", "fsync", "replace"])
def test_crash_mid_write_keeps_the_old_file(tmp_path, monkeypatch, fail):
    path = tmp_path / "shard-00000.bloom"
    old = filled(100)
    old.save(path)
    before = path.read_bytes()
    if fail == "write":
        real_open = open
        monkeypatch.setattr(atomic, "open", lambda p, mode: Failing(real_open(p, mode), 2000),
                            raising=False)
    elif fail == "fsync":
        monkeypatch.setattr(snap.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "EIO")))
    else:
        monkeypatch.setattr(snap.os, "replace",
                            lambda a, b: (_ for _ in ()).throw(OSError(5, "EIO")))
    with pytest.raises(OSError, match=r"No space left on device|EIO"):
        filled(3000).save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    assert BloomFilter.load(path) == old


def test_temp_file_is_hidden_in_the_same_folder(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(Path(src))
        real_replace(src, dst)

    monkeypatch.setattr(snap.os, "replace", spy)
    BloomFilter(10).save(tmp_path / "a.bloom")
    (tmp := seen[0])
    assert tmp.parent == tmp_path and tmp.name.startswith(".") and tmp.name.endswith(".tmp")
    assert not tmp.exists()


def test_snapshot_while_another_thread_adds(tmp_path):
    """Every snapshot taken while a writer adds keys is valid and holds every key that was
    acknowledged before it started (the property the ledger high-water mark relies on)."""
    bf = BloomFilter(400_000, 0.01)
    done: list[int] = []
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set() and i < 300_000:
            bf.add_many(urls(2000, f"w{i}"))
            i += 2000
            done.append(i)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for n in range(8):
            acknowledged = done[-1] if done else 0
            write_snapshot(tmp_path / "live.bloom", bf, hwm=acknowledged)
            back, header = read_snapshot(tmp_path / "live.bloom")
            assert header.hwm == acknowledged
            for j in range(0, acknowledged, 2000):
                assert back.contains_many(urls(2000, f"w{j}")[:50]).all(), (n, j)
    finally:
        stop.set()
        t.join()


# -- merge ----------------------------------------------------------------------------------------


def test_merge_equals_the_filter_of_the_union(tmp_path):
    xs, ys, zs = urls(2000, "x"), urls(500, "y"), urls(800, "z")
    files = []
    for i, keys in enumerate((xs, ys, zs)):
        bf = BloomFilter(5000, 0.01)
        bf.add_many(keys)
        files.append(tmp_path / f"in{i}.bloom")
        write_snapshot(files[-1], bf, shard_index=1, shard_count=4, hwm=10 * i + 5, crawl_id="c")
    header = merge_files(tmp_path / "out.bloom", files)
    merged, h = read_snapshot(tmp_path / "out.bloom")
    union = BloomFilter(5000, 0.01)
    union.add_many(xs + ys + zs)
    assert merged == union
    assert h == header and (h.shard_index, h.shard_count, h.hwm, h.crawl_id) == (1, 4, 25, "c")
    assert merged.count == pytest.approx(3300, rel=0.03)


@given(st.lists(st.text(max_size=10), max_size=80), st.lists(st.text(max_size=10), max_size=80))
@fast
def test_no_false_negatives_after_merge(tmp_path, xs, ys):
    a, b = BloomFilter(20), BloomFilter(20)  # small: inputs grow layers
    a.add_many(xs)
    b.add_many(ys)
    a.save(tmp_path / "a.bloom")
    b.save(tmp_path / "b.bloom")
    merge_files(tmp_path / "a.bloom", [tmp_path / "a.bloom", tmp_path / "b.bloom"])
    assert BloomFilter.load(tmp_path / "a.bloom").contains_many(xs + ys).all()


def test_merge_of_sharded_saves_equals_the_sharded_union(tmp_path):
    a, b, u = ShardedBloom(4, 4000), ShardedBloom(4, 4000), ShardedBloom(4, 4000)
    a.add_many(urls(1500, "a"))
    b.add_many(urls(1500, "b"))
    u.add_many(urls(1500, "a") + urls(1500, "b"))
    a.save(tmp_path / "a", hwm=3, crawl_id="w0")
    b.save(tmp_path / "b", hwm=9, crawl_id="w1")
    for i in range(4):
        merge_files(ShardedBloom.shard_path(tmp_path / "a", i),
                    [ShardedBloom.shard_path(tmp_path / d, i) for d in "ab"], crawl_id="fleet")
    merged = ShardedBloom.load(tmp_path / "a", crawl_id="fleet")
    assert merged == u == a | b
    assert read_header(ShardedBloom.shard_path(tmp_path / "a", 0)).hwm == 9


def _k_differs_geometry() -> tuple[int, float]:
    """A (capacity, error rate) with the same layer-0 m as (1000, 0.01) but another k."""
    base = layer_geometry(1000, 0.01, 2, 0)
    for cap in range(700, 1400):
        for p in (0.02, 0.015, 0.012, 0.008, 0.006, 0.005):
            g = layer_geometry(cap, p, 2, 0)
            if g.m == base.m and g.k != base.k:
                return cap, p
    raise AssertionError("no such geometry")


@pytest.mark.parametrize(("kw", "field"), [
    ({"seed": 99}, "seed"),
    ({"shard_count": 8}, "shard_count"),
    ({"shard_index": 2}, "shard_index"),
    ({"capacity": 10_000}, "m"),
    ({"k": True}, "k"),
    ({"capacity": 1001}, "capacity"),
    ({"error_rate": 0.01000001}, "error_rate"),
    ({"growth": 4}, "growth"),
])
def test_merge_refuses_each_differing_field(tmp_path, kw, field):
    write_snapshot(tmp_path / "a.bloom", BloomFilter(1000, 0.01), shard_index=1, shard_count=4)
    kw = dict(kw)
    if kw.pop("k", False):
        kw["capacity"], kw["error_rate"] = _k_differs_geometry()
    shard = {"shard_index": kw.pop("shard_index", 1), "shard_count": kw.pop("shard_count", 4)}
    other = BloomFilter(**{"capacity": 1000, "error_rate": 0.01, **kw})
    write_snapshot(tmp_path / "b.bloom", other, **shard)
    with pytest.raises(GeometryMismatch, match=rf"b\.bloom: {field} differs: "):
        merge_files(tmp_path / "out.bloom", [tmp_path / "a.bloom", tmp_path / "b.bloom"])
    assert not (tmp_path / "out.bloom").exists()


def test_merge_refuses_a_damaged_input(tmp_path):
    filled(100).save(tmp_path / "a.bloom")
    filled(100).save(tmp_path / "b.bloom")
    data = bytearray((tmp_path / "b.bloom").read_bytes())
    data[-100] ^= 1
    (tmp_path / "b.bloom").write_bytes(data)
    with pytest.raises(SnapshotError, match="checksum"):
        merge_files(tmp_path / "out.bloom", [tmp_path / "a.bloom", tmp_path / "b.bloom"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bloom", "b.bloom"]
