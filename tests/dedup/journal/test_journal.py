"""Ledger format 2 (dedup.journal.journal): append-only batches, kept counters, the frontier,
crash safety, format-1 refusal and migration."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dedup.base.errors import LedgerDamaged, StateFormatError
from dedup.journal.format import ADMIT, FORGET, PortableRow, QueuedRow, State
from dedup.journal.journal import Journal
from dedup.journal.transfer import import_rows, migrate_v1, rows
from tests.support.ledger_v1 import Ledger

REPO = Path(__file__).resolve().parents[3]


def fp(i: int) -> bytes:
    return hashlib.md5(str(i).encode()).digest()


def fps(ids) -> bytes:
    return b"".join(fp(i) for i in ids)


def urls(ids, host="a.test"):
    return [f"http://{host}/{i}" for i in ids]


@pytest.fixture
def j(tmp_path):
    with Journal(tmp_path / "ledger.sqlite") as jr:
        yield jr


def replay(jr: Journal, after: int = 0, chunk: int = 65_536):
    out = [(int(s), f, int(k)) for seqs, blob, kinds in jr.batches_after(after, chunk=chunk)
           for s, f, k in zip(seqs, (blob[i:i + 16] for i in range(0, len(blob), 16)), kinds,
                              strict=True)]
    return out


def test_pragmas_and_format(j):
    assert j._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert j._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert j.meta_get("format") == 2


def test_append_gives_consecutive_seqs_and_one_log_row_per_batch(j):
    assert j.append(fps(range(5)), depth=1) == range(1, 6)
    assert j.append(fps(range(5, 8)), depth=2, urls=urls(range(5, 8))) == range(6, 9)
    assert j.append(b"", depth=0) == range(0)
    assert j.last_seq() == 8
    assert j._db.execute("SELECT COUNT(*) FROM log").fetchone()[0] == 2
    assert j.batch_of(7).seq == 6 and j.batch_of(7).depth == 2 and j.batch_of(9) is None
    assert j.batch_of(0) is None
    assert replay(j) == [(i + 1, fp(i), ADMIT) for i in range(8)]


def test_append_refuses_bad_input_and_writes_nothing(j):
    with pytest.raises(ValueError, match="16 bytes"):
        j.append(b"x" * 17, depth=0)
    with pytest.raises(ValueError, match="urls for"):
        j.append(fps(range(2)), depth=0, urls=["http://a.test/"])
    with pytest.raises(ValueError, match="newline"):
        j.append(fps(range(1)), depth=0, urls=["http://a.test/\n"])
    with pytest.raises(ValueError, match="hosts for"):
        j.append(fps(range(2)), depth=0, urls=urls(range(2)), hosts=["a.test"])
    assert j.last_seq() == 0 and j.counts()["admitted"] == 0 and replay(j) == []
    assert not j.in_transaction
    j.append(fp(1), depth=0)
    with pytest.raises(ValueError, match="is not a valid State"):
        j.mark_many([(1, State.FETCHED, 200, None), (1, 7, None, None)])
    assert j.counts() == j.recount() and j.row(1).state == State.QUEUED


def test_forget_is_a_tombstone_batch(j):
    j.append(fps(range(3)), depth=0)
    assert j.append_forget(fp(1)) == range(4, 5)
    assert replay(j, after=2) == [(3, fp(2), ADMIT), (4, fp(1), FORGET)]
    c = j.counts()
    assert (c["admitted"], c["forgotten"], c["queued"]) == (3, 1, 3)
    tomb = j.row(4)
    assert tomb.kind == FORGET and tomb.state is None and tomb.fp == fp(1)
    with pytest.raises(ValueError, match="not an admitted URL"):
        j.mark(4, State.FETCHED)


def test_batches_after_starts_mid_batch_and_chunks(j):
    for b in range(10):
        j.append(fps(range(b * 7, b * 7 + 7)), depth=0)
    full = replay(j)
    assert [s for s, _, _ in full] == list(range(1, 71))
    for after in (0, 3, 7, 8, 40, 69, 70, 99):
        for chunk in (1, 5, 64):
            got = replay(j, after, chunk)
            assert got == full[after:], (after, chunk)
    sizes = [len(s) for s, _, _ in j.batches_after(0, chunk=20)]
    assert sum(sizes) == 70 and max(sizes) < 20 + 7 * 256


def test_mark_many_moves_counters_once_per_seq(j):
    j.append(fps(range(6)), depth=0, urls=urls(range(6)))
    j.mark_many([(1, State.FETCHED, 200, None), (1, State.FETCHED, 200, None),
                 (2, State.FAILED, None, "timeout")])
    j.mark(2, State.FETCHED, status=200)  # failed -> fetched moves one count
    j.mark(3, State.SKIPPED, error="robots")
    with pytest.raises(ValueError, match="seq 3 is skipped"):
        j.mark(3, State.QUEUED)  # its text may be compacted away
    j.mark(4, State.QUEUED, error="retry later")  # still queued: status/error only
    assert j.counts() == {"admitted": 6, "forgotten": 0, "fetched": 2, "failed": 0,
                          "skipped": 1, "queued": 3} == j.recount()
    assert [r.seq for r in j.queued(10)] == [4, 5, 6]
    r = j.row(2)
    assert (r.state, r.status, r.url, r.depth) == (State.FETCHED, 200, "http://a.test/1", 0)
    with pytest.raises(ValueError, match="seq 99"):
        j.mark(99, State.FETCHED)
    assert j.row(99) is None


def test_queued_pages_in_seq_order_across_interleaved_hosts(j):
    ids = list(range(30))
    hosts = [("a.test", "b.test", "c.test")[i % 3] for i in ids]
    for b in range(3):
        part = ids[b * 10:(b + 1) * 10]
        j.append(fps(part), depth=b, urls=[f"http://{hosts[i]}/{i}" for i in part],
                 hosts=[hosts[i] for i in part])
    j.mark_many([(s, State.FETCHED, 200, None) for s in (2, 5, 17)])
    expect = [QueuedRow(i + 1, f"http://{hosts[i]}/{i}", hosts[i], i // 10)
              for i in ids if i + 1 not in (2, 5, 17)]
    assert j.queued(1000) == expect
    for limit in (1, 2, 4, 7):  # paging by cursor visits every row once, in order
        got, cursor = [], 0
        while page := j.queued(limit, after_seq=cursor):
            assert len(page) <= limit
            got += page
            cursor = page[-1].seq
        assert got == expect
    assert j.queued(1000, host="b.test") == [r for r in expect if r.host == "b.test"]
    assert j.queued(2, host="c.test", after_seq=20) == [
        r for r in expect if r.host == "c.test" and r.seq > 20][:2]
    assert j.queued_hosts() == ["a.test", "b.test", "c.test"]


def test_big_batches_keep_wide_offsets_and_lone_urls_stay_raw(j):
    ids = range(600)
    text = [f"http://{'ab'[i % 2]}.test/{i}" for i in ids]
    j.append(fps(ids), depth=0, urls=text)
    j.append(fp(600), depth=0, urls=["http://c.test/600"])
    assert [(r.seq, r.url) for r in j.queued(10**6)] == list(
        zip(range(1, 602), [*text, "http://c.test/600"], strict=True))
    assert j.row(600).url == text[599] and j.row(601).host == "c.test"


def test_compact_queue_drops_only_fully_done_rows(j):
    j.append(fps(range(4)), depth=0, urls=["http://a.test/0", "http://b.test/1",
                                            "http://a.test/2", "http://b.test/3"])
    j.mark_many([(1, State.FETCHED, 200, None), (2, State.FETCHED, 200, None)])
    assert j.compact_queue() == 0  # each host still has one queued URL
    j.mark(4, State.FAILED)
    assert j.compact_queue() == 1  # b.test's row is done
    assert j.queued_hosts() == ["a.test"]
    assert j.row(2).url is None and j.row(3).url == "http://a.test/2"
    j.mark(3, State.SKIPPED)
    assert j.compact_queue(full=True) == 1 and j.queued_hosts() == []
    assert j.counts() == j.recount()


def test_meta_values_and_reserved_keys(j):
    j.meta_set("geometry", {"m": 1, "seed": 0})
    assert j.meta_get("geometry") == {"m": 1, "seed": 0} and j.meta_get("x", 5) == 5
    for key in ("format", "counters"):
        with pytest.raises(ValueError, match="kept by the journal"):
            j.meta_set(key, 1)


def test_group_commit_rollback_and_close(tmp_path):
    path = tmp_path / "l.sqlite"
    jr = Journal(path, autocommit=False)
    jr.append(fps(range(3)), depth=0, urls=urls(range(3)))
    jr.commit()
    assert not jr.in_transaction
    jr.append(fps(range(3, 5)), depth=0, urls=urls(range(3, 5)))
    jr.mark(1, State.FETCHED)
    assert jr.in_transaction and jr.counts()["fetched"] == 1
    jr.rollback()
    assert jr.last_seq() == 3 and jr.counts()["fetched"] == 0 and len(jr.queued(10)) == 3
    jr.append(fps(range(3, 5)), depth=0)
    jr.close()  # commits
    with Journal(path) as again:
        assert again.last_seq() == 5 and again.counts() == again.recount()


def test_wal_stays_small_while_a_crawl_appends_url_text(tmp_path):
    """Issue 11.6: with 10,000-page checkpoints the WAL reached ~40 MB, so a small
    disk filled long before the data did. A crawl-like stream (URLs spread over many
    hosts, so each commit dirties many index pages) must keep it near 4 MiB."""
    rng = random.Random(7)
    path = tmp_path / "ledger.sqlite"
    wal = Path(f"{path}-wal")
    peak = 0
    with Journal(path, autocommit=False) as jr:
        for page in range(20_000):
            ids = range(page * 10, page * 10 + 10)
            hosts = [f"h{rng.randrange(3000)}.test" for _ in ids]
            page_urls = [f"http://{h}/{i}" for h, i in zip(hosts, ids, strict=True)]
            jr.append(fps(ids), depth=1, urls=page_urls, hosts=hosts)
            if page % 100 == 99:
                jr.commit()
                peak = max(peak, wal.stat().st_size)
    assert 0 < peak <= 8 << 20, f"WAL grew to {peak / 2**20:.1f} MiB"


def test_readonly_reader_while_a_writer_is_active(tmp_path):
    path = tmp_path / "l.sqlite"
    writer = Journal(path, autocommit=False)
    writer.append(fps(range(4)), depth=0, urls=urls(range(4)))
    writer.commit()
    writer.append(fps(range(4, 6)), depth=0)  # not committed: invisible to readers
    reader = Journal(path, readonly=True)
    assert reader.last_seq() == 4 and reader.counts()["admitted"] == 4
    assert [r.seq for r in reader.queued(10)] == [1, 2, 3, 4]
    with pytest.raises(PermissionError, match=r": opened read-only$"):
        reader.append(fp(9), depth=0)
    writer.commit()
    assert reader.last_seq() == 6 and reader.counts()["admitted"] == 6
    reader.close()
    writer.close()
    with pytest.raises(FileNotFoundError, match=r"^no ledger at .*none\.sqlite$"):
        Journal(tmp_path / "none.sqlite", readonly=True)


def _v1(path: Path) -> None:
    with Ledger(path) as led:
        led.insert([(fp(i), f"http://h{i % 2}.test/{i}", f"h{i % 2}.test", i % 3, State.QUEUED)
                    for i in range(10)])
        led.mark_many([(2, State.FETCHED, 200, None), (3, State.FAILED, 500, "boom")])
        led.forget([fp(4)])
        led.meta_set("geometry", {"shards": 4})


def test_format1_is_refused_with_one_line_naming_it(tmp_path):
    path = tmp_path / "ledger.sqlite"
    _v1(path)
    for readonly in (False, True):
        with pytest.raises(StateFormatError, match=r"format 1.*bloomcrawl migrate") as exc:
            Journal(path, readonly=readonly)
        assert "\n" not in str(exc.value)
    with Ledger(path) as led:  # the refusal changed nothing
        assert len(led) == 9


def test_migrate_v1_round_trip(tmp_path):
    v1 = tmp_path / "v1.sqlite"
    _v1(v1)
    with Ledger(v1, readonly=True) as led:
        old = list(led.rows())
    with Journal(tmp_path / "v2.sqlite", autocommit=False) as jr:
        assert migrate_v1(v1, jr) == 9
        got = list(rows(jr))
        assert jr.meta_get("geometry") == {"shards": 4}
        assert jr.counts() == {"admitted": 9, "forgotten": 0, "fetched": 1, "failed": 1,
                               "skipped": 0, "queued": 7} == jr.recount()
        with pytest.raises(ValueError, match="empty ledger"):
            migrate_v1(v1, jr)
    assert [r.fp for r in got] == [r[0] for r in old]
    for new, o in zip(got, old, strict=True):
        assert (new.depth, int(new.state), new.status, new.error) == (o[3], o[4], o[5], o[6])
        assert (new.url, new.host) == (o[1], o[2])  # text kept for every migrated row


def test_portable_rows_round_trip_with_tombstones(tmp_path):
    src = Journal(tmp_path / "a.sqlite")
    src.append(fps(range(4)), depth=1, urls=urls(range(4)))
    src.append(fps(range(4, 6)), depth=2)
    src.mark(2, State.FETCHED, status=200)
    src.append_forget(fp(0))
    before = list(rows(src))
    assert before[-1] == PortableRow(fp(0), None, None, 0, None, None, None)
    # text travels wherever the journal still holds it (done or not); none for the
    # fingerprint-only batch
    assert before[4].url is None and before[1].url == "http://a.test/1"
    with Journal(tmp_path / "b.sqlite", autocommit=False) as dst:
        assert import_rows(dst, before) == 7
        dst.commit()
        assert list(rows(dst)) == before
        assert dst.counts() == src.counts() == dst.recount()
    src.close()


# -- a model: a list of batches and a dict of outcomes ------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("admit"), st.integers(1, 6), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("forget"), st.integers(1, 3)),
    st.tuples(st.just("mark"), st.integers(0, 7), st.sampled_from(list(State))),
    st.tuples(st.just("mark"), st.just(-1), st.sampled_from(list(State))),  # the newest again
    st.tuples(st.just("commit")),
    st.tuples(st.just("crash")),
    st.tuples(st.just("compact")),
), max_size=40)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_matches_a_model_under_random_operations(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("model") / "l.sqlite"
    jr = Journal(path, autocommit=False)
    model: dict = {"log": [], "out": {}}  # log: (fp, kind, depth, url, host)
    durable = {"log": [], "out": {}}
    key = 0
    try:
        for op in ops:
            if op[0] == "admit":
                _, n, depth, with_text = op
                ids = range(key, key + n)
                key += n
                hosts = [f"h{i % 3}.test" for i in ids]
                text = [f"http://{h}/{i}" for h, i in zip(hosts, ids, strict=True)]
                jr.append(fps(ids), depth=depth, urls=text if with_text else None, hosts=hosts)
                model["log"] += [(fp(i), ADMIT, depth, t if with_text else None, h)
                                 for i, t, h in zip(ids, text, hosts, strict=True)]
            elif op[0] == "forget":
                ids = range(key - op[1], key)
                jr.append_forget(fps(ids))
                model["log"] += [(fp(i), FORGET, 0, None, None) for i in ids]
            elif op[0] == "mark":
                admitted = [s for s, r in enumerate(model["log"], 1) if r[1] == ADMIT]
                if admitted:
                    seq = admitted[op[1] % len(admitted)]
                    if op[2] == State.QUEUED != model["out"].get(seq, State.QUEUED):
                        with pytest.raises(ValueError, match="does not return"):
                            jr.mark(seq, op[2], status=200)
                    else:
                        jr.mark(seq, op[2], status=200)
                        model["out"][seq] = op[2]
            elif op[0] == "commit":
                jr.commit()
                durable = {"log": list(model["log"]), "out": dict(model["out"])}
            elif op[0] == "crash":
                jr.rollback()
                jr.close()
                jr = Journal(path, autocommit=False)
                model = {"log": list(durable["log"]), "out": dict(durable["out"])}
            else:
                jr.compact_queue()
            _check(jr, model)
    finally:
        jr.close()


def _check(jr: Journal, model: dict) -> None:
    log = model["log"]
    assert jr.last_seq() == len(log)
    assert replay(jr) == [(s, r[0], r[1]) for s, r in enumerate(log, 1)]
    done = [st for st in model["out"].values() if st != State.QUEUED]
    admitted = sum(1 for r in log if r[1] == ADMIT)
    expect = {"admitted": admitted, "forgotten": len(log) - admitted,
              "queued": admitted - len(done),
              **{s.name.lower(): done.count(s) for s in State if s != State.QUEUED}}
    assert jr.counts() == expect == jr.recount()
    queued = [QueuedRow(s, r[3], r[4], r[2]) for s, r in enumerate(log, 1)
              if r[1] == ADMIT and r[3] is not None
              and model["out"].get(s, State.QUEUED) == State.QUEUED]
    assert jr.queued(10**6) == queued
    for host in ("h0.test", "h1.test"):
        assert jr.queued(10**6, host=host) == [q for q in queued if q.host == host]
    for s, r in enumerate(log, 1):
        row = jr.row(s)
        assert (row.fp, row.kind, row.depth) == (r[0], r[1], r[2])
        if r[1] == ADMIT:
            assert row.state == model["out"].get(s, State.QUEUED)


# -- kill -9 ----------------------------------------------------------------------------

CHILD = r"""
import hashlib, sys
from dedup.journal.journal import Journal
from dedup.journal.format import State
N = 7
jr = Journal(sys.argv[1], autocommit=False)
b = jr.last_seq() // N
while True:
    ids = range(b * N, b * N + N)
    seqs = jr.append(b"".join(hashlib.md5(str(i).encode()).digest() for i in ids), depth=b % 5,
                     urls=[f"http://h{i % 4}.test/{i}" for i in ids])
    jr.mark_many([(s, State(1 + s % 3), 200, None) for s in seqs if s % 2])
    b += 1
    if b % 5 == 0:
        jr.commit()
        print(jr.last_seq(), flush=True)
