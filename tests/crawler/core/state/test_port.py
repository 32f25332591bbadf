"""The port between the crawler and dedup: the crawler uses the seen-test through
``CrawlPort`` and holds its records, never the ledger (``crawler-not-ledger`` in
pyproject.toml checks the imports; these check what an import cannot show: a name
handed out by dedup's public API, a member used at run time)."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import crawler
import dedup
from crawler.core.outputs.output import read_pages
from crawler.core.run.engine import Engine
from crawler.core.state.state import create_crawl
from crawler.demo.site import SiteSpec
from dedup import CrawlPort, SeenPort, UrlSeen
from tests.support.helpers import fast_settings, write_seeds

# The ledger and what it is made of; dedup.journal.format's row types (State,
# QueuedRow, PortableRow) are records the port hands out, not the ledger.
_LEDGER_MODULES = ("dedup.store.ledger", "dedup.journal", "dedup.index")


def _of_the_ledger(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or ""
    if not isinstance(obj, type) and not callable(obj):
        return False
    return module.startswith(_LEDGER_MODULES) and not module.startswith(
        "dedup.journal.format")


def _crawler_modules() -> list[ModuleType]:
    return [importlib.import_module(m.name)  # not __main__: running it is a command
            for m in pkgutil.walk_packages(crawler.__path__, "crawler.")
            if not m.name.endswith("__main__")]


def test_dedups_public_api_hands_out_no_part_of_the_ledger() -> None:
    assert [name for name in dedup.__all__ if _of_the_ledger(getattr(dedup, name))] == []


def test_no_crawler_module_holds_a_part_of_the_ledger() -> None:
    modules = _crawler_modules()
    assert len(modules) > 80
    held = [f"{m.__name__}.{name}" for m in modules for name, obj in vars(m).items()
            if _of_the_ledger(obj)]
    assert held == []


def _port_members(port: type) -> set[str]:
    """The names a Protocol (and the Protocols it extends) declares."""
    names: set[str] = set()
    for cls in port.__mro__:
        if getattr(cls, "_is_protocol", False) and cls is not Protocol:
            names |= {n for n in vars(cls) if not n.startswith("_")}
            names |= set(getattr(cls, "__annotations__", {}))
    return names


class _PortOnly:
    """A ``UrlSeen`` seen through a port: any other member is an AttributeError, and
    the members used are noted."""

    def __init__(self, target: object, port: type) -> None:
        self._target = target
        self._names = _port_members(port)
        self.used: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        if name not in self._names:
            raise AttributeError(f"{name!r} is not part of the port")
        self.used.add(name)
        return getattr(self._target, name)


def test_the_ports_are_the_seen_test_verbs_and_what_a_crawl_needs() -> None:
    verbs = {"add", "filter_new", "filter_new_pages", "admit_pages", "forget", "forget_keys",
             "commit", "close"}
    assert _port_members(SeenPort) == verbs
    assert _port_members(CrawlPort) == verbs | {
        "state_dir", "canonicalizer", "records", "counters", "filter_info", "snapshot_steps"}
    seen_members = {n for n in dir(UrlSeen) if not n.startswith("_")}
    assert _port_members(CrawlPort) - {"state_dir", "canonicalizer", "records"} <= seen_members


async def test_a_crawl_runs_on_the_crawl_port_alone(tmp_path: Path, site: Any) -> None:
    """The engine, the group commit, the admission and the checkpoints use nothing of
    ``UrlSeen`` but ``CrawlPort`` (on main the engine read ``seen.bloom``, ``nshards``,
    ``geometry`` and the ledger's values through ``meta_get``)."""
    spec = SiteSpec(hosts=2, pages=40, seed=5, trap=True)
    settings = fast_settings(crawl={"max_depth": 6, "max_pages_per_host": 30},
                             snapshot={"interval": 0.05, "every_new_urls": 5})
    async with site(spec) as running:
        seeds = write_seeds(tmp_path / "seeds.txt", running.seeds)
        seen, scope, _ = create_crawl(tmp_path / "s", settings, seeds)
        try:
            port = _PortOnly(seen, CrawlPort)
            summary = await Engine(port, settings, scope).run()  # type: ignore[arg-type]
        finally:
            seen.close()
    records = read_pages(tmp_path / "s" / "pages.jsonl")
    assert summary["outcome"] == "finished" and summary["fetched"] > 30
    assert len(records) == summary["fetched"] + summary["failed"] + summary["skipped"]
    assert port.used >= {"admit_pages", "commit", "records", "canonicalizer", "state_dir",
                         "counters", "filter_info", "snapshot_steps"}
