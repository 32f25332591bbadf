"""A crawl cut by a power failure, resumed in another order, killed -9, resumed: exact.

The crawl runs under ``tests/support/powercut`` (an fsync-recording shim); at a
random moment it is killed and every file of its directory goes back to what its
last fsync made durable: the ledger's commits since its last WAL sync are lost,
pages.jsonl keeps lines the ledger no longer counts. Resume then cuts pages.jsonl
back and fetches those pages again, one at a time (``--concurrency 1``: URLs are
admitted in another order than before the cut, under seqs the lost rows had), and
is killed -9 at a random moment, before its own next snapshot may have covered
what it admitted. The seen-test must still answer "seen" for every recorded URL
(no mark of a shard file past what the ledger kept), and the last resume must end
with every reachable page in pages.jsonl exactly once.
"""

from __future__ import annotations

import random
from collections import Counter

from crawler.core.outputs.output import read_pages
from crawler.demo.site import SiteSpec
from dedup import UrlSeen
from dedup.filter.bloom import read_snapshot
from dedup.store.statedir import shards_dir
from dedup.url.fingerprint import halves
from tests.crawler.core.state.test_resume import run_until, setup_crawl
from tests.support.helpers import run_cli, start_cli
from tests.support.powercut import PowerCut

SPEC = SiteSpec(hosts=4, pages=60, seed=40, delay=0.01)
TRIALS = 3


def every_recorded_url_is_seen(state) -> int:
    """The Bloom filter as an open loads it answers "maybe seen" for every fingerprint
    the ledger holds (else the seen-test would call a recorded URL new); returns how
    many."""
    with UrlSeen(state, readonly=True) as seen:
        fps = b"".join(fps for _, fps, _ in seen.ledger.batches_after(0))
        assert seen.bloom.contains_hashes(halves(fps)).all()
    return len(fps) // 16


def marks_within_the_ledger(state) -> None:
    with UrlSeen(state, readonly=True) as seen:
        last = seen.ledger.last_seq()
    marks = [read_snapshot(p)[1].hwm for p in shards_dir(state).glob("shard-*.bloom")]
    assert not marks or max(marks) <= last, (marks, last)


async def test_power_cuts_at_random_moments_then_kill9_in_another_order_lose_nothing(
        tmp_path, site):
    rng = random.Random(36)
    for trial in range(TRIALS):
        async with site(SPEC) as running:
            run = tmp_path / f"run-{trial}"
            run.mkdir()
            seeds, config, state = setup_crawl(run, running)
            total = len(running.site.reachable().fetched)
            cut = PowerCut(run, tmp_path / f"shadow-{trial}")  # the state dir is built beside
            proc = await start_cli("crawl", str(seeds), "--state", str(state), "--config",
                                   str(config), "--quiet", env=cut.env())
            await run_until(proc, running, rng.randrange(40, total - 60))
            assert proc.returncode is None
            proc.kill()  # the power goes out
            await proc.wait()
            dropped = cut.cut()
            assert dropped["bytes_dropped"] > 0, dropped
            marks_within_the_ledger(state)

            served = sum(running.total_pages().values())
            proc = await start_cli("resume", str(state), "--quiet", "--concurrency", "1",
                                   "--per-host", "1")
            await run_until(proc, running, served + rng.randrange(5, 40))
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            assert every_recorded_url_is_seen(state) > 0

            done = await run_cli("resume", str(state), "--quiet", "--max-pages", "0")
            assert done.rc in (0, 3), done.stderr
            want = running.site.reachable()
            with UrlSeen(state, readonly=True) as seen:
                keys = Counter(seen.canonicalizer.resolve(r["url"])[1]
                               for r in read_pages(state / "pages.jsonl"))
                assert seen.ledger.counts()["queued"] == 0
            assert max(keys.values()) == 1, keys.most_common(3)  # no line twice
            assert set(keys) == want.fetched | want.robots_blocked  # none lost
            assert set(running.total_pages()) == set(want.fetched)
            every_recorded_url_is_seen(state)
