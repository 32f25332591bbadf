"""Fingerprint index: runs as sorted files vs SQLite WITHOUT ROWID tables; probe vs batch.

    .venv/bin/python bench/index_bench.py --keys 10000000

(1) One run of N distinct fingerprints, built from sorted input, as a
dedup.index.runs file and as a SQLite ``WITHOUT ROWID`` table filled by sorted bulk
inserts: bytes on disk per key, build time, bytes written (/proc/self/io
``write_bytes``) per key, lookup time per key for page-sized batches (15 keys,
80% hits) and for 10k-key batches, batched (files: one vectorized call;
SQLite: a ``VALUES`` list joined to the table per 400 keys) and probed one key
per call. (2) The whole
FingerprintIndex fed N keys in page-sized ``add`` calls with ``flush`` at every
``--buffer`` records and background tiered merges: throughput, bytes written per
record (write amplification), runs left, RSS, lookups through it (per key and
per 15-key page: the "maybe seen" keys of one crawled page), and the live bytes
(tracemalloc) per record of a full in-RAM buffer.
Timings are best of ``--repeat`` interleaved rounds (2 shared cores: noisy).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import emit

from dedup.index.fpindex import SMALL_BATCH, FingerprintIndex
from dedup.index.runs import Run, write_run

PAGE = 15
BIG = 10_000


def write_bytes() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) in MB."""
    vals = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            vals[line.split(":")[0]] = int(line.split()[1]) / 1024
    return vals["VmRSS"], vals["VmHWM"]


def keyset(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**64, n, dtype=np.uint64), rng.integers(0, 2**64, n, dtype=np.uint64)


