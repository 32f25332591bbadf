"""What a state directory was created with: filter geometry, canonicalization rules, crawl id.

They are frozen into the ledger the first time a directory is opened for
writing; reopening uses the stored values, and an explicit different value is
refused rather than silently producing a filter that cannot be merged or keys
that no longer match the ledger.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

from dedup.base.errors import GeometryMismatch
from dedup.filter.geometry import Geometry, require_same
from dedup.store.ledger import Ledger
from dedup.url.canonical import CanonRules


def settle(ledger: Ledger, where: str, asked: dict[str, Any], rules: CanonRules | None,
           crawl_id: str | None, *, write: bool) -> tuple[Geometry, CanonRules, str]:
    """``(geometry, rules, crawl_id)`` of the directory whose ledger this is: the
    stored ones, checked against what the caller asked for (None: no preference),
    or, for a new directory, the asked ones (stored when ``write``). ``where``
    prefixes the error messages."""
    return (_geometry(ledger, where, asked, write), _rules(ledger, where, rules, write),
            _crawl_id(ledger, where, crawl_id, write))


def _geometry(ledger: Ledger, where: str, asked: dict[str, Any], write: bool) -> Geometry:
    asked = {k: v for k, v in asked.items() if v is not None}
    stored = ledger.meta_get("geometry")
    if stored is None:
        geometry = Geometry(**asked)
        if write:
            ledger.meta_set("geometry", geometry.to_dict())
        return geometry
    require_same(asked, {k: stored.get(k) for k in asked}, f"{where}asked for != created with: ")
    return Geometry.from_dict(stored)


def _rules(ledger: Ledger, where: str, rules: CanonRules | None, write: bool) -> CanonRules:
    stored = ledger.meta_get("canon_rules")
    if stored is None:
        rules = rules or CanonRules()
        if write:
            d = asdict(rules)
            d["strip_params"] = list(d["strip_params"])
            ledger.meta_set("canon_rules", d)
        return rules
    stored_rules = CanonRules(sort_query=stored["sort_query"],
                              strip_params=tuple(stored["strip_params"]),
                              max_length=stored["max_length"])
    if rules is not None and rules != stored_rules:
        raise GeometryMismatch(f"{where}canonicalization rules differ from the ones this "
                               "crawl was created with (keys would not match)")
    return stored_rules


def _crawl_id(ledger: Ledger, where: str, crawl_id: str | None, write: bool) -> str:
    stored = ledger.meta_get("crawl_id")
    if stored is None:
        stored = crawl_id or uuid.uuid4().hex
        if write:
            ledger.meta_set("crawl_id", stored)
    elif crawl_id is not None and crawl_id != stored:
        raise GeometryMismatch(f"{where}crawl_id differs: the directory belongs to crawl "
                               f"{stored}, not {crawl_id}")
    return stored
