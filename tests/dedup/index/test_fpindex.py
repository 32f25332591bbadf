"""FingerprintIndex answers exactly like a dict of the ledger under any sequence of
adds, forgets, flushes, merges and reopens (including kill -9 mid-flush and mid-merge)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup.base.errors import IndexDamaged
from dedup.index import fpindex
from dedup.index.fpindex import FingerprintIndex, ManifestError, verify_index
from dedup.index.runs import RunFileError
from tests.dedup.fpmodel import add_rows, assert_answers, model_of, replay

pytestmark = pytest.mark.usefixtures("lookup_impl")  # compiled lookups and Python alike

# few distinct hi values: many equal-hi streaks across the 4-record blocks
KEY = st.tuples(st.integers(0, 3), st.integers(0, 40))
OP = st.one_of(
    st.tuples(st.just("add"), st.lists(KEY, min_size=1, max_size=8)),
    st.tuples(st.just("forget"), st.lists(KEY, min_size=1, max_size=4)),
    st.tuples(st.just("flush"), st.just([])),
    st.tuples(st.just("merge"), st.just([])),
    st.tuples(st.just("reopen"), st.just([])),
)
ALL_KEYS = [(h, lo) for h in range(5) for lo in range(42)]
OPTS = {"buffer_records": 6, "fanout": 2, "block_records": 4}


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(OP, max_size=40), background=st.booleans())
def test_answers_like_a_dict(tmp_path_factory: pytest.TempPathFactory,
                             ops: list, background: bool) -> None:
    d = tmp_path_factory.mktemp("fpi")
    ledger: list[tuple[int, int, int, bool]] = []
    index = FingerprintIndex(d, background=background, **OPTS)
    try:
        for op, keys in ops:
            if op in ("add", "forget"):
                rows = [(len(ledger) + i + 1, h, lo, op == "forget")
                        for i, (h, lo) in enumerate(keys)]
                ledger.extend(rows)  # committed first, then indexed
                add_rows(index, rows, tombstone=op == "forget")
            elif op == "flush":
                index.flush(len(ledger))
            elif op == "merge":
                index.wait_merges()
            else:
                index.close()
                index = FingerprintIndex(d, background=background, **OPTS)
                replay(index, ledger)
            assert_answers(index, model_of(ledger), ALL_KEYS)
    finally:
        index.close()


def test_len_stats_and_rebuild(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    his = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    los = rng.integers(0, 2**64, 5000, dtype=np.uint64)
    seqs = np.arange(1, 5001, dtype=np.uint64)
    with FingerprintIndex(tmp_path / "a", buffer_records=1000, background=False) as idx:
        idx.add(his, los, seqs)
        idx.forget(his[:10], los[:10], seqs[:10] + np.uint64(5000))
        idx.flush(5010)
        st_ = idx.stats()
        assert st_["buffer"] == 0 and st_["runs"] == 1 and st_["mark"] == 5010
        idx.add(his[:100], los[:100] + np.uint64(1), seqs[:100] + np.uint64(6000))
        assert idx.stats()["buffer"] == 100
        idx.flush(5010)  # nothing committed past 5010: all 100 stay, folded
        # at least the records' bytes, at most ~64 B per record planned (a table
        # is sized for buffer_records from the start)
        assert idx.stats()["buffer"] == 100 and 100 * 24 <= idx.stats()["buffer_bytes"] < 64_000
        assert len(idx) == 4990 + 100  # forgotten keys and their tombstones gone: oldest run
    batches = [(his[i:i + 700], los[i:i + 700], seqs[i:i + 700], False)
               for i in range(0, 5000, 700)]
    batches.append((his[:10], los[:10], seqs[:10] + np.uint64(5000), True))
    idx = FingerprintIndex.rebuild(tmp_path / "b", batches, mark=5010, buffer_records=1000)
    try:
        present, seq = idx.lookup(his, los)
        assert not present[:10].any() and present[10:].all()
        assert (seq[10:] == seqs[10:].astype(np.int64)).all()
        assert idx.mark == 5010 and idx.stats()["buffer"] == 0
    finally:
        idx.close()


def test_newest_seq_wins_whatever_the_call_order(tmp_path: Path) -> None:
    one = np.array([7], np.uint64)
    with FingerprintIndex(tmp_path, background=False) as idx:
        idx.add(one, one, np.array([10], np.uint64))
        idx.forget(one, one, np.array([5], np.uint64))  # older than the admission
        idx.add(np.array([7, 7], np.uint64), np.array([8, 8], np.uint64),
                np.array([12, 11], np.uint64))  # in-batch order reversed too
        for _ in range(2):
            present, seq = idx.lookup(np.array([7, 7], np.uint64), np.array([7, 8], np.uint64))
            assert present.tolist() == [True, True] and seq.tolist() == [10, 12]
            idx.flush(12)


def _filled(d: Path) -> list[tuple[int, int, int, bool]]:
    ledger = [(i + 1, i % 3, i, False) for i in range(60)]
    with FingerprintIndex(d, **OPTS, background=False) as idx:
        replay(idx, ledger)
        idx.flush(60)
    return ledger


def test_orphans_are_deleted_and_damage_is_refused(tmp_path: Path) -> None:
    ledger = _filled(tmp_path)
    (tmp_path / "run-000000099999.fpr").write_bytes(b"half a run")
    (tmp_path / ".run-000000099998.fpr.1.abcd.tmp").write_bytes(b"x")
    with FingerprintIndex(tmp_path, **OPTS) as idx:
        assert_answers(idx, model_of(ledger), ALL_KEYS)
    assert not (tmp_path / "run-000000099999.fpr").exists()
    assert not list(tmp_path.glob(".*.tmp"))
    live = sorted(tmp_path.glob("run-*.fpr"))
    victim = live[0]
    data = victim.read_bytes()
    victim.write_bytes(data[:-5])
    with pytest.raises(RunFileError, match="truncated or damaged"):
        FingerprintIndex(tmp_path, **OPTS)
    victim.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(RunFileError, match=r"checksum|out of order"):
        FingerprintIndex(tmp_path, **OPTS)
    victim.write_bytes(data)
    manifest = tmp_path / "MANIFEST"
    good = manifest.read_bytes()
    for bad in (b"", b"{}\n0\n", good.replace(b"run-", b"run/"), b"\xff\xfe",
                good[:-3] + b"9\n"):
        manifest.write_bytes(bad)
        with pytest.raises(ManifestError, match="damaged"):
            FingerprintIndex(tmp_path, **OPTS)
    manifest.unlink()  # no manifest: every run is an orphan, the ledger replays it all
    with FingerprintIndex(tmp_path, **OPTS) as idx:
        assert idx.mark == 0 and not list(tmp_path.glob("run-*.fpr"))
        replay(idx, ledger)
        assert_answers(idx, model_of(ledger), ALL_KEYS)


CHILD = r"""
import random, sys, numpy as np
from dedup.index.fpindex import FingerprintIndex
d, ledger_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
from tests.dedup.fpmodel import replay
rows = []
for line in open(ledger_path):
    if line.endswith("\n"):
        s, h, l, t = line.split()
        rows.append((int(s), int(h), int(l), t == "1"))