"""


@pytest.mark.slow
def test_kill9_at_random_moments_loses_no_committed_batch(tmp_path):
    path = tmp_path / "l.sqlite"
    rng = random.Random(7)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    committed = 0
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                                env=env, text=True)
        for _ in range(rng.randint(1, 40)):
            committed = int(proc.stdout.readline())
        time.sleep(rng.random() * 0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        with Journal(path, readonly=True) as jr:
            hwm = jr.last_seq()
            assert hwm >= committed and hwm % 7 == 0  # whole batches only
            assert replay(jr) == [(i + 1, fp(i), ADMIT) for i in range(hwm)]
            assert jr.counts() == jr.recount()
            assert jr.counts()["admitted"] == hwm
            queued = {r.seq for r in jr.queued(10**7)}
            assert queued == {s for s in range(1, hwm + 1) if s % 2 == 0}
            assert np.all([jr.row(s).url == f"http://h{(s - 1) % 4}.test/{s - 1}"
                           for s in queued])


def test_notes_and_contents_rows_carry_a_checksum(tmp_path):
    """A flipped byte in a notes or contents row (a referrer, a first capture's URL)
    is refused on read and by verify(), like the log's rows, not read as another
    page's URL."""
    db = tmp_path / "ledger.sqlite"
    with Journal(db) as jr:
        jr.note_runs([(1, 4, "http://a.test/from")])
        jr.content_add([("sha1:AAAA", "http://a.test/first", "2026-11-25T00:00:00Z")])
        jr.commit()
        assert jr.note_of(3) == "http://a.test/from"
        assert jr.content_first("sha1:AAAA") == ("http://a.test/first",
                                                 "2026-11-25T00:00:00Z")
        assert jr.verify() >= 2
    for table, column, value, read in (
            ("notes", "text", "http://a.test/frog", lambda j: j.note_of(3)),
            ("contents", "name", "http://a.test/firsT", lambda j: j.content_first("sha1:AAAA"))):
        con = sqlite3.connect(db)
        old = con.execute(f"SELECT {column} FROM {table}").fetchone()[0]
        con.execute(f"UPDATE {table} SET {column} = ?", (value,))  # the crc left as it was
        con.commit()
        con.close()
        with Journal(db, readonly=True) as jr:
            with pytest.raises(LedgerDamaged, match=f"{table} row .* checksum"):
                jr.verify()
            with pytest.raises(LedgerDamaged, match="checksum"):
                read(jr)
        con = sqlite3.connect(db)
        con.execute(f"UPDATE {table} SET {column} = ?", (old,))
        con.commit()
        con.close()


def test_note_of_answers_as_the_table_does_and_recent_runs_from_ram(tmp_path):
    """note_of keeps the newest runs in RAM (a crawl asks for one each page it
    fetches): every answer is the table's, across runs noted in any order within a
    group, gaps between runs, runs replaced or noted below the newest, commits,
    rollbacks and a reopen; the runs just noted are answered without a query."""
    rng = random.Random(7)
    db = tmp_path / "ledger.sqlite"
    with Journal(db, autocommit=False) as jr:
        jr.note_runs([(5, 9, "http://a.test/old")])
        jr.commit()
    model: dict[int, tuple[int, str | None]] = {5: (9, "http://a.test/old")}

    def expect(seq: int) -> str | None:
        below = [f for f in model if f <= seq]
        if not below:
            return None
        last, text = model[max(below)]
        return text if last >= seq else None

    with Journal(db, autocommit=False) as jr:
        committed = dict(model)
        top = 20
        for step in range(400):
            k = rng.randrange(10)
            if k < 7:  # a group's runs: above every stored one, shuffled, gaps between
                runs = []
                for _ in range(rng.randrange(1, 5)):
                    first = top + rng.randrange(0, 3)
                    last = first + rng.randrange(0, 4)
                    runs.append((first, last, rng.choice([None, f"http://a.test/{step}"])))
                    top = last + 1
                rng.shuffle(runs)
                jr.note_runs(runs)
                model.update((f, (last, t)) for f, last, t in runs)
            elif k < 8:  # a stored run noted again with another text
                f = rng.choice(sorted(model))
                jr.note_runs([(f, model[f][0], f"http://a.test/again{step}")])
                model[f] = (model[f][0], f"http://a.test/again{step}")
            elif k < 9:
                jr.commit()
                committed = dict(model)
            else:
                jr.rollback()
                model = dict(committed)
            for seq in rng.sample(range(top + 3), min(25, top + 3)):
                assert jr.note_of(seq) == expect(seq), (step, seq)
        jr.commit()
        jr.note_runs([(top + 10, top + 14, "http://a.test/recent")])
        queries: list[str] = []
        jr._db.set_trace_callback(queries.append)
        assert jr.note_of(top + 12) == "http://a.test/recent"
        assert jr.note_of(top + 15) is None
        jr._db.set_trace_callback(None)
        assert queries == []
        model[top + 10] = (top + 14, "http://a.test/recent")
        jr.commit()
    with Journal(db, readonly=True) as jr:
        for seq in range(top + 20):
            assert jr.note_of(seq) == expect(seq), seq
