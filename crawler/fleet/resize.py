"""``bloomcrawl resize``: a stopped fleet of W workers into one of W/2 or 2W.

state dirs (``dedup.admin.resizing``), pages.jsonl and items.jsonl files, per-host counts,
identities,
  and the un-acknowledged links in Redis (``crawler.fleet.reshard``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.core.outputs.output import (
    ITEMS_FILE,
    PAGES_FILE,
    read_json,
    read_pages,
    write_json_atomic,
)
from crawler.core.schedule.figures import Figures, merged, sitemap_states, split
from crawler.core.schedule.sitemaps import SITEMAPS_FILE
from crawler.core.state.crawlstate import CrawlState
from crawler.core.state.pagecounts import recount, rows_of_records
from crawler.core.state.state import (
    HOST_COUNTS_FILE,
    committed_items,
    committed_pages,
    set_committed_pages,
)
from crawler.wire.owner import owner_function, owner_of
from crawler.wire.protocol import RemoteLink
from dedup import atomic_write_bytes, host_of, in_use

if TYPE_CHECKING:  # the Redis client is imported only by commands that use it
    pass

from crawler.fleet.identity import (
    LOCAL,
    FleetDir,
    FleetError,
    stored_redis,
    worker_dir,
    write_fleet_file,
)
from crawler.fleet.localredis import LocalRedis
from crawler.wire.redis_url import has_password, redact

# -- resize ------------------------------------------------------------------------------------

RESIZED_FILE = "RESIZED.json"  # in a fleet dir on a shared Redis: the fleet it became


def refuse_if_resized(root: Path) -> None:
    """A fleet on a shared Redis that was resized has handed its un-acknowledged links
    (re-routed in that Redis) to the new fleet: resuming or resizing it again would run
    two fleets on one set of streams, so both are refused, naming the new fleet."""
    moved = read_json(root / RESIZED_FILE, None)
    if moved is not None:
        raise FleetError(f"{root} was resized into {moved['into']} (their shared Redis now "
                         f"routes its links there); continue with 'bloomcrawl resume "
                         f"{moved['into']}'")



def resize_fleet(src: FleetDir, to: int, out: Path, *, redis_url: str | None,
                 progress: Callable[[str], None] = lambda _m: None) -> list[Path]:
    """Resize a stopped fleet's directory into ``out`` (W -> W/2 or W -> 2W).

    Order, so that a failure is safe to repeat: everything cheap is checked;
    then Redis is resharded (idempotent: it only re-routes entries by owner); then
    ``dedup.admin.resizing.resize`` builds ``out`` atomically; then the pages.jsonl
    and items.jsonl files, per-host counts and identities of the new workers are written, and
    ``fleet.json`` last. A local Redis is resharded in a copy of its data
    (``out/redis``), so the source fleet stays whole and resumable.
    """
    from crawler.fleet.reshard import reshard
    from dedup.admin import check_compatible, resize

    refuse_if_resized(src.root)
    w = src.workers
    if not (to * 2 == w or to == w * 2):
        raise FleetError(f"can only halve (W -> W/2, W even) or double (W -> 2W) a fleet, "
                         f"not go from {w} to {to} workers; resize in several steps")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FleetError(f"{out}: already exists and is not empty")
    dirs = [src.worker(i) for i in range(w)]
    check_compatible(dirs)
    for d in dirs:  # before Redis is touched: resharding under a running fleet breaks it
        _refuse_if_running(d)
    if to == w * 2:  # items are split by their pages' hosts: they must be in step
        for d in dirs:
            if committed_items(d):
                _items_of_pages(d, [json.loads(ln) for ln in committed_pages(d)])
    local_copy: Path | None = None
    if src.redis == LOCAL:
        if redis_url is not None:
            raise FleetError(f"{src.root} runs its own local Redis (in {src.root / 'redis'}); "
                             "resize it without --redis")
        local_copy = out.parent / f".{out.name}.redis-{os.getpid()}"
        shutil.rmtree(local_copy, ignore_errors=True)
        if (src.root / "redis").is_dir():
            shutil.copytree(src.root / "redis", local_copy,
                            ignore=shutil.ignore_patterns("redis.log"))
        server = LocalRedis(local_copy).start()
        try:
            moved = asyncio.run(reshard(server.url, src.crawl_id, to))
        except BaseException:
            shutil.rmtree(local_copy, ignore_errors=True)
            raise
        finally:
            server.stop()
        progress(f"re-routed {moved} un-acknowledged link(s) in the local Redis copy")
    else:
        url = redis_url or stored_redis({"redis": src.redis, "redis_auth": src.redis_auth},
                                        str(src.root))
        moved = asyncio.run(reshard(url, src.crawl_id, to))
        progress(f"re-routed {moved} un-acknowledged link(s) in Redis at {redact(url)} "
                 f"for {to} workers")
    try:
        results = resize(dirs, to, out, owner_function)
    except BaseException:
        if local_copy is not None:
            shutil.rmtree(local_copy, ignore_errors=True)
        raise
    _carry_outputs(dirs, out, w, to)
    _carry_outboxes(dirs, out, to)
    for i in range(to):
        set_committed_pages(worker_dir(out, i), new_warc=True)
    figures = _moved_figures(dirs, out, w, to)
    for i in range(to):
        with CrawlState.stopped(worker_dir(out, i), readonly=False) as state:
            meta = dict(state.fleet() or {})
            meta.update(workers=to, worker_id=i)
            if redis_url is not None and src.redis != LOCAL:
                meta.update(redis=redact(redis_url), redis_auth=has_password(redis_url))
            state.set_fleet(meta)
            # the pages' counts follow the pages.jsonl records that moved with their hosts
            pages = worker_dir(out, i) / PAGES_FILE
            recount(state, rows_of_records(read_pages(pages) if pages.exists() else []))
            figures[i].write(state)
    if local_copy is not None:
        os.replace(local_copy, out / "redis")
        redis_field = LOCAL
    else:
        redis_field = redis_url or src.redis
    write_fleet_file(out, src.crawl_id, to, redis_field)
    if local_copy is None:  # the shared Redis was re-routed: the source is now retired
        write_json_atomic(src.root / RESIZED_FILE, {"into": str(out.resolve())})
    return [r.path for r in results]


def _carry_outboxes(dirs: list[Path], out: Path, to: int) -> None:
    """The links the old workers forwarded, in the outbox of a new worker that does not
    own their host: the re-routed stream entries are in no new worker's own record,
    and a Redis that lost its data later must still get them back. The new outboxes
    keep the old ones' epoch (resharding keeps the fleet's); if those disagree, they
    get none, and each is re-sent once when its worker first joins."""
    from crawler.wire.outbox import OUTBOX_FILE, Outbox

    if to < 2:
        return  # one worker owns every host: nothing is forwarded any more
    by_sender: dict[int, list[RemoteLink]] = {}
    epochs: set[str | None] = set()
    for d in dirs:
        if not (d / OUTBOX_FILE).is_file():
            continue
        old = Outbox(d)
        epochs.add(old.epoch())
        try:
            for batch in old.batches():
                for link in batch:
                    sender = (owner_of(link[2], to) + 1) % to
                    by_sender.setdefault(sender, []).append(link)
        finally:
            old.close()
    epoch = epochs.pop() if len(epochs) == 1 else None
    for i, links in sorted(by_sender.items()):
        box = Outbox(worker_dir(out, i))
        try:
            for k in range(0, len(links), 500):
                box.append(links[k:k + 500])
            os.fsync(box.fileno())
            if epoch is not None:
                box.set_epoch(epoch)
        finally:
            box.close()


def _refuse_if_running(state_dir: Path) -> None:
    """A worker holds its state dir's lock (``dedup.store.seen``) while it runs."""
    if in_use(state_dir):
        raise FleetError(f"{state_dir} is in use by a running worker; stop the fleet "
                         "before resizing it")