idx = FingerprintIndex(d, buffer_records=300, fanout=2, block_records=8)
replay(idx, rows)
seq = rows[-1][0] if rows else 0
out = open(ledger_path, "a")
print("ready", flush=True)
while True:
    tomb = rng.random() < 0.2
    batch = []
    for _ in range(rng.randrange(1, 40)):
        seq += 1
        batch.append((seq, rng.randrange(8), rng.randrange(3000), tomb))
    out.write("".join(f"{s} {h} {l} {int(t)}\n" for s, h, l, t in batch))
    out.flush()  # committed: the page cache survives SIGKILL
    idx.add(np.array([b[1] for b in batch], np.uint64), np.array([b[2] for b in batch],
            np.uint64), np.array([b[0] for b in batch], np.uint64), tombstone=tomb)
    if idx.needs_flush:
        idx.flush(seq)
"""


@pytest.mark.parametrize("seed", range(5))
def test_kill9_anywhere_then_replay_is_exact(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    ledger_path = tmp_path / "ledger.txt"
    ledger_path.touch()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    for round_ in range(3):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "idx"),
                                  str(ledger_path), str(seed * 10 + round_)],
                                 stdout=subprocess.PIPE, env=env)
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        child.wait()
    rows = []
    for line in ledger_path.read_text().splitlines(keepends=True):
        if line.endswith("\n"):
            s, h, lo, t = line.split()
            rows.append((int(s), int(h), int(lo), t == "1"))
    assert len(rows) > 100
    with FingerprintIndex(tmp_path / "idx", buffer_records=300, fanout=2,
                          block_records=8) as idx:
        replay(idx, rows)
        keys = [(h, lo) for h in range(8) for lo in range(0, 3000, 7)]
        keys += [(r[1], r[2]) for r in rows[-500:]]
        assert_answers(idx, model_of(rows), keys)


def test_close_abandons_a_running_merge_cleanly(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    n = 40_000
    his, los = (rng.integers(0, 2**64, n, dtype=np.uint64) for _ in range(2))
    seqs = np.arange(1, n + 1, dtype=np.uint64)
    idx = FingerprintIndex(tmp_path, buffer_records=10_000, fanout=4)
    for i in range(0, n, 10_000):
        idx.add(his[i:i + 10_000], los[i:i + 10_000], seqs[i:i + 10_000])
        idx.flush(i + 10_000)
    assert idx.stats()["merging"] or idx.stats()["runs"] == 1
    idx.close()  # abandons the merge if it still runs: no temp file, no extra run
    assert not list(tmp_path.glob(".*.tmp"))
    with FingerprintIndex(tmp_path) as again:
        assert again.mark == n
        present, seq = again.lookup(his, los)
        assert present.all() and (seq == seqs.astype(np.int64)).all()


def test_flush_upto_keeps_newer_records_and_reopen_replays(tmp_path: Path) -> None:
    """The owner flushes only what is committed: records past ``upto_seq`` stay in
    the buffer (their key's older record may go: the newer one answers for it)."""
    ledger: list[tuple[int, int, int, bool]] = []
    rng = random.Random(3)
    opts = {"buffer_records": 40, "fanout": 2, "block_records": 4}
    idx = FingerprintIndex(tmp_path, background=False, **opts)
    try:
        for _ in range(30):
            rows = [(len(ledger) + i + 1, rng.randrange(4), rng.randrange(60), rng.random() < 0.2)
                    for i in range(rng.randrange(1, 12))]
            ledger.extend(rows)
            for tomb in (False, True):
                sel = [r for r in rows if r[3] == tomb]
                if sel:
                    add_rows(idx, sel, tombstone=tomb)
            if rng.random() < 0.4:
                idx.flush(max(idx.mark, len(ledger) - rng.randrange(10)))
            assert_answers(idx, model_of(ledger), ALL_KEYS)
    finally:
        idx.close()
    with FingerprintIndex(tmp_path, background=False, **opts) as again:  # unflushed: replayed
        replay(again, ledger)
        assert_answers(again, model_of(ledger), ALL_KEYS)


def test_verify_index_finds_what_open_finds(tmp_path: Path) -> None:
    """verify_index checks the manifest and every run whole, as opening does, without
    building anything; a run the unchanged manifest names but that is gone is damage."""
    ledger = _filled(tmp_path)
    assert verify_index(tmp_path) == len(ledger)
    assert verify_index(tmp_path / "none") == 0  # no index yet: empty
    victim = sorted(tmp_path.glob("run-*.fpr"))[-1]
    data = victim.read_bytes()
    for bad, message in ((data[:-24], "truncated or damaged"),
                         (data[:70] + bytes([data[70] ^ 4]) + data[71:], "checksum mismatch"),
                         (data[:20] + bytes([data[20] ^ 4]) + data[21:], "header checksum")):
        victim.write_bytes(bad)
        for check in (verify_index, lambda d: FingerprintIndex(d, **OPTS)):
            with pytest.raises(IndexDamaged, match=f"{victim.name}: .*{message}"):
                check(tmp_path)
    victim.unlink()
    with pytest.raises(IndexDamaged, match=f"{victim.name}: missing"):
        verify_index(tmp_path)
    (tmp_path / "MANIFEST").write_bytes(b"{}\n0\n")
    with pytest.raises(IndexDamaged, match="MANIFEST is damaged"):
        verify_index(tmp_path)


def test_rebuild_replaces_a_damaged_index_atomically(tmp_path: Path) -> None:
    """rebuild never reads the old index (damaged manifest, runs missing or garbled);
    killed before its manifest swap, it leaves the old index exactly as it was."""
    ledger = _filled(tmp_path)
    old = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def rows(fail_after: int | None = None):
        for i, (seq, h, lo, _) in enumerate(ledger):
            if fail_after is not None and i == fail_after:
                raise KeyboardInterrupt  # a kill, as far as the files are concerned
            yield (np.array([h], np.uint64), np.array([lo], np.uint64),
                   np.array([seq], np.uint64), False)

    with pytest.raises(KeyboardInterrupt):
        FingerprintIndex.rebuild(tmp_path, rows(fail_after=40), mark=60, **OPTS)
    assert (tmp_path / "MANIFEST").read_bytes() == old["MANIFEST"]
    assert all((tmp_path / n).read_bytes() == b for n, b in old.items())
    assert len(list(tmp_path.glob("run-*.fpr"))) > sum(n.startswith("run-") for n in old)
    with FingerprintIndex(tmp_path, **OPTS) as idx:  # the half-built runs are orphans
        assert_answers(idx, model_of(ledger), ALL_KEYS)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(old)

    (tmp_path / "MANIFEST").write_bytes(b"garbage")
    sorted(tmp_path.glob("run-*.fpr"))[0].unlink()
    with FingerprintIndex.rebuild(tmp_path, rows(), mark=60, **OPTS) as idx:
        assert_answers(idx, model_of(ledger), ALL_KEYS)
    assert not set(old) & {p.name for p in tmp_path.glob("run-*.fpr")}  # new names
    assert not (tmp_path / "MANIFEST.rebuild").exists()
    assert verify_index(tmp_path) >= len(ledger) - 2
    with FingerprintIndex(tmp_path, **OPTS) as idx:
        assert idx.mark == 60
        assert_answers(idx, model_of(ledger), ALL_KEYS)


def test_a_merge_gives_its_memory_back_on_its_own_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pages a merge's steps freed go back to the OS when it ends, not at the
    owner's next call: else the owner's opening of the merged run is allocated on
    top of them and the process's peak holds both."""
    threads: list[str] = []
    monkeypatch.setattr(fpindex, "give_back",
                        lambda: threads.append(threading.current_thread().name) or True)
    idx = FingerprintIndex(tmp_path, buffer_records=4, fanout=2)
    for i in range(2):
        idx.add(np.arange(4, dtype=np.uint64) + 10 * i, np.zeros(4, dtype=np.uint64),
                np.arange(4 * i + 1, 4 * i + 5, dtype=np.uint64))
        idx.flush(4 * i + 4)
    idx.wait_merges()
    idx.close()
    assert "fpindex-merge" in threads, threads


def _two_runs_merged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool
                     ) -> tuple[FingerprintIndex, list[int], np.ndarray]:
    """An inline index (fanout 2) whose second flush merges its two runs; what its
    runs held each time a run was opened; the keys added."""
    idx = FingerprintIndex(tmp_path, buffer_records=1000, fanout=2, background=False)
    held_at_open: list[int] = []
    real = fpindex.Run

    class Watched(real):  # type: ignore[misc, valid-type]
        def __init__(self, path: Path) -> None:
            held_at_open.append(sum(r.count for r in idx._runs))
            if fail and len(held_at_open) == 3:  # the merged run's
                raise RunFileError("damaged")
            super().__init__(path)

    monkeypatch.setattr(fpindex, "Run", Watched)
    rng = np.random.default_rng(8)
    keys = rng.integers(1, 2**63, size=(2000, 2), dtype=np.uint64)
    idx.add(keys[:1000, 0], keys[:1000, 1], np.arange(1, 1001))
    idx.flush(1000)
    idx.add(keys[1000:, 0], keys[1000:, 1], np.arange(1001, 2001))
    if fail:
        with pytest.raises(RunFileError):
            idx.flush(2000)
    else:
        idx.flush(2000)
    return idx, held_at_open, keys


def test_a_merged_run_is_opened_after_its_inputs_let_go(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installing a merge closes its inputs (their directories and filters) before
    it reads the merged run's: both at once were a Scrapy dupefilter's peak RSS.
    A merged run that fails to open leaves its inputs open and in use."""
    idx, held_at_open, keys = _two_runs_merged(tmp_path / "a", monkeypatch, fail=False)
    try:
        assert held_at_open == [0, 1000, 0]  # the inputs held 2,000 records before
        assert [r.count for r in idx._runs] == [2000]
        assert idx.lookup(keys[:, 0], keys[:, 1])[0].all()
    finally:
        idx.close()
    idx, _, keys = _two_runs_merged(tmp_path / "b", monkeypatch, fail=True)
    try:
        assert [r.count for r in idx._runs] == [1000, 1000]
        assert idx.lookup(keys[:, 0], keys[:, 1])[0].all()
    finally:
        idx.close()