def probes(hi: np.ndarray, lo: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` keys, 80% present (random members), 20% absent (fresh random)."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(hi), n)
    ph, pl = hi[pick].copy(), lo[pick].copy()
    miss = rng.random(n) < 0.2
    ph[miss] = rng.integers(0, 2**64, int(miss.sum()), dtype=np.uint64)
    return ph, pl


class FileRun:
    name = "sorted file (dedup.index.runs)"

    def __init__(self, path: Path) -> None:
        self.path = path

    def build(self, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray) -> None:
        step = 1 << 20
        write_run(self.path, ((hi[i:i + step], lo[i:i + step], seq[i:i + step])
                              for i in range(0, len(hi), step)))
        self.run = Run(self.path)

    def batch(self, hi: np.ndarray, lo: np.ndarray) -> int:
        if len(hi) <= SMALL_BATCH:  # as FingerprintIndex.lookup: key by key in C bisects
            todo = list(zip(range(len(hi)), hi.tolist(), lo.tolist(), strict=True))
            return len(self.run.find_each(todo)[0])
        order = np.lexsort((lo, hi))
        return int(self.run.contains(hi[order], lo[order])[0].sum())

    def probe(self, hi: np.ndarray, lo: np.ndarray) -> int:
        return sum(len(self.run.find_each([(0, h, lo_)])[0])
                   for h, lo_ in zip(hi.tolist(), lo.tolist(), strict=True))

    def size(self) -> int:
        return self.path.stat().st_size


class SqliteRun:
    name = "SQLite WITHOUT ROWID table"

    def __init__(self, path: Path) -> None:
        self.path = path

    def build(self, hi: np.ndarray, lo: np.ndarray, seq: np.ndarray) -> None:
        shi, slo = hi.view(np.int64), lo.view(np.int64)
        order = np.lexsort((slo, shi))  # SQLite orders signed 64-bit integers
        db = sqlite3.connect(self.path)
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("CREATE TABLE run (hi INTEGER NOT NULL, lo INTEGER NOT NULL, "
                   "seq INTEGER NOT NULL, PRIMARY KEY (hi, lo)) WITHOUT ROWID")
        with db:
            step = 1 << 18
            for i in range(0, len(order), step):
                o = order[i:i + step]
                db.executemany("INSERT INTO run VALUES (?, ?, ?)",
                               zip(shi[o].tolist(), slo[o].tolist(),
                                   seq[o].view(np.int64).tolist(), strict=True))
        self.db = db

    def batch(self, hi: np.ndarray, lo: np.ndarray) -> int:
        got = 0
        shi, slo = hi.view(np.int64).tolist(), lo.view(np.int64).tolist()
        for i in range(0, len(shi), 400):  # SQLite's variable limit
            h, lo_ = shi[i:i + 400], slo[i:i + 400]
            q = ("SELECT count(*) FROM (VALUES " + ",".join(["(?,?)"] * len(h))
                 + ") AS v CROSS JOIN run ON run.hi = v.column1 AND run.lo = v.column2")
            got += self.db.execute(q, [v for p in zip(h, lo_, strict=True) for v in p]
                                   ).fetchone()[0]
        return got

    def probe(self, hi: np.ndarray, lo: np.ndarray) -> int:
        ex = self.db.execute
        return sum(ex("SELECT seq FROM run WHERE hi=? AND lo=?", (h, lo_)).fetchone() is not None
                   for h, lo_ in zip(hi.view(np.int64).tolist(), lo.view(np.int64).tolist(),
                                     strict=True))

    def size(self) -> int:
        return self.path.stat().st_size


def timed_lookups(store, hi: np.ndarray, lo: np.ndarray, pages: int, rounds: int) -> dict:
    """µs per key: page batches batched and probed, 10k batches batched (best of rounds)."""
    res = {"page batch": 1e9, "page probe": 1e9, "10k batch": 1e9}
    ph, pl = probes(hi, lo, pages * PAGE, 7)
    bh, bl = probes(hi, lo, BIG * 5, 8)
    for _ in range(rounds):
        t = time.perf_counter()
        hits = sum(store.batch(ph[i:i + PAGE], pl[i:i + PAGE]) for i in range(0, len(ph), PAGE))
        res["page batch"] = min(res["page batch"], (time.perf_counter() - t) / len(ph) * 1e6)
        t = time.perf_counter()
        assert store.probe(ph, pl) == hits
        res["page probe"] = min(res["page probe"], (time.perf_counter() - t) / len(ph) * 1e6)
        t = time.perf_counter()
        for i in range(0, len(bh), BIG):
            store.batch(bh[i:i + BIG], bl[i:i + BIG])
        res["10k batch"] = min(res["10k batch"], (time.perf_counter() - t) / len(bh) * 1e6)
    res["hit rate"] = hits / len(ph)
    return res


def compare_runs(n: int, work: Path, pages: int, rounds: int) -> dict:
    hi, lo = keyset(n)
    order = np.lexsort((lo, hi))
    shi, slo = hi[order], lo[order]
    seq = np.arange(1, n + 1, dtype=np.uint64)
    stores = [FileRun(work / "one.fpr"), SqliteRun(work / "one.sqlite")]
    rows = []
    for store in stores:
        w0, t = write_bytes(), time.perf_counter()
        store.build(shi, slo, seq)
        build = time.perf_counter() - t
        wrote = write_bytes() - w0
        look = timed_lookups(store, hi, lo, pages, rounds)
        rows.append([store.name, round(store.size() / n, 1), round(build, 1),
                     round(wrote / n, 1), round(look["page batch"], 2),
                     round(look["page probe"], 2), round(look["10k batch"], 3),
                     round(look["hit rate"], 2), round(rss_mb()[0])])
    return {"title": f"One run of {n:,} fingerprints: file vs SQLite",
            "columns": ["run as", "B/key on disk", "build s", "B written/key",
                        "µs/key page batch", "µs/key page probe", "µs/key 10k batch",
                        "hits", "RSS MB"],
            "rows": rows,
            "notes": ["File build includes writing from sorted arrays and the verifying open "
                      "(CRC, order, directory, filter); SQLite build is executemany of sorted "
                      "rows in one transaction, journal off. RSS counts mapped file pages "
                      "touched. Page batches of the file probe key by key (as the index does)."]}


def buffer_bytes(work: Path, records: int) -> float:
    """Live bytes per record of an index buffer holding ``records`` records, added
    as 10-key pages in seq order (the owner's pattern), nothing flushed."""
    hi, lo = keyset(records, 11)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        idx = FingerprintIndex(work / "buffer-only", buffer_records=records + 1)
        for i in range(0, records, 10):
            h, lo_ = hi[i:i + 10], lo[i:i + 10]
            idx.add(h, lo_, np.arange(i + 1, i + 1 + len(h), dtype=np.uint64))
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    idx.close()
    return used / records


def index_flow(n: int, work: Path, buffer: int, pages: int, rounds: int) -> dict:
    d = work / "index"
    hi, lo = keyset(n, 3)
    w0, t0, c0 = write_bytes(), time.perf_counter(), time.process_time()
    idx = FingerprintIndex(d, buffer_records=buffer, fanout=4, background=True)
    step = 75 * 5  # a few pages of new keys per add, as the owner's group commit does
    for i in range(0, n, step):
        seqs = np.arange(i + 1, min(i + step, n) + 1, dtype=np.uint64)
        idx.add(hi[i:i + step], lo[i:i + step], seqs)
        if idx.needs_flush:
            idx.flush(int(seqs[-1]))
    idx.flush(n)
    ingest = time.perf_counter() - t0
    idx.wait_merges()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    wrote = write_bytes() - w0
    st = idx.stats()

    class Via:
        def batch(self, h, lo_):
            return int(idx.lookup(h, lo_)[0].sum())

        def probe(self, h, lo_):
            return sum(bool(idx.lookup(h[i:i + 1], lo_[i:i + 1])[0][0]) for i in range(len(h)))

    look = timed_lookups(Via(), hi, lo, pages, rounds)
    per_record = buffer_bytes(work, buffer)
    t = time.perf_counter()
    idx.close()
    FingerprintIndex(d).close()
    reopen = time.perf_counter() - t
    return {"title": f"FingerprintIndex: {n:,} keys added, flushed every {buffer:,}, fanout 4",
            "columns": ["records/s (add+flush)", "records/s incl. merges", "CPU s",
                        "B written/record", "runs", "B/key on disk", "µs/key page batch",
                        "µs/page (15 keys)", "µs/key page probe", "µs/key 10k batch",
                        "close+reopen s", "buffer B/record", "peak RSS MB"],
            "rows": [[round(n / ingest), round(n / wall), round(cpu, 1), round(wrote / n, 1),
                      st["runs"], round(st["bytes"] / n, 1), round(look["page batch"], 2),
                      round(look["page batch"] * PAGE, 1),
                      round(look["page probe"], 2), round(look["10k batch"], 3),
                      round(reopen, 2), round(per_record, 1), round(rss_mb()[1])]],
            "notes": [f"runs left: {st['run_records']}",
                      f"buffer B/record: live bytes (tracemalloc) of a buffer of {buffer:,} "
                      "records added as 10-key pages, over the records it holds.",
                      "B written/record = all bytes this "
                      "process wrote (flushes + merges + manifests) / records: the write "
                      "amplification of the index alone (the ledger is not in it)."]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--buffer", type=int, default=1 << 20)
    ap.add_argument("--pages", type=int, default=2000, help="page batches timed per round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="work folder (default: a temp dir)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="index_bench.", dir=args.dir))
    try:
        tables = [compare_runs(args.keys, work, args.pages, args.repeat),
                  index_flow(args.keys, work, args.buffer, args.pages, args.repeat)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    emit(tables, keys=args.keys)


if __name__ == "__main__":
    main()
