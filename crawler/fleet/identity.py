"""A fleet's identity: crawl id, size, each worker's id, and the fleet directory.

The identity a worker stores in its ledger (``CrawlState.fleet``: crawl id, W,
I, the Redis URL without its password) and the fields every worker of a fleet
must agree on (``fleet_geometry``: filter geometry, canonicalization rules,
scope), which Redis checks when a worker joins.

Fleet directory layout (``fleet`` and ``resize`` write it; ``resume DIR`` reads it)::

    DIR/fleet.json     {"crawl_id", "workers", "redis": "local" | URL without password,
                        "redis_auth": bool}
    DIR/worker-I/      worker I's state directory
    DIR/redis/         the local redis-server's append-only files (when "local")
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crawler.config.scope import Scope
from crawler.config.settings import Settings
from crawler.core.state.crawlstate import CrawlState
from crawler.wire.redis_url import has_password, redact
from dedup import CanonRules, atomic_write_bytes, is_state_dir

if TYPE_CHECKING:  # the Redis client is imported only by commands that use it
    from crawler.wire.transport import RedisTransport



FLEET_FILE = "fleet.json"
LOCAL = "local"
REDIS_ENV = "BLOOMCRAWL_REDIS_URL"  # how the supervisor hands a URL (maybe with a password)


class FleetError(RuntimeError):
    """A fleet cannot be started, resumed or resized; the message is one line."""


# -- identity ----------------------------------------------------------------------------


def worker_dir(root: str | Path, i: int) -> Path:
    return Path(root) / f"worker-{i}"


def derive_crawl_id(seeds_file: str | Path, workers: int) -> str:
    """The fleet id of ``crawl --redis`` without ``--crawl-id``: the same on every worker
    started with the same seeds file (content, not name) and worker count."""
    try:
        data = Path(seeds_file).read_bytes()
    except OSError:
        data = b""  # read_seeds reports the problem
    digest = hashlib.sha256(data + b"\0workers=%d" % workers).hexdigest()
    return f"seeds-{digest[:20]}"


def fleet_geometry(geometry: dict[str, Any], rules: CanonRules, scope: Scope) -> dict[str, Any]:
    """What every worker of a fleet must share, flat so a mismatch names its field.

    The filter geometry (so the fleet's seen-set is the OR of the filters), the
    canonicalization rules (so a URL has one key everywhere) and the scope (so
    the sender's "in scope" is the owner's).
    """
    scope_json = json.dumps(scope.to_dict(), sort_keys=True).encode()
    return {**geometry, "canon_sort_query": rules.sort_query,
            "canon_strip_params": list(rules.strip_params),
            "canon_max_length": rules.max_length,
            "scope": hashlib.sha256(scope_json).hexdigest()[:16]}


def settings_geometry(settings: Settings) -> dict[str, Any]:
    """The filter geometry a new state dir will record (``UrlSeen`` does the same)."""
    from dedup import HASH_ALGO

    d = settings.dedup
    return {"capacity": d.capacity, "error_rate": d.error_rate, "shards": d.shards,
            "seed": d.seed, "growth": d.growth, "hash": HASH_ALGO}


def worker_meta(crawl_id: str, workers: int, worker_id: int, redis_url: str) -> dict[str, Any]:
    """A worker's identity as stored in its ledger: the URL is kept only without a password."""
    return {"crawl_id": crawl_id, "workers": workers, "worker_id": worker_id,
            "redis": redact(redis_url), "redis_auth": has_password(redis_url)}


def stored_redis(meta: dict[str, Any], where: str) -> str:
    """The Redis URL a stopped worker (or fleet) can resume with, or a FleetError saying
    that it must be given again (it had a password, which is never stored)."""
    if meta.get("redis_auth"):
        raise FleetError(f"{where}: its Redis URL ({meta.get('redis')}) had a password, "
                         f"which is not stored; give it with --redis URL (or ${REDIS_ENV})")
    url = meta.get("redis")
    if not url or url == LOCAL:
        raise FleetError(f"{where}: no Redis URL recorded; give one with --redis URL")
    return str(url)


def transport_for(url: str, meta: dict[str, Any], settings: Settings,
                  geometry: dict[str, Any]) -> RedisTransport:
    from crawler.wire.transport import RedisTransport

    d = settings.distributed
    return RedisTransport(url, crawl_id=meta["crawl_id"], workers=int(meta["workers"]),
                          worker_id=int(meta["worker_id"]), geometry=geometry,
                          batch=d.forward_batch, read_count=d.receive_count,
                          claim_idle_ms=max(1, round(d.claim_idle * 1000)),
                          retry_for=d.retry_for)


# -- fleet directories ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FleetDir:
    root: Path
    crawl_id: str
    workers: int
    redis: str  # LOCAL or a URL without password
    redis_auth: bool

    def worker(self, i: int) -> Path:
        return worker_dir(self.root, i)


def write_fleet_file(root: Path, crawl_id: str, workers: int, redis: str) -> None:
    """``fleet.json``, atomically (temp file, fsync, rename)."""
    data = {"crawl_id": crawl_id, "workers": workers,
            "redis": redis if redis == LOCAL else redact(redis),
            "redis_auth": redis != LOCAL and has_password(redis)}
    text = json.dumps(data, sort_keys=True) + "\n"
    atomic_write_bytes(root / FLEET_FILE, text.encode())


def read_fleet_dir(root: str | Path) -> FleetDir:
    """A fleet directory: ``fleet.json`` if present, else its ``worker-I`` state dirs,
    whose recorded identities must agree (one crawl id, ids 0..W-1, W each)."""
    root = Path(root)
    if not root.is_dir():
        raise FleetError(f"fleet directory {root}: not found")
    dirs = sorted((p for p in root.glob("worker-*") if is_state_dir(p)),
                  key=lambda p: _worker_index(p))
    if not dirs:
        raise FleetError(f"{root} is not a fleet directory (no worker-I state directories)")
    metas = []
    for i, d in enumerate(dirs):
        if _worker_index(d) != i:
            raise FleetError(f"{root}: worker-{i} is missing (found {d.name})")
        with CrawlState.stopped(d) as state:
            meta = state.fleet()
        if meta is None:
            raise FleetError(f"{d} is not a fleet worker's state (it was crawled without "
                             "--redis)")
        metas.append(meta)
    w = len(dirs)
    for i, meta in enumerate(metas):
        if (meta["worker_id"], meta["workers"], meta["crawl_id"]) != (i, w, metas[0]["crawl_id"]):
            raise FleetError(f"{dirs[i]}: records worker {meta['worker_id']} of "
                             f"{meta['workers']} in crawl {meta['crawl_id']}, but it is "
                             f"{dirs[i].name} of {w} in crawl {metas[0]['crawl_id']}")
    redis, auth = str(metas[0]["redis"]), bool(metas[0].get("redis_auth"))
    fleet_file = root / FLEET_FILE
    if fleet_file.is_file():
        data = json.loads(fleet_file.read_text(encoding="utf-8"))
        if (data["crawl_id"], data["workers"]) != (metas[0]["crawl_id"], w):
            raise FleetError(f"{fleet_file}: says crawl {data['crawl_id']} with "
                             f"{data['workers']} workers, but the directory holds {w} "
                             f"workers of crawl {metas[0]['crawl_id']}")
        redis, auth = str(data["redis"]), bool(data.get("redis_auth"))
    return FleetDir(root, str(metas[0]["crawl_id"]), w, redis, auth)


def is_fleet_dir(path: Path) -> bool:
    """A fleet directory (``fleet.json``, or worker-I state dirs and no ledger of its own)."""
    return (path / FLEET_FILE).is_file() or (
        not is_state_dir(path) and is_state_dir(path / "worker-0"))


def _worker_index(path: Path) -> int:
    try:
        return int(path.name.split("-", 1)[1])
    except ValueError:
        return -1


