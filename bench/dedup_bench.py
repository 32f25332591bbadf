"""Bloom filter micro-benchmarks: dedup vs rbloom, pybloomfiltermmap3, pybloom-live, set.

Why: the URL-seen test's memory bound is the Bloom filter; this checks it is also
fast enough not to matter, against the Python filters people would otherwise use,
in one run on the same keys.

1. Batch add and lookup at each size (default 1M and 10M keys), capacity = number
   of keys, error rate 1%: keys/s with hashing included, bytes per key, and the
   false-positive rate measured on 1M keys never added. Keys are URL strings
   ``https://host{i%1000}.example/path/{i}?q={i*7}``, generated once. Each library
   gets a fresh copy of them for each operation (untimed): str caches its hash(),
   so reusing the objects would hand set and rbloom their hashing for free.
   Every library takes str directly (pybloomfiltermmap3 encodes it inside).
   Timings: best of ``--repeat`` runs, gc disabled while timing.
2. Snapshot write/load MB/s and merge GB/s on a filter of the largest size.

    .venv/bin/python bench/dedup_bench.py [--sizes 1000000,10000000] [--repeat 2] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mmh3
import numpy as np
import pybloom_live
import pybloomfilter
import rbloom

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from run import emit

from dedup import BloomFilter, ShardedBloom
from dedup.filter.shards import merge_files
from dedup.native import compiled
from dedup.url.fingerprint import fingerprint_many, halves

ERROR_RATE = 0.01
BATCH = 100_000       # keys per add_many/contains_many call for ours
SHARDS = 64
HASH_CHUNK = 8192     # fingerprint_many chunk (bloom.CHUNK): one huge b"".join is slower


def make_keys(start: int, n: int) -> list[str]:
    return [f"https://host{i % 1000}.example/path/{i}?q={i * 7}" for i in range(start, start + n)]


def fresh(keys: list[str]) -> list[str]:
    """New str objects with the same text and no cached hash."""
    return "\n".join(keys).split("\n")


def prehash(keys: list[str]) -> np.ndarray:
    return halves(b"".join(fingerprint_many(keys[i:i + HASH_CHUNK])
                           for i in range(0, len(keys), HASH_CHUNK)))


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        out = fn(*args)
        return time.perf_counter() - t0, out
    finally:
        gc.enable()


# -- the libraries, each through its fastest batch API ----------------------------------


def _batched(fn: Callable[[Any], np.ndarray], data: Any) -> int:
    return sum(int(np.count_nonzero(fn(data[i:i + BATCH]))) for i in range(0, len(data), BATCH))


def _loop_add(add: Callable[[Any], Any], keys: list[str]) -> None:
    deque(map(add, keys), maxlen=0)


def _count_in(obj: Any, keys: list[str]) -> int:
    return sum(map(obj.__contains__, keys))


def _numpy(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``fn`` run on dedup's numpy code, as where the compiled kernel did not build."""
    def run(obj: Any, data: Any) -> Any:
        saved, compiled.kernel = compiled.kernel, None
        try:
            return fn(obj, data)
        finally:
            compiled.kernel = saved
    return run


_IMPL = "compiled kernel" if compiled.kernel is not None else "numpy: kernel not built"


def _mmh3_hash(key: str) -> int:
    return mmh3.hash128(key, signed=True)


@dataclass(frozen=True)
class Lib:
    name: str
    api: str
    make: Callable[[int], Any]
    add: Callable[[Any, Any], Any]
    lookup: Callable[[Any, Any], int]       # number of keys answered "present"
    nbytes: Callable[[Any, list[str]], int]
    prepare: Callable[[list[str]], Any] = lambda keys: keys  # untimed
    max_keys: int | None = None
    keep: str = ""  # kept, filled, for the snapshot/merge benchmark


