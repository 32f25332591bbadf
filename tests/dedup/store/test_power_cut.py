"""A power cut, then a kill -9 in another admission order: the seen-test stays exact.

A commit is durable against a kill -9 at once, against a power cut only once the
ledger's WAL is synced (checkpoints, and ``UrlSeen.sync`` before every snapshot).
The shard snapshots are fsynced: if one recorded a mark past what the ledger kept,
the rows given those seqs after the cut (other URLs, in another order) would never
be replayed into it, and after a kill -9 before the next snapshot their bits would
be gone: "definitely new" for a recorded URL, a page fetched twice.

The power cut is played by ``tests/support/powercut``: a process under an fsync-
recording shim is killed at a random moment, then every file of its state dir
goes back to what its last fsync made durable.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from dedup import UrlSeen
from dedup.filter.bloom import read_snapshot
from dedup.store.statedir import shards_dir
from dedup.url.fingerprint import halves
from tests.support.helpers import REPO, cli_env
from tests.support.powercut import PowerCut

BATCH = 40  # URLs a commit (a page's new links)
BATCHES = 60


def urls(kind: str, n: int) -> list[str]:
    return [f"http://h{i % 5}.example/{kind}/{i}" for i in range(n)]


def child(state: str, phase: str, seed: str) -> None:
    """Run in a subprocess. ``admit``: commit a page of new URLs at a time, a snapshot
    every third commit, a line out after each (the parent kills it at a random one).
    ``again``: the URLs the first phase wanted plus as many new ones, shuffled (a
    different admission order), committed, no snapshot; then kill -9 itself."""
    rng = random.Random(int(seed))
    with UrlSeen(state, create=False, autocommit=False) as seen:
        if phase == "admit":
            todo = urls("first", BATCH * BATCHES)
            for i in range(0, len(todo), BATCH):
                seen.admit(todo[i:i + BATCH], depth=1)
                seen.commit()
                if i // BATCH % 3 == 2:
                    seen.snapshot()
                print(i // BATCH, flush=True)
            sys.stdin.read()  # wait for the cut
        else:
            todo = urls("first", BATCH * BATCHES) + urls("second", BATCH * BATCHES)
            rng.shuffle(todo)
            for i in range(0, len(todo), BATCH):
                seen.admit(todo[i:i + BATCH], depth=1)
                seen.commit()
            os.kill(os.getpid(), signal.SIGKILL)


def run_child(state: Path, phase: str, seed: int, env: dict[str, str] | None = None
              ) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import sys; from tests.dedup.store.test_power_cut import child; "
         "child(*sys.argv[1:])", str(state), phase, str(seed)],
        cwd=REPO, env={**cli_env(), **(env or {})}, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def recorded(state: Path) -> tuple[list[str], np.ndarray]:
    """Every URL the ledger holds (all are queued: their text is kept) and every
    fingerprint its log holds."""
    with UrlSeen(state, readonly=True) as seen:
        texts = [u for _, _, _, group in seen.ledger.journal.queue_groups() for u in group]
        fps = b"".join(fps for _, fps, _ in seen.ledger.batches_after(0))
    return texts, halves(fps)


def test_a_power_cut_then_a_kill9_in_another_order_keeps_every_answer_exact(tmp_path):
    rng = random.Random(10)
    for trial in range(4):
        state = tmp_path / f"state-{trial}"
        with UrlSeen(state, capacity=200_000, shards=8) as seen:  # a clean start: durable
            seen.admit(urls("seed", 50), depth=0)
        cut = PowerCut(state, tmp_path / f"shadow-{trial}")
        cut.settle()
        proc = run_child(state, "admit", trial, cut.env())
        assert proc.stdout is not None and proc.stdin is not None
        stop = rng.randrange(4, BATCHES)
        for _ in range(stop):
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
        proc.kill()  # the power goes out
        proc.communicate()
        lost = cut.cut()
        assert lost["rolled_back"] + lost["emptied"] > 0  # unsynced writes were dropped
        with UrlSeen(state, readonly=True) as seen:
            last = seen.ledger.last_seq()
            marks = [read_snapshot(p)[1].hwm for p in shards_dir(state).glob("shard-*.bloom")]
        assert marks and max(marks) <= last, (trial, marks, last)  # no mark past the ledger

        again = run_child(state, "again", trial)
        _, err = again.communicate(timeout=120)
        assert again.returncode == -signal.SIGKILL, err

        texts, fps = recorded(state)
        assert len(texts) == len(fps) > 50
        with UrlSeen(state, readonly=True) as seen:
            assert seen.bloom.contains_hashes(fps).all(), trial  # no bit missing
        with UrlSeen(state, create=False) as seen:
            answered_new = [u for u in texts if seen.add(u)]
        assert answered_new == [], (trial, len(answered_new))


def test_a_mark_past_the_ledger_is_cut_back_and_rewritten_at_open(tmp_path):
    """The other end: shard files whose mark is past the ledger's last row (rows a cut
    took) are replayed from the ledger's end, and rewritten at once with that mark, so
    rows admitted after the open are replayed after a kill -9 too."""
    state = tmp_path / "s"
    with UrlSeen(state, capacity=100_000, shards=4) as seen:
        seen.admit(urls("a", 100), depth=1)
        seen.snapshot()
        crawl_id = seen.crawl_id
    shards = sorted(shards_dir(state).glob("shard-*.bloom"))
    with UrlSeen(state, create=False) as seen:  # rows 101..200, snapshot marked 200
        seen.admit(urls("b", 100), depth=1)
        seen.snapshot()
    ahead = {p: p.read_bytes() for p in shards}
    # the ledger as a cut before its sync left it: rows 101..200 gone, the shards kept
    with UrlSeen(tmp_path / "t", capacity=100_000, shards=4, crawl_id=crawl_id) as other:
        other.admit(urls("a", 100), depth=1)
    db = state / "ledger.sqlite"
    db.write_bytes((tmp_path / "t" / "ledger.sqlite").read_bytes())
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    for p, data in ahead.items():
        p.write_bytes(data)
    with UrlSeen(state, readonly=True) as seen:
        assert seen.ledger.last_seq() == 100
        assert max(read_snapshot(p)[1].hwm for p in shards) == 200
    with UrlSeen(state, create=False) as seen:  # opens, rewrites the marks
        assert max(read_snapshot(p)[1].hwm for p in shards) == 100
        seen.admit(urls("c", 100), depth=1)  # seqs 101..200 again, other URLs
    _, fps = recorded(state)
    with UrlSeen(state, readonly=True) as seen:
        assert seen.bloom.contains_hashes(fps).all()
