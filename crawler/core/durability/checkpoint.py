"""Checkpoints: shard snapshots and the crawl's counters, periodically and at the end.

Why they are only an optimisation: opening the state replays the ledger past
each snapshot's high-water mark, so a checkpoint never decides what survives a
crash; it decides how much has to be replayed. The marks it writes are what the
ledger has synced to disk (one fdatasync of its WAL first), so a power cut
never leaves a snapshot covering rows the ledger lost. Each shard is written in its own
``asyncio.to_thread`` call, so the event loop never waits for the whole filter.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from crawler.config.settings import SnapshotSettings
from crawler.core.outputs.output import write_json_atomic
from crawler.core.schedule.politeness import Politeness
from crawler.core.state.state import COUNTER_KEYS, HOST_COUNTS_FILE, TOTALS_KEY
from dedup import UrlSeen

__all__ = ["Checkpoint"]


class Checkpoint:
    """Writes every shard, the dedup totals of all runs and the per-host counts.

    ``host_counts`` is the engine's live dict of URLs admitted per host (None
    when there is no per-host cap); it is written as it stands.
    """

    def __init__(self, seen: UrlSeen, settings: SnapshotSettings, politeness: Politeness,
                 host_counts: dict[str, int] | None) -> None:
        self.seen = seen
        self.settings = settings
        self.politeness = politeness
        self.host_counts = host_counts
        self._path = Path(seen.state_dir) / HOST_COUNTS_FILE
        self._lock = asyncio.Lock()
        self._totals_before: dict[str, int] = dict(seen.meta_get(TOTALS_KEY, {}) or {})
        self._counters_at_open = {k: seen.counters.get(k, 0) for k in COUNTER_KEYS}

    def totals(self) -> dict[str, int]:
        """The dedup counters over every run of this crawl (earlier runs + this one)."""
        c = self.seen.counters
        return {k: self._totals_before.get(k, 0) + c.get(k, 0) - self._counters_at_open[k]
                for k in COUNTER_KEYS}

    async def snapshot(self) -> None:
        """Sync the ledger, then write every shard (one per thread hop: they record
        what the sync made durable, ``UrlSeen.sync``) and the crawl's counters."""
        async with self._lock:
            await asyncio.to_thread(self.seen.sync)
            for i in range(self.seen.nshards):
                await asyncio.to_thread(self.seen.snapshot_shard, i)
            self.seen.meta_set(TOTALS_KEY, self.totals())
            if self.host_counts is not None:
                # URLs admitted per host: approximate after a crash (counts since this
                # write are lost, so a trap host may get that many more), never blocking
                await asyncio.to_thread(write_json_atomic, self._path, dict(self.host_counts))
            self.politeness.prune(asyncio.get_running_loop().time())

    async def run(self, closing: asyncio.Event) -> None:
        """Snapshot on the time and new-URL triggers until ``closing`` is set."""
        snap = self.settings
        last_t = time.monotonic()
        last_new = self.seen.counters.get("new", 0)
        while True:
            try:
                await asyncio.wait_for(closing.wait(), min(1.0, snap.interval))
                return
            except TimeoutError:
                pass
            new = self.seen.counters.get("new", 0)
            if time.monotonic() - last_t >= snap.interval or new - last_new >= \
                    snap.every_new_urls:
                await self.snapshot()
                last_t = time.monotonic()
                last_new = new