def _figures(state_dir: Path) -> Figures:
    with CrawlState.stopped(state_dir) as state:
        return Figures.of(state)


def _moved_figures(dirs: list[Path], out: Path, w: int, to: int) -> list[Figures]:
    """Each new worker's figures (``crawler.core.schedule.figures``): a merged one's
    add up its two inputs', a split one's go with its hosts."""
    if to * 2 == w:
        return [merged([_figures(dirs[i]), _figures(dirs[i + to])]) for i in range(to)]
    out_figures = [Figures() for _ in range(to)]
    for i, d in enumerate(dirs):
        second = worker_dir(out, i + w)
        maps = read_json(second / SITEMAPS_FILE, {})
        out_figures[i], out_figures[i + w] = split(
            _figures(d), lambda host, i=i: owner_of(host, to) == i + w,
            sitemap_states(second, maps) if maps else {})
    return out_figures


def _carry_sitemaps(dirs: list[Path], out: Path, to: int) -> None:
    """A queued sitemap is known as one by its new owner (``crawler.core.schedule.sitemaps``)."""
    parts: dict[int, dict[str, int]] = {}
    for d in dirs:
        for url, level in read_json(d / SITEMAPS_FILE, {}).items():
            parts.setdefault(owner_of(host_of(url), to), {})[url] = level
    for k, levels in parts.items():
        write_json_atomic(worker_dir(out, k) / SITEMAPS_FILE, levels)