def _set_bytes(s: set[str], keys: list[str]) -> int:
    # the table plus the key strings it keeps alive (a Bloom filter keeps neither)
    sample = keys[:: max(1, len(keys) // 10_000)]
    return sys.getsizeof(s) + round(sum(map(sys.getsizeof, sample)) / len(sample) * len(keys))


LIBS = [
    Lib("dedup BloomFilter", f"add_many / contains_many, {BATCH // 1000}k-key batches; {_IMPL}",
        lambda n: BloomFilter(n, ERROR_RATE),
        lambda bf, k: _batched(bf.add_many, k), lambda bf, k: _batched(bf.contains_many, k),
        lambda bf, _: bf.info()["bytes"], keep="bf"),
    *([Lib("dedup BloomFilter, numpy", "as above with the kernel switched off (its fallback)",
           lambda n: BloomFilter(n, ERROR_RATE),
           _numpy(lambda bf, k: _batched(bf.add_many, k)),
           _numpy(lambda bf, k: _batched(bf.contains_many, k)),
           lambda bf, _: bf.info()["bytes"])] if compiled.kernel is not None else []),
    Lib(f"dedup ShardedBloom({SHARDS})", f"add_many / contains_many, {BATCH // 1000}k-key batches",
        lambda n: ShardedBloom(SHARDS, n, ERROR_RATE),
        lambda sb, k: _batched(sb.add_many, k), lambda sb, k: _batched(sb.contains_many, k),
        lambda sb, _: sb.info()["bytes"], keep="sharded"),
    Lib("dedup BloomFilter, pre-hashed", "add_hashes / contains_hashes (hashing NOT timed)",
        lambda n: BloomFilter(n, ERROR_RATE),
        lambda bf, h: _batched(bf.add_hashes, h), lambda bf, h: _batched(bf.contains_hashes, h),
        lambda bf, _: bf.info()["bytes"], prepare=prehash),
    Lib("rbloom", "update(keys) / `in` loop; Python hash()",
        lambda n: rbloom.Bloom(n, ERROR_RATE), lambda b, k: b.update(k), _count_in,
        lambda b, _: b.size_in_bits // 8, prepare=fresh),
    Lib("rbloom, hash_func=mmh3.hash128", "update(keys) / `in` loop",
        lambda n: rbloom.Bloom(n, ERROR_RATE, hash_func=_mmh3_hash),
        lambda b, k: b.update(k), _count_in, lambda b, _: b.size_in_bits // 8, keep="rbloom"),
    Lib("pybloomfiltermmap3", "update(keys) / `in` loop; in memory (filename=None)",
        lambda n: pybloomfilter.BloomFilter(n, ERROR_RATE, None),
        lambda b, k: b.update(k), _count_in, lambda b, _: b.num_bits // 8, keep="pybf"),
    Lib("pybloom-live", "add / `in` loop (pure Python)",
        lambda n: pybloom_live.BloomFilter(n, ERROR_RATE),
        lambda b, k: _loop_add(b.add, k), _count_in, lambda b, _: b.num_bits // 8,
        max_keys=1_000_000),
    Lib("Python set", "update(keys) / `in` loop; exact, unbounded",
        lambda n: set(), lambda s, k: s.update(k), _count_in, _set_bytes, prepare=fresh),
]


def bench_size(n: int, keys: list[str], absent: list[str], repeat: int,
               kept: dict[str, Any]) -> dict[str, Any]:
    """One table row per library; the filled filters named by ``Lib.keep`` go in ``kept``."""
    rows = []
    notes = []
    for lib in LIBS:
        if lib.max_keys is not None and n > lib.max_keys:
            continue
        print(f"  {n:,} keys: {lib.name} ...", file=sys.stderr, flush=True)
        add_s = float("inf")
        obj = None
        reps = 1 if lib.max_keys is not None else repeat
        for _ in range(reps):
            obj = None
            gc.collect()
            obj = lib.make(n)
            data = lib.prepare(keys)
            t, _ = timed(lib.add, obj, data)
            add_s = min(add_s, t)
            del data
        data = lib.prepare(keys)
        hit_s, hits = float("inf"), 0
        for _ in range(reps):
            t, hits = timed(lib.lookup, obj, data)
            hit_s = min(hit_s, t)
        del data
        data = lib.prepare(absent)
        miss_s, false_pos = float("inf"), 0
        for _ in range(reps):
            t, false_pos = timed(lib.lookup, obj, data)
            miss_s = min(miss_s, t)
        del data
        size = lib.nbytes(obj, keys)
        if hits != n:
            notes.append(f"{lib.name}: only {hits} of {n} added keys found (false negatives!)")
        if isinstance(obj, ShardedBloom):
            grown = int((obj._stack.nlayers > 1).sum())
            if grown:
                notes.append(f"{lib.name} at {n:,} keys: {grown} of {SHARDS} shards passed "
                             f"their share of the capacity ({obj.shard_capacity:,}) and grew a "
                             "second layer, hence its bytes/key")
        rows.append([lib.name, lib.api, n / add_s, n / hit_s, len(absent) / miss_s,
                     size / n, false_pos / len(absent)])
        if lib.keep:
            kept[lib.keep] = obj
        del obj
        gc.collect()
    # where ours spends its time: the hashing alone
    hash_s = min(timed(lambda: prehash(keys))[0] for _ in range(repeat))
    notes.append(f"Hashing alone (fingerprint_many, chunks of {HASH_CHUNK}): "
                 f"{n / hash_s / 1e6:.2f} M keys/s ({hash_s / n * 1e9:.0f} ns/key).")
    notes.append(f"Best of {repeat} run(s) per cell (pybloom-live: 1); FPR on "
                 f"{len(absent):,} absent keys.")
    return {"title": f"Batch add and lookup, {n:,} keys (capacity {n:,}, error rate 1%)",
            "columns": ["library", "API", "add keys/s", "lookup keys/s (present)",
                        "lookup keys/s (absent)", "bytes/key", "measured FPR"],
            "rows": rows, "notes": notes}


# -- snapshots and merges ---------------------------------------------------------------


def _best(fn: Callable[[], Any], repeat: int) -> float:
    return min(timed(fn)[0] for _ in range(repeat))


def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.iterdir())


def bench_snapshot(n: int, kept: dict[str, Any], other: list[str], repeat: int) -> list[dict]:
    """Save/load/merge the filters filled with the ``n`` keys; the second operand of each
    merge holds ``other``."""
    print(f"  snapshot/merge at {n:,} keys ...", file=sys.stderr, flush=True)
    a, sa, ra, pa = kept["bf"], kept["sharded"], kept["rbloom"], kept["pybf"]
    h2 = prehash(other)
    b = BloomFilter(n, ERROR_RATE)
    b.add_hashes(h2)
    sb = ShardedBloom(SHARDS, n, ERROR_RATE)
    sb.add_hashes(h2)
    rb = rbloom.Bloom(n, ERROR_RATE, hash_func=_mmh3_hash)
    rb.update(other)
    pb = pybloomfilter.BloomFilter(n, ERROR_RATE, None, hash_seeds=pa.hash_seeds)
    pb.update(other)

    snap, merge = [], []
    with tempfile.TemporaryDirectory(prefix="bloomcrawl-bench-") as tmp:
        d = Path(tmp)
        f1, sdir = d / "one.bloom", d / "sharded"
        t = _best(lambda: a.save(f1), repeat)
        size = f1.stat().st_size
        snap.append(["dedup BloomFilter.save", "write, fsync file + folder, rename, CRC32",
                     size / 1e6, t * 1e3, size / 1e6 / t])
        t = _best(lambda: BloomFilter.load(f1), repeat)
        snap.append(["dedup BloomFilter.load", "read, validate, CRC32", size / 1e6, t * 1e3,
                     size / 1e6 / t])
        t = _best(lambda: sa.save(sdir), repeat)
        ssize = _dir_bytes(sdir)
        snap.append([f"dedup ShardedBloom.save ({SHARDS} files)", "as above, per shard file",
                     ssize / 1e6, t * 1e3, ssize / 1e6 / t])
        t = _best(lambda: ShardedBloom.load(sdir), repeat)
        snap.append([f"dedup ShardedBloom.load ({SHARDS} files)", "as above, per shard file",
                     ssize / 1e6, t * 1e3, ssize / 1e6 / t])
        rfile = d / "r.rbloom"
        t = _best(lambda: ra.save(str(rfile)), repeat)
        rsize = rfile.stat().st_size
        snap.append(["rbloom save", "write, no fsync, no checksum", rsize / 1e6, t * 1e3,
                     rsize / 1e6 / t])
        t = _best(lambda: rbloom.Bloom.load(str(rfile), _mmh3_hash), repeat)
        snap.append(["rbloom load", "read, no checksum", rsize / 1e6, t * 1e3, rsize / 1e6 / t])
        pfile = d / "p.pybf"
        # its persistence needs a file-backed filter: one with pa's bits
        pf = pybloomfilter.BloomFilter(n, ERROR_RATE, str(d / "p-live.pybf"),
                                       hash_seeds=pa.hash_seeds)
        pf.union(pa)

        def pybf_save() -> None:
            c = pf.copy(str(pfile))
            c.sync()  # msync, not fsync
            c.close()
            pfile.unlink()

        t = _best(pybf_save, repeat)
        pf.copy(str(pfile)).close()
        psize = pfile.stat().st_size
        snap.append(["pybloomfiltermmap3 copy(filename)", "file-backed filter: copy + msync",
                     psize / 1e6, t * 1e3, psize / 1e6 / t])

        def pybf_load() -> None:
            c = pybloomfilter.BloomFilter.open(str(pfile), "r")
            c.bit_count  # noqa: B018  # touch every page: open() alone only maps the file
            c.close()

        t = _best(pybf_load, repeat)
        snap.append(["pybloomfiltermmap3 open + bit_count", "mmap, every page touched",
                     psize / 1e6, t * 1e3, psize / 1e6 / t])

        fsize = a.info()["bytes"]
        t = _best(lambda: a | b, repeat)
        merge.append(["dedup BloomFilter a | b", "new filter: copy + OR + popcount",
                      fsize / 1e6, t * 1e3, fsize / 1e9 / t])
        c = a.copy()
        t = _best(lambda: c.__ior__(b), repeat)
        merge.append(["dedup BloomFilter a |= b", "in place: OR + popcount", fsize / 1e6,
                      t * 1e3, fsize / 1e9 / t])
        ssz = sa.info()["bytes"]
        t = _best(lambda: sa | sb, repeat)
        merge.append([f"dedup ShardedBloom({SHARDS}) a | b", "new filter, shard by shard",
                      ssz / 1e6, t * 1e3, ssz / 1e9 / t])
        bdir, odir = d / "sharded-b", d / "merged"
        sb.save(bdir)
        odir.mkdir()

        def merge_all() -> None:
            for i in range(SHARDS):
                merge_files(ShardedBloom.shard_path(odir, i),
                            [ShardedBloom.shard_path(sdir, i), ShardedBloom.shard_path(bdir, i)])

        t = _best(merge_all, repeat)
        merge.append([f"dedup snapshot.merge_files x {SHARDS} shards",
                      "2 files in (validate, CRC) -> 1 out (fsync); page cache warm",
                      ssize / 1e6, t * 1e3, ssize / 1e9 / t])
        rsz = ra.size_in_bits // 8
        t = _best(lambda: ra | rb, repeat)
        merge.append(["rbloom a | b", "new filter", rsz / 1e6, t * 1e3, rsz / 1e9 / t])
        rc = ra.copy()
        t = _best(lambda: rc.__ior__(rb), repeat)
        merge.append(["rbloom a |= b", "in place", rsz / 1e6, t * 1e3, rsz / 1e9 / t])
        psz = pa.num_bits // 8
        t = _best(lambda: pa.union(pb), repeat)
        merge.append(["pybloomfiltermmap3 a.union(b)", "in place", psz / 1e6, t * 1e3,
                      psz / 1e9 / t])
    return [
        {"title": f"Snapshot write/load, filter of {n:,} keys at 1%",
         "columns": ["operation", "what it does", "MB", "ms", "MB/s"], "rows": snap,
         "notes": [f"Best of {repeat}. Temp dir under {tempfile.gettempdir()} (same disk as the "
                   "repo). Loads read files just written, i.e. from the page cache."]},
        {"title": f"Merge (bitwise OR), filter of {n:,} keys at 1%",
         "columns": ["operation", "what it does", "MB per filter", "ms", "GB/s"],
         "rows": merge,
         "notes": ["GB/s = bytes of one filter / time (each merge reads two, writes one). "
                   f"Best of {repeat}."]},
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000",
                    help="comma-separated key counts")
    ap.add_argument("--absent", type=int, default=1_000_000,
                    help="keys never added, for the false-positive rate")
    ap.add_argument("--repeat", type=int, default=2,
                    help="best of this many runs per cell")
    ap.add_argument("--quick", action="store_true", help="100k keys, one run: a smoke test")
    args = ap.parse_args()
    if args.quick:
        args.sizes, args.absent, args.repeat = "100000", 100_000, 1
    sizes = [int(s) for s in args.sizes.split(",")]
    logging.getLogger("dedup").setLevel(logging.ERROR)  # the 80%-capacity warnings

    top = max(sizes)
    all_keys = make_keys(0, top)
    absent = make_keys(top, args.absent)  # never added: distinct i, distinct URL
    kept: dict[str, Any] = {}
    tables = [bench_size(n, all_keys[:n], absent, args.repeat, kept) for n in sorted(sizes)]
    tables[-1]["notes"].append(
        "pybloom-live is pure Python: run at 1M keys only. rbloom hashes with Python's "
        "hash() (SipHash, randomized per process: such a filter cannot be saved or "
        "shared), hence also the row with a stable mmh3 hash_func.")
    del all_keys
    tables += bench_snapshot(top, kept, absent, 3)
    emit(tables, sizes=sizes, absent=args.absent, repeat=args.repeat, batch=BATCH,
         pid=os.getpid())


if __name__ == "__main__":
    main()
