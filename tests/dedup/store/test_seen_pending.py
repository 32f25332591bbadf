"""UrlSeen's pending admissions: ``filter_new`` and ``add`` hold the keys they answer
"new" in RAM and write them by size or age, at ``commit()`` and ``close()``. Answers
stay exact within the process (a set is the model); after a kill -9 no key is answered
"seen" that the ledger does not hold, and everything committed is seen."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dedup import UrlSeen, canonicalize, fingerprint
from dedup.store.ledger import Ledger, State
from dedup.store.statedir import ledger_path

pytestmark = pytest.mark.usefixtures("store_impl")  # compiled and numpy/Python alike

BASES = ["http://a.test/d/", "https://b.test/x/y.html", None]


def href(k: int, rng: random.Random, base: str | None) -> str:
    """Key ``k`` written one of several ways (absolute, protocol-relative where there
    is a base, tracking noise)."""
    host = "a.test" if k % 2 else "b.test"
    forms = [f"http://{host}/p/{k}", f"HTTP://{host.upper()}/p/{k}#frag",
             f"http://{host}/p/{k}?utm_source=x"]
    return rng.choice(forms if base is None or base.startswith("https") else
                      [*forms, f"//{host}/p/{k}"])


def durable_count(d: Path) -> int:
    """URLs the ledger holds committed, as another process would read them."""
    with Ledger(ledger_path(d), readonly=True) as ledger:
        return len(ledger)


def until(condition, *, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_page_url_and_group_calls_answer_as_a_set(tmp_path, seed):
    """A terrible filter (maybe-seen all the time), a 16-key confirm cache (pending keys
    fall out of it) and a 7-key pending limit: every answer is the set's, across
    commits, forgets and a reopen."""
    rng = random.Random(seed)
    d = tmp_path / "s"
    kw = {"capacity": 50, "error_rate": 0.5, "shards": 2, "confirm_cache_size": 16,
          "pending_keys": 7}
    seen = UrlSeen(d, **kw)
    model: set[str] = set()
    try:
        for step in range(400):
            op = rng.random()
            base = rng.choice(BASES)
            links = [href(rng.randrange(300), rng, base) for _ in range(rng.randint(0, 12))]
            if op < 0.45:
                want = []
                for link in links:
                    key = canonicalize(link, base)
                    if key not in model and key not in want:
                        want.append(key)
                assert seen.filter_new(links, base_url=base) == want, step
                model.update(want)
            elif op < 0.85:
                for link in links:
                    key = canonicalize(link, base)
                    assert seen.add(link, base) is (key not in model), (step, link)
                    model.add(key)
            elif op < 0.9:
                got = seen.filter_new_pages([(base, links)])
                want = list(dict.fromkeys(k for k in (canonicalize(u, base) for u in links)
                                          if k not in model))
                assert got == [want], step
                model.update(want)
            elif op < 0.95:
                gone = [canonicalize(u, base) for u in links[:3]]
                seen.forget(gone)
                model.difference_update(gone)
            elif op < 0.98:
                seen.commit()
            else:
                seen.close()
                seen = UrlSeen(d, **kw)
        assert seen.add("mailto:x@a.test") is False
        assert seen.stats()["rejected"] >= 1
    finally:
        seen.close()
    with UrlSeen(d) as again:
        assert again.filter_new([f"http://{'a' if k % 2 else 'b'}.test/p/{k}"
                                 for k in range(300)]) == sorted(
            {f"http://{'a' if k % 2 else 'b'}.test/p/{k}" for k in range(300)} - model,
            key=lambda u: int(u.rsplit("/", 1)[1]))


def test_a_pending_key_is_seen_though_no_cache_holds_it(tmp_path):
    """No confirm cache, and the key's bits are not set until it is written: only the
    pending set can answer the second ask."""
    with UrlSeen(tmp_path / "s", confirm_cache_size=0, pending_keys=1000) as seen:
        assert seen.add("http://a.test/1") is True
        assert seen.add("http://a.test/1") is False
        assert seen.filter_new(["http://a.test/1", "http://a.test/2"]) == ["http://a.test/2"]
        assert seen.add("http://A.test/2#x") is False
        assert durable_count(tmp_path / "s") == 0  # still pending
        seen.commit()
        assert durable_count(tmp_path / "s") == 2
        assert seen.add("http://a.test/1") is False


def test_pending_keys_are_written_by_size(tmp_path):
    d = tmp_path / "s"
    with UrlSeen(d, pending_keys=5, pending_seconds=3600) as seen:
        for i in range(4):
            assert seen.add(f"http://a.test/{i}")
        assert durable_count(d) == 0
        assert seen.filter_new(["http://a.test/4", "http://a.test/5"]) == [
            "http://a.test/4", "http://a.test/5"]
        assert durable_count(d) == 6  # the 5th key wrote them all, in one commit
        assert seen.ledger.journal.recount()["admitted"] == 6


def test_pending_keys_are_written_by_age(tmp_path):
    d = tmp_path / "s"
    with UrlSeen(d, pending_keys=10**6, pending_seconds=0.05) as seen:
        t0 = time.monotonic()
        assert seen.add("http://a.test/1")
        assert durable_count(d) == 0  # only a call writes them: none has come yet
        # any later call writes them once they are old enough, new keys or not
        until(lambda: seen.add("http://a.test/1") is False and durable_count(d) == 1,
              what="the pending key written by age")
        assert time.monotonic() - t0 >= 0.05


def test_close_makes_every_answer_durable(tmp_path):
    d = tmp_path / "s"
    seen = UrlSeen(d, pending_keys=10**6, pending_seconds=3600, autocommit=False)
    assert seen.filter_new(["http://a.test/1", "http://a.test/2"], depth=2) == [
        "http://a.test/1", "http://a.test/2"]
    assert seen.add("http://a.test/3")
    seen.close()
    with UrlSeen(d) as again:
        assert again.filter_new(["http://a.test/1", "http://a.test/2", "http://a.test/3",
                                 "http://a.test/4"]) == ["http://a.test/4"]
        assert again.ledger.get(fingerprint("http://a.test/1", again.seed))["depth"] == 2
        assert again.ledger.get(fingerprint("http://a.test/3", again.seed))["depth"] == 0


def test_bad_pending_limits_are_refused(tmp_path):
    for kw in ({"pending_keys": 0}, {"pending_keys": 1.5}, {"pending_seconds": -1},
               {"pending_seconds": float("nan")}):
        with pytest.raises(ValueError, match="pending_"):
            UrlSeen(tmp_path / "s", **kw)
    assert not (tmp_path / "s").exists()


CHILD = r'''
import sys
from dedup import UrlSeen
d, log, commit_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
url = lambda k: f"http://h{k % 5}.test/p/{k}"
seen = UrlSeen(d, capacity=5000, shards=2, pending_keys=10**6, pending_seconds=3600)
with open(log, "w") as out:
    for k in range(400):
        new = seen.add(url(k)) if k % 3 else bool(seen.filter_new([url(k), url(k // 2)]))
        if k == commit_at:
            seen.commit()
            out.write("committed\n")
        out.write(f"{k} {int(new)}\n")
    out.write("ready\n")
    out.flush()
    import time
    time.sleep(3600)
'''


def test_kill9_before_commit_never_answers_seen_unrecorded(tmp_path):
    """The child answers 400 keys, commits after the 150th, answers the rest and is
    killed with SIGKILL before it writes them. Reopened: the first 150 are seen, and
    every key answered "seen" is one the ledger holds."""
    d, log = tmp_path / "state", tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(d), str(log), "150"],
                             env=env, stderr=subprocess.PIPE)
    try:
        until(lambda: child.poll() is not None or (log.exists()
                                                   and log.read_text().endswith("ready\n")),
              timeout=60, what="the child's answers")
        assert child.poll() is None, child.stderr.read().decode()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    lines = log.read_text().splitlines()
    assert "committed" in lines
    answered_new = {int(k) for k, new in (ln.split() for ln in lines if " " in ln) if new == "1"}
    assert len(answered_new) > 200
    with UrlSeen(d, create=False) as seen:
        committed = {k for k in range(151)} & answered_new
        for k in range(400):
            url = f"http://h{k % 5}.test/p/{k}"
            held = seen.ledger.get(fingerprint(canonicalize(url), seen.seed)) is not None
            if k <= 150:
                assert held, k  # committed: recorded and seen
            else:
                assert not held, k  # answered after the commit: lost by the kill
        assert all(seen.add(f"http://h{k % 5}.test/p/{k}") is False for k in committed)
        # never "seen" without being recorded: what the kill lost is new again
        assert all(seen.add(f"http://h{k % 5}.test/p/{k}") is True for k in range(151, 400))


def test_admit_one_promises_seqs_and_keeps_urls(tmp_path):
    """``admit_one`` rows stay pending, interleaved with ``add``/``filter_new`` keys and
    two depths; the seqs it answers are the ones the ledger gives them when written,
    with their URL text and depth, and an outcome can be recorded for one before any
    write (``record_outcomes`` writes the pending rows first)."""
    d = tmp_path / "s"
    promised: dict[str, int] = {}
    depths: dict[str, int] = {}
    with UrlSeen(d, pending_keys=10**6, pending_seconds=3600, autocommit=False) as seen:
        for k in range(40):
            url = f"http://h{k % 3}.test/p/{k}?utm_source=x"
            key = canonicalize(url)
            seq = seen.admit_one(url, key, depth=k // 20)
            assert seq is not None
            promised[url], depths[url] = seq, k // 20
            assert seen.admit_one(url, key) is None  # pending: seen at once
            assert seen.add(key) is False
            assert seen.add(f"http://other.test/{k}") is True  # a plain pending key
        assert seen.filter_new(["http://h0.test/p/0", "http://new.test/"]) == [
            "http://new.test/"]
        assert sorted(promised.values()) == list(range(1, 41))
        assert durable_count(d) == 0  # nothing written yet
        first = promised["http://h0.test/p/0?utm_source=x"]
        seen.records.record_outcomes([(first, State.FETCHED, 200, None)])
        # an admission that writes at once comes after the promised rows
        (later,) = seen.admit_pages([([("http://z.test/", "http://z.test/")], 0)])[0]
        assert later.seq > max(promised.values())
        assert seen.admit_one("http://z.test/", "http://z.test/") is None
        after = seen.admit_one("http://y.test/", "http://y.test/")
        assert after is not None and after > later.seq
        seen.commit()
        for url, seq in promised.items():
            row = seen.ledger.get(fingerprint(canonicalize(url), seen.seed))
            assert row is not None
            assert (row["seq"], row["depth"]) == (seq, depths[url])
        queued = {r.url: r.seq for r in seen.records.queued(1000)}
        assert "http://h0.test/p/0?utm_source=x" not in queued  # marked fetched
        assert queued["http://h1.test/p/1?utm_source=x"] == promised[
            "http://h1.test/p/1?utm_source=x"]
        assert queued["http://y.test/"] == after
    with UrlSeen(d) as again:
        assert again.admit_one("http://h2.test/p/5", canonicalize("http://h2.test/p/5")) is None
        assert len(again) == 40 + 40 + 1 + 1 + 1


def test_admit_one_refuses_a_url_with_a_newline_and_loses_nothing(tmp_path):
    with UrlSeen(tmp_path / "s", pending_keys=10**6, pending_seconds=3600) as seen:
        assert seen.admit_one("http://a.test/1", "http://a.test/1") == 1
        with pytest.raises(ValueError, match="newline"):
            seen.admit_one("http://a.test/\n2", "http://a.test/2")
        assert seen.admit_one("http://a.test/2", "http://a.test/2") == 2
        seen.commit()
        assert {r.url for r in seen.records.queued(10)} == {"http://a.test/1", "http://a.test/2"}


def test_held_among_answers_for_pending_keys(tmp_path):
    """The ledger-side membership test writes pending keys first: a key answered
    "new" a moment ago is present, as the set says."""
    with UrlSeen(tmp_path / "s", pending_keys=10**6, pending_seconds=3600) as seen:
        assert seen.filter_new(["http://a.test/1"]) == ["http://a.test/1"]
        fp = fingerprint("http://a.test/1", seen.seed)
        assert seen.held_among(fp) == [0]
        assert seen.records.counts()["admitted"] == 1
