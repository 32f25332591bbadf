"""GroupCommit on its own (crawler/core/durability/commit.py), over a real state directory,
pages.jsonl and WARC file in tmp_path: a group's records and WARC records are written
and synced before its marks commit, ``before_commit`` runs inside that transaction,
the committed offsets are the files' sizes, a page's ``links_new`` and ``referrer``
come from the admission, and a failed group marks nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.config.scope import Scope
from crawler.config.settings import OutputSettings
from crawler.core.durability.commit import GroupCommit, output_files
from crawler.core.schedule.admission import Admission
from crawler.core.schedule.frontier import Frontier
from crawler.core.schedule.politeness import Politeness
from crawler.core.state.crawlstate import Committed, CrawlState
from crawler.net.exchange import Exchange
from dedup import State, UrlSeen

SEED = "http://a.test/"


@pytest.fixture
def seen(tmp_path: Path) -> Iterator[UrlSeen]:
    # as a crawl opens it: nothing commits but the group commit
    with UrlSeen(tmp_path / "state", capacity=10_000, shards=2, autocommit=False) as s:
        yield s


def admission(seen: UrlSeen) -> tuple[Admission, Frontier]:
    """A crawl's admission and frontier, the seed admitted and committed."""
    state = CrawlState(seen.records)
    frontier = Frontier(state, Politeness(per_host=100))
    adm = Admission(seen, state, Scope.for_seeds([SEED]), 0, {})
    adm.admit_pages([([seen.canonicalizer.resolve(SEED)], 0)])
    seen.commit()
    frontier.add(adm.take_admitted())
    return adm, frontier


def links(seen: UrlSeen, *paths: str) -> list[tuple[str, str] | None]:
    return [seen.canonicalizer.resolve(SEED + p) for p in paths]


def robots_exchange() -> Exchange:
    return Exchange(url=SEED + "robots.txt", started=time.time(), method="GET",
                    target="/robots.txt", request_headers=[("Host", "a.test")],
                    version="HTTP/1.1", status=200, reason="OK",
                    response_headers=[("Content-Type", "text/plain")],
                    payload=b"User-agent: *\nDisallow:\n")


