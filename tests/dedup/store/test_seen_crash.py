"""UrlSeen as a whole under kill -9: a child admits and forgets random keys in
group-commit mode with a tiny index buffer (so runs are flushed and merged in the
background) and snapshots now and then; it is killed at random moments, reopened
and killed again. Afterwards every committed admission is seen, by the ledger and
by the Bloom filter (no false negative), every committed forget is new again, and
a key never admitted is new."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dedup import UrlSeen, canonicalize, fingerprint
from dedup.url.fingerprint import halves

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike

UNIVERSE = 3000
CHILD = r'''
import json, os, random, sys
from dedup import UrlSeen
d, log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = random.Random(seed)
url = lambda k: f"http://h{k % 7}.test/p/{k}"
seen = UrlSeen(d, capacity=20_000, shards=4, autocommit=False, index_buffer=64,
               confirm_cache_size=16)
with open(log, "a") as out:
    for step in range(100_000):
        ops = []
        for _ in range(rng.randint(1, 5)):
            if rng.random() < 0.8:
                keys = rng.sample(range(2000), rng.randint(1, 20))
                seen.filter_new([url(k) for k in keys])
                ops.append(["add", keys])
            else:
                keys = rng.sample(range(2000), rng.randint(1, 5))
                seen.forget([url(k) for k in keys])
                ops.append(["forget", keys])
        out.write(json.dumps({"pending": ops}) + "\n"); out.flush(); os.fsync(out.fileno())
        seen.commit()
        out.write('{"committed": true}\n'); out.flush(); os.fsync(out.fileno())
        if rng.random() < 0.05:
            seen.snapshot()
'''


def url(k: int) -> str:
    return f"http://h{k % 7}.test/p/{k}"


def model(log: Path) -> tuple[set[int], set[int], set[int]]:
    """(surely present, surely absent, undecided) from the child's log: a batch
    logged as pending but not marked committed may or may not have landed."""
    present: set[int] = set()
    touched: set[int] = set()
    pending = None
    undecided: set[int] = set()
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if "pending" in rec:
            if pending is not None:  # the previous batch was never marked: a kill
                undecided |= {k for _, keys in pending for k in keys}
            pending = rec["pending"]
            continue
        for op, keys in pending:
            touched |= set(keys)
            if op == "add":
                present |= set(keys)
            else:
                present -= set(keys)
        pending = None
    if pending is not None:
        undecided |= {k for _, keys in pending for k in keys}
    absent = set(range(UNIVERSE)) - present
    return present - undecided, absent - undecided, undecided


@pytest.mark.slow
def test_kill9_anywhere_keeps_urlseen_exact(tmp_path):
    d, log = tmp_path / "state", tmp_path / "log.jsonl"
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    for round_ in range(5):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(d), str(log), str(round_)],
                                 env=env, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 20
        while not log.exists() or log.stat().st_size < 2000 * (round_ + 1):
            assert child.poll() is None, child.stderr.read().decode()
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.05, 0.6))
        child.send_signal(signal.SIGKILL)
        child.wait()
    surely, never, _ = model(log)
    assert surely and never
    with UrlSeen(d, create=False) as seen:
        runs = seen.ledger.index.stats()["run_records"]
        # Flushes happened: more records in runs than one 64-key buffer holds (merges
        # may have left a single run by the last open).
        assert runs and sum(runs) > 64, runs
        fps = {k: fingerprint(canonicalize(url(k)), seen.seed) for k in range(UNIVERSE)}
        values = list(fps.values())
        found = {values[i] for i in seen.ledger.held_among(b"".join(values))}
        bloom = seen.bloom.contains_hashes(halves(b"".join(fps[k] for k in sorted(surely))))
        assert bloom.all()  # no false negative for any committed admission
        assert {k for k in surely if fps[k] not in found} == set()
        assert {k for k in never if fps[k] in found} == set()
        assert seen.ledger.counts() == seen.ledger.journal.recount()