def _items_of_pages(d: Path, records: list[dict[str, Any]]) -> list[list[bytes]]:
    """Worker ``d``'s committed items.jsonl lines, cut into each committed page's: a
    page's items are the next ``items`` lines (its record's count; none without
    one), as the group commit writes both files in one order."""
    items = committed_items(d)
    out: list[list[bytes]] = []
    at = 0
    for r in records:
        n = r.get("items") or 0
        out.append(items[at:at + n])
        at += n
    if at != len(items):
        raise FleetError(f"{d / ITEMS_FILE}: its {len(items)} committed line(s) do not match "
                         f"the {at} item(s) {d / PAGES_FILE}'s records count")
    return out


def _write_items(d: Path, items: list[bytes]) -> None:
    if items:
        atomic_write_bytes(d / ITEMS_FILE, b"".join(items))


def _carry_outputs(dirs: list[Path], out: Path, w: int, to: int) -> None:
    """pages.jsonl, items.jsonl, host_counts.json and sitemaps.json follow their hosts
    to the new owners (a page's items with its record)."""
    _carry_sitemaps(dirs, out, to)
    if to * 2 == w:
        for i in range(to):
            pages = b"".join(ln for j in (i, i + to) for ln in committed_pages(dirs[j]))
            atomic_write_bytes(worker_dir(out, i) / PAGES_FILE, pages)
            _write_items(worker_dir(out, i),
                         [ln for j in (i, i + to) for ln in committed_items(dirs[j])])
            counts: dict[str, int] = {}
            for j in (i, i + to):
                for host, n in read_json(dirs[j] / HOST_COUNTS_FILE, {}).items():
                    counts[host] = counts.get(host, 0) + n
            write_json_atomic(worker_dir(out, i) / HOST_COUNTS_FILE, counts)
        return
    for i, d in enumerate(dirs):
        parts: dict[int, list[bytes]] = {i: [], i + w: []}
        item_parts: dict[int, list[bytes]] = {i: [], i + w: []}
        lines = committed_pages(d)
        records = [json.loads(ln) for ln in lines]
        for ln, r, page_items in zip(lines, records, _items_of_pages(d, records), strict=True):
            url = r["url"]
            owner = owner_of(host_of(url), to)
            part = parts.get(owner)
            if part is None:
                raise FleetError(f"{d / PAGES_FILE}: {url} was fetched by worker {i}, which "
                                 f"does not own its host among {w} workers")
            part.append(ln)
            item_parts[owner] += page_items
        split_counts: dict[int, dict[str, int]] = {i: {}, i + w: {}}
        for host, n in read_json(d / HOST_COUNTS_FILE, {}).items():
            split_counts[owner_of(host, to)][host] = n
        for k in (i, i + w):
            atomic_write_bytes(worker_dir(out, k) / PAGES_FILE, b"".join(parts[k]))
            _write_items(worker_dir(out, k), item_parts[k])
            write_json_atomic(worker_dir(out, k) / HOST_COUNTS_FILE, split_counts[k])
