"""``UrlSeen.filter_new``'s compiled call a page (``OneLink.page``, ``dedup/native/_canon.c``,
driven by ``ConfirmCache.seen_page``) against the pure-Python path
(``BLOOMCRAWL_NO_KERNEL``'s: no compiled module): the same answers, counters and journal
on a stream built to reach every step of the call and every way back to Python between
its calls: a crowded filter (false positives, layers added), keys the confirm cache
dropped and the index holds (found), pending keys, flushes by size, a young generation
filled in the pass and by found keys, links the compiled canonicalizer leaves over (and
pages whose every link it leaves), rejected links, repeats within a page and two depths."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from dedup import UrlSeen
from dedup.native import compiled
from dedup.store.confirmed import ConfirmCache, _fingerprints_in
from dedup.store.ledger import Ledger

from . import linkgen
from .conftest import require_kernel


def stream(seed: int, n: int, k: int) -> list[tuple[str, list[str], int]]:
    """``(base, links, depth)`` pages whose links are new ones and earlier pages' links,
    recent and old (the confirm cache has dropped the old ones: the index finds them)."""
    rng = random.Random(seed)
    gen = linkgen.LinkGen(seed=seed, weird=0.05)
    seen: list[str] = []
    out: list[tuple[str, list[str], int]] = []
    for i, (base, links) in enumerate(gen.pages(n, k)):
        links = list(links)
        if seen:
            links += rng.sample(seen, min(len(seen), k // 2))  # old and recent links
            links += rng.sample(seen[-3 * k:], min(len(seen), k // 4))
        links += rng.sample(links, k // 5)  # repeats within the page
        links += ["mailto:x@y.test", "javascript:void(0)"]
        rng.shuffle(links)
        seen += [link for link in links if link.startswith("http")]
        if i % 10 == 9:  # a page URL too long for the compiled canonicalizer's buffers
            base = f"http://h.test/{'a' * 5000}/x"
        out.append((base, links, i % 2))
    return out


def run(d: Path, pages: list[tuple[str, list[str], int]], spy: dict[str, int]
        ) -> tuple[list[list[str]], dict[str, int], list[tuple[list[int], bytes, list[int]]],
                   dict[str, Any]]:
    with UrlSeen(d, confirm_cache_size=150, pending_keys=60, capacity=400,
                 error_rate=0.3, shards=2) as seen:
        answers = [seen.filter_new(links, base_url=base, depth=depth)
                   for base, links, depth in pages]
        counters = dict(seen.counters)
        stats = seen.stats()
        journal = [(seqs.tolist(), bytes(fps), kinds.tolist())
                   for seqs, fps, kinds in seen.ledger.batches_after(0)]
    return answers, counters, journal, {"layers": stats["layers"], **spy}


def test_page_call_matches_the_python_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    require_kernel()
    pages = stream(3, 120, 40)
    spy = {"pages": 0, "rest": 0, "left_over": 0}
    seen_page, learn = ConfirmCache.seen_page, ConfirmCache.learn

    def counting_seen_page(self: ConfirmCache, *args: Any) -> Any:
        got = seen_page(self, *args)
        spy["pages"] += got is not None
        return got

    def counting_learn(self: ConfirmCache, rest: bytes | None) -> None:
        spy["rest"] += bool(rest)
        learn(self, rest)

    resolve_many = compiled.canon.resolve_links  # type: ignore[union-attr]

    def counting_resolve(links: Any, *args: Any) -> Any:
        spy["left_over"] += 1
        return resolve_many(links, *args)

    monkeypatch.setattr(ConfirmCache, "seen_page", counting_seen_page)
    monkeypatch.setattr(ConfirmCache, "learn", counting_learn)
    monkeypatch.setattr(compiled.canon, "resolve_links", counting_resolve)
    fast = run(tmp_path / "compiled", pages, spy)
    for name in ("kernel", "lookup", "canon", "rowcrc"):
        monkeypatch.setattr(compiled, name, None)
    slow = run(tmp_path / "python", pages, {})
    answers, counters, journal, info = fast
    assert (answers, counters, journal) == slow[:3]
    # every step was taken: the compiled call (not for a page that is not http(s)),
    # links left over to Python, found keys (some learnt after a swap), false
    # positives, layers added, flushes by size (60 keys)
    assert info["pages"] > 0.8 * len(pages) and info["left_over"] and info["rest"]
    assert counters["bloom_maybe"] > counters["false_positives"] > 0
    assert counters["rejected"] and counters["confirm_cache_hits"] and info["layers"] > 1
    assert sum(len(seqs) for seqs, _, _ in journal) == counters["new"] > 10 * 60


def test_an_index_error_is_raised_with_the_cache_counted(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    """The index failing in the middle of the compiled call (after its pass moved keys
    into the young generation) raises, and the young generation's count stays true:
    the call answers the error with the count and pends nothing."""
    require_kernel()
    pages = stream(5, 40, 40)
    calls = {"n": 0}
    seen_page = ConfirmCache.seen_page

    def counting_seen_page(self: ConfirmCache, *args: Any) -> Any:
        got = seen_page(self, *args)
        calls["n"] += got is not None
        return got

    monkeypatch.setattr(ConfirmCache, "seen_page", counting_seen_page)
    with UrlSeen(tmp_path / "s", confirm_cache_size=150, pending_keys=60, capacity=400,
                 error_rate=0.3) as seen:
        for base, links, depth in pages[:20]:
            seen.filter_new(links, base_url=base, depth=depth)
        held_among, raised = seen.ledger.held_among, 0

        def broken(fps: bytes) -> list[int]:
            raise OSError("the index is gone")

        for base, links, depth in pages[20:]:
            pending = seen._pending_n
            monkeypatch.setattr(seen.ledger, "held_among", broken)
            try:
                seen.filter_new(links, base_url=base, depth=depth)
            except OSError:
                raised += 1
                assert seen._pending_n == pending  # nothing pended
            cache = seen._confirmed
            assert cache._held == len(_fingerprints_in(cache._young))  # type: ignore[arg-type]
            monkeypatch.setattr(seen.ledger, "held_among", held_among)
            seen.filter_new(links, base_url=base, depth=depth)
    assert raised > 10 and calls["n"] > 20


def run_mixed(d: Path, pages: list[tuple[str, list[str], int]]) -> tuple[Any, ...]:
    """Pages fed by turns to the page call and to ``add`` a link at a time, so that each
    meets the tables, pending keys and filter layers the other left."""
    with UrlSeen(d, confirm_cache_size=150, pending_keys=60, capacity=400,
                 error_rate=0.3, shards=2) as seen:
        answers: list[Any] = []
        for i, (base, links, depth) in enumerate(pages):
            if i % 3 == 1:
                answers.append([seen.add(link, base, depth=depth) for link in links])
            else:
                answers.append(seen.filter_new(links, base_url=base, depth=depth))
        counters = dict(seen.counters)
        journal = [(seqs.tolist(), bytes(fps), kinds.tolist())
                   for seqs, fps, kinds in seen.ledger.batches_after(0)]
        compiled_add = "add" in vars(seen)
    return answers, counters, journal, compiled_add


def test_page_calls_and_adds_by_turns_match_the_python_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    require_kernel()
    pages = stream(5, 90, 40)
    *fast, bound = run_mixed(tmp_path / "compiled", pages)
    for name in ("kernel", "lookup", "canon", "rowcrc"):
        monkeypatch.setattr(compiled, name, None)
    *slow, unbound = run_mixed(tmp_path / "python", pages)
    assert bound and not unbound  # the compiled add was the one called
    assert fast == slow
    counters = fast[1]
    assert counters["bloom_maybe"] > counters["false_positives"] > 0
    assert counters["new"] > 10 * 60


def run_adds(d: Path, pages: list[tuple[str, list[str], int]]) -> tuple[Any, ...]:
    """Every link a call of ``add``, with a small index buffer (the index's runs are read,
    its kept parts dropped and made again) and some links forgotten midway (tombstones:
    a "maybe seen" key the index holds only as forgotten is new again)."""
    with UrlSeen(d, confirm_cache_size=150, pending_keys=60, capacity=400,
                 error_rate=0.3, shards=2, index_buffer=1000) as seen:
        answers: list[Any] = []
        for i, (base, links, depth) in enumerate(pages):
            answers.append([seen.add(link, base, depth=depth) for link in links])
            if i % 15 == 14:
                answers.append(seen.forget([link for link in links[::3]
                                            if link.startswith("http")]))
        counters = dict(seen.counters)
        journal = [(seqs.tolist(), bytes(fps), kinds.tolist())
                   for seqs, fps, kinds in seen.ledger.batches_after(0)]
        runs = seen.ledger.index.stats()["runs"]
    return answers, counters, journal, runs


def test_add_asks_the_index_parts_itself_and_matches_the_python_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The compiled ``add`` asks the index's kept compiled parts for a "maybe seen" key
    itself (the ledger's ``held_among`` only while they are not kept), with the Python
    path's answers, counters and journal: keys found in the index's buffer and runs,
    false positives, forgotten keys admitted again."""
    require_kernel()
    pages = stream(7, 90, 40)
    asked = {"python": 0, "compiled": 0}
    held_among = Ledger.held_among
    python_steps = {UrlSeen.add.__code__, UrlSeen._admit_pending.__code__}

    def counting(self: Ledger, fps: bytes) -> list[int]:
        by = "python" if sys._getframe(1).f_code in python_steps else "compiled"
        asked[by] += 1
        return held_among(self, fps)

    monkeypatch.setattr(Ledger, "held_among", counting)
    fast = run_adds(tmp_path / "compiled", pages)
    queries = fast[1]["ledger_queries"]
    direct = queries - asked["python"] - asked["compiled"]
    assert direct > 300 and asked["compiled"] < direct / 10
    for name in ("kernel", "lookup", "canon", "rowcrc"):
        monkeypatch.setattr(compiled, name, None)
    slow = run_adds(tmp_path / "python", pages)
    assert fast[:3] == slow[:3]
    counters = fast[1]
    found = counters["bloom_maybe"] - counters["false_positives"]
    assert found > 100 and counters["false_positives"] > 20 and fast[3] >= 1