class Spy:
    """An ``also_sync`` file: notes when the group syncs it."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    async def sync(self) -> None:
        self.events.append("sync outbox")


async def test_a_group_is_synced_then_hooked_then_committed_with_the_files_sizes(
        seen: UrlSeen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    adm, frontier = admission(seen)
    pagelog, warc = output_files(Path(seen.state_dir), CrawlState(seen.records),
                                 OutputSettings(warc=str(tmp_path / "out.warc.gz")))
    await pagelog.open()
    assert warc is not None
    await warc.open()
    events: list[str] = []
    sync_pages = pagelog.sync

    async def pages_synced() -> None:
        await sync_pages()
        events.append("sync pages")

    marked: list[int] = []
    in_frontier: list[int] = []  # URLs the frontier holds as each group commits

    def before_commit(seqs: list[int]) -> None:
        # inside the transaction: the records are on disk, these marks not yet set
        counts = seen.ledger.counts()
        assert counts["fetched"] + counts["failed"] == len(marked)
        marked.extend(seqs)
        assert len(Path(seen.state_dir, "pages.jsonl").read_bytes()) == pagelog.size > 0
        in_frontier.append(len(frontier))
        events.append(f"before_commit {seqs}")

    commit = seen.commit

    def committed() -> None:
        events.append("commit")
        commit()

    monkeypatch.setattr(pagelog, "sync", pages_synced)
    monkeypatch.setattr(warc, "sync", _noting(warc.sync, events, "sync warc"))
    monkeypatch.setattr(seen, "commit", committed)
    gc = GroupCommit(pagelog, warc, seen, adm.state, frontier, adm,
                     before_commit=before_commit, also_sync=[Spy(events)])
    gc.start()

    seed = await frontier.get()
    assert seed is not None and seed.url == SEED
    routed, _ = adm.route(links(seen, "x", "y", "x"), 1)
    gc.add_exchanges([robots_exchange()])
    await gc.commit_page(seed, None, SEED, 3, routed, State.FETCHED, None, warc=True)

    assert sorted(events[:3]) == ["sync outbox", "sync pages", "sync warc"]
    assert events[3:] == [f"before_commit [{seed.seq}]", "commit"]
    (record,) = [json.loads(line) for line in
                 Path(seen.state_dir, "pages.jsonl").read_text().splitlines()]
    assert (record["url"], record["links_found"], record["links_new"]) == (SEED, 3, 2)
    assert record["referrer"] is None  # a seed
    counts = seen.ledger.counts()
    assert (counts["fetched"], counts["queued"]) == (1, 2)
    # the group's new URLs were queued in the ledger, not yet handed out, when it
    # committed: the frontier is fed once they are
    assert in_frontier == [0] and len(frontier) == 2
    warc_file = warc.path
    assert CrawlState(seen.records).committed() == Committed(
        pages=Path(seen.state_dir, "pages.jsonl").stat().st_size,
        warc={"serial": warc.committed()["serial"], "size": warc_file.stat().st_size})
    assert warc_file.stat().st_size > 0

    # a page found on the seed names it as its referrer
    child = await frontier.get()
    assert child is not None and child.depth == 1
    events.clear()
    await gc.commit_page(child, None, child.url, 0, None, State.FAILED, "boom", warc=True)
    assert events[-2:] == [f"before_commit [{child.seq}]", "commit"]
    await gc.close()
    await pagelog.close()
    await warc.close()
    last = json.loads(Path(seen.state_dir, "pages.jsonl").read_text().splitlines()[-1])
    assert (last["url"], last["referrer"], last["error"]) == (child.url, SEED, "boom")
    assert seen.ledger.counts()["failed"] == 1


def _noting(sync, events: list[str], name: str):
    async def noted() -> None:
        await sync()
        events.append(name)
    return noted


async def test_a_failed_group_marks_nothing_and_fails_every_later_commit(
        seen: UrlSeen) -> None:
    adm, frontier = admission(seen)
    pagelog, _ = output_files(Path(seen.state_dir), CrawlState(seen.records), OutputSettings())
    await pagelog.open()

    def full_disk(seqs: list[int]) -> None:
        raise OSError(28, "No space left on device")

    gc = GroupCommit(pagelog, None, seen, adm.state, frontier, adm, before_commit=full_disk)
    gc.start()
    seed = await frontier.get()
    assert seed is not None
    with pytest.raises(OSError, match="No space"):
        await gc.commit_page(seed, None, SEED, 0, None, State.FETCHED, None, warc=False)
    assert seen.ledger.counts()["fetched"] == 0
    with pytest.raises(OSError, match="No space"):
        await gc.commit(None, (seed.seq, State.FETCHED, 200, None))
    with pytest.raises(OSError, match="No space"):
        await gc.close()
    await pagelog.close()
    with UrlSeen(seen.state_dir, readonly=True) as committed:  # what a restart finds
        assert committed.ledger.counts()["fetched"] == 0
        assert CrawlState(committed.records).committed() == Committed()  # no offsets either


async def test_reopening_cuts_the_outputs_back_to_the_committed_sizes(
        seen: UrlSeen, tmp_path: Path) -> None:
    adm, frontier = admission(seen)
    pagelog, _ = output_files(Path(seen.state_dir), CrawlState(seen.records), OutputSettings())
    await pagelog.open()
    gc = GroupCommit(pagelog, None, seen, adm.state, frontier, adm)
    gc.start()
    seed = await frontier.get()
    assert seed is not None
    await gc.commit_page(seed, None, SEED, 0, None, State.FETCHED, None, warc=False)
    await gc.close()
    await pagelog.close()
    path = Path(seen.state_dir, "pages.jsonl")
    good = path.read_bytes()
    with path.open("ab") as f:  # a record written but never committed (kill -9)
        f.write(b'{"url": "http://a.test/lost"}\n')
    again, _ = output_files(Path(seen.state_dir), CrawlState(seen.records), OutputSettings())
    await again.open()
    await again.close()
    assert path.read_bytes() == good


def test_iso_time_is_datetimes_text_to_the_byte():
    """fetched_at (and a WARC date) formats the second once and rounds the
    microseconds itself: the text must stay datetime's, at the rounding edges too."""
    import random
    from datetime import UTC, datetime

    from crawler.core.outputs.output import iso_time

    def reference(ts: float) -> str:
        return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
            "+00:00", "Z")

    rng = random.Random(3)
    edges = (0.0, 0.0005, 0.9995, 0.9999995, 0.99999949, 0.5e-6, 1.5e-6, 2.5e-6, 0.4999995)
    stamps = [0.0, 1.0, 0.9999995, time.time(), 253_402_300_798.9999995]
    stamps += [rng.randrange(4_000_000_000) + rng.choice(edges) for _ in range(20_000)]
    stamps += [rng.uniform(0, 4e9) for _ in range(20_000)]
    for ts in stamps:
        assert iso_time(ts) == reference(ts), ts
    with pytest.raises((ValueError, OverflowError)):
        iso_time(1e20)  # out of datetime's range: its error, as before
