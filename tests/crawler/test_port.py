"""The port between the crawler and dedup: the crawler holds the seen-test and its
records, never the ledger (``crawler-not-ledger`` in pyproject.toml checks the
imports; these check what an import cannot show: a name handed out by dedup's
public API)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import crawler
import dedup

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
