"""The seen-test core (dedup/store/seencore.py): the compiled ``SeenCore`` and
``PySeenCore`` driven call by call with the same calls, on the same callables, and
compared after each one (answers, counters, pending and cached counts, the batches
written); then two ``UrlSeen``, one on each core, compared the same way down to their
journals; then the cache's own rules (full keys, LRU buckets, growth to a budget)."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dedup.store.seen as seen_mod
from dedup.native import compiled
from dedup.store.seen import UrlSeen
from dedup.store.seencore import HOLD, KEEP, PEND, WAYS, PySeenCore
from dedup.url.canonical import Canonicalizer
from dedup.url.fingerprint import fingerprint

SEED = 11
needs_compiled = pytest.mark.skipif(
    compiled.canon is None or not hasattr(compiled.canon, "SeenCore"),
    reason="the compiled core is not built (or BLOOMCRAWL_NO_KERNEL)")


class Store:
    """What a core is given: a "ledger" (a set of written fingerprints), a "filter"
    that holds every written key and says "maybe" for some others (false positives),
    and the list of what ``write`` was handed."""

    def __init__(self) -> None:
        self.held: set[bytes] = set()
        self.written: list[tuple[int, bytes]] = []
        self.canon = Canonicalizer(seed=SEED)
        self.fail_write = False

    def probe(self, fps: bytes) -> list[int]:
        out = []
        for j in range(len(fps) // 16):
            fp = fps[16 * j:16 * j + 16]
            if fp in self.held or fp[0] % 5 == 0:  # one key in five a false positive
                out.append(j)
        return out

    def lookup(self, fps: bytes) -> list[int]:
        return [j for j in range(len(fps) // 16) if fps[16 * j:16 * j + 16] in self.held]

    def write(self, batches: list[tuple[int, bytes]]) -> None:
        if self.fail_write:
            raise OSError("disk full")
        for depth, fps in batches:
            self.written.append((depth, fps))
            self.held.update(fps[i:i + 16] for i in range(0, len(fps), 16))

    def core(self, cls: Any, cache_bytes: int, pending_keys: int = 7) -> Any:
        return cls(SEED, cache_bytes=cache_bytes, pending_keys=pending_keys,
                   pending_seconds=3600.0, fast_page=self.canon.fast_page,
                   resolve=self.canon.resolve_many, probe=self.probe, lookup=self.lookup,
                   write=self.write)


LINKS = [f"/p/{i}" for i in range(60)] + [
    "http://b.test/x", "HTTP://B.TEST/x#f", "mailto:a@b", "/caf\u00e9", "javascript:void(0)",
    "//c.test/y?b=2&a=1", "../up", "http://[::1]/v6", "/p/1?utm_source=z", "", "?q=1"]
BASES = ["http://a.test/", "http://a.test/dir/page", "https://d.test/", None, "not a url"]


def _call(core: Any, rng: random.Random) -> Any:
    what = rng.choice(["add", "page", "page", "pairs", "learn", "flush", "tick", "take",
                       "forget"])
    depth = rng.choice([0, 0, 1, 3])
    if what == "add":
        return core.add(rng.choice(LINKS), rng.choice(BASES), depth=depth)
    if what == "page":
        return core.page(tuple(rng.choices(LINKS, k=rng.randint(0, 30))), rng.choice(BASES),
                         depth)
    if what == "pairs":
        pairs = [None if rng.random() < 0.1 else (f"u{k}", f"k{k}")
                 for k in (rng.randint(0, 80) for _ in range(rng.randint(0, 12)))]
        return core.pairs(pairs, depth, rng.choice([KEEP, PEND, HOLD]))
    if what == "learn":
        return core.learn(b"".join(fingerprint(f"k{rng.randint(0, 80)}", SEED)
                                   for _ in range(3)))
    if what == "flush":
        return core.flush()
    if what == "tick":
        return core.tick()
    if what == "take":
        return core.take_pending()
    return core.forget_all()


def _state(core: Any, store: Store) -> tuple[Any, ...]:
    counts = core.counts()
    del counts["compiled"]  # the canonicalizer's figure: links resolved in C
    return counts, core.pending, core.cached, core.cache_buckets, list(store.written)


@needs_compiled
@pytest.mark.parametrize("cache_bytes", [0, 64, 64 * 5, 64 * 1000])
@pytest.mark.parametrize("seed", range(4))
def test_both_cores_answer_every_call_alike(cache_bytes: int, seed: int) -> None:
    a_store, b_store = Store(), Store()
    a = a_store.core(compiled.canon.SeenCore, cache_bytes)  # type: ignore[union-attr]
    b = b_store.core(PySeenCore, cache_bytes)
    ra, rb = random.Random(seed), random.Random(seed)
    for step in range(400):
        got_a, got_b = _call(a, ra), _call(b, rb)
        assert got_a == got_b, step
        assert _state(a, a_store) == _state(b, b_store), step
    a.flush()
    b.flush()
    assert _state(a, a_store) == _state(b, b_store)


@needs_compiled
@pytest.mark.parametrize("cls", ["compiled", "python"])
def test_a_failed_write_drops_the_pending_keys_as_a_crash_would(cls: str) -> None:
    """The pending keys are dropped before ``write``: if it fails they are answered
    "new" again, never "seen" without being written."""
    store = Store()
    core = store.core(compiled.canon.SeenCore if cls == "compiled" else PySeenCore,
                      1 << 16, pending_keys=3)
    store.fail_write = True
    assert core.page(("/a", "/b"), "http://a.test/", 0) == ["http://a.test/a",
                                                             "http://a.test/b"]
    with pytest.raises(OSError, match="disk full"):
        core.add("/c", "http://a.test/")  # the third: due, written, failed
    assert core.pending == 0 and store.written == []
    store.fail_write = False
    assert core.page(("/a", "/b", "/c"), "http://a.test/", 0) == [
        "http://a.test/a", "http://a.test/b", "http://a.test/c"]


@needs_compiled
@pytest.mark.parametrize("bad", [lambda f: "no list", lambda f: [1, 0], lambda f: [99]])
def test_a_lookup_that_answers_badly_is_refused(bad: Any) -> None:
    store = Store()
    store.held.add(fingerprint("http://a.test/x", SEED))
    core = store.core(compiled.canon.SeenCore, 1 << 16)
    core2 = compiled.canon.SeenCore(  # type: ignore[union-attr]
        SEED, cache_bytes=0, pending_keys=9, pending_seconds=1, fast_page=store.canon.fast_page,
        resolve=store.canon.resolve_many, probe=store.probe, lookup=bad, write=store.write)
    with pytest.raises((TypeError, ValueError)):
        core2.page(("http://a.test/x", "http://a.test/y"), None, 0)
    assert core2.pending == 0 and core2.counts()["links"] == 0  # nothing counted
    assert core.page(("http://a.test/x",), None, 0) == []


@needs_compiled
def test_a_call_from_a_callback_is_refused() -> None:
    store = Store()
    holder: list[Any] = []

    def lookup(fps: bytes) -> list[int]:
        holder[0].add("http://z.test/")
        return []

    core = compiled.canon.SeenCore(  # type: ignore[union-attr]
        SEED, cache_bytes=0, pending_keys=9, pending_seconds=1, fast_page=store.canon.fast_page,
        resolve=store.canon.resolve_many, probe=lambda f: list(range(len(f) // 16)),
        lookup=lookup, write=store.write)
    holder.append(core)
    with pytest.raises(RuntimeError, match="during one of its calls"):
        core.add("http://a.test/")


@needs_compiled
def test_the_compiled_core_checks_its_arguments() -> None:
    store = Store()
    cls = compiled.canon.SeenCore  # type: ignore[union-attr]
    kw = {"cache_bytes": 0, "pending_keys": 1, "pending_seconds": 0.0,
          "fast_page": store.canon.fast_page, "resolve": store.canon.resolve_many,
          "probe": store.probe, "lookup": store.lookup, "write": store.write}
    for bad in ({"cache_bytes": -1}, {"pending_keys": 0}, {"pending_seconds": -1.0},
                {"pending_seconds": float("nan")}):
        with pytest.raises(ValueError):
            cls(SEED, **{**kw, **bad})
    with pytest.raises(ValueError, match="seed"):
        cls(-1, **kw)
    with pytest.raises(TypeError, match="write must be given"):
        cls(SEED, **{**kw, "write": None})
    core = cls(SEED, **kw)
    with pytest.raises(TypeError, match="tuple"):
        core.page(["http://a.test/"], None, 0)
    with pytest.raises(TypeError, match="depth"):
        core.page(("http://a.test/",), None, 1.5)
    with pytest.raises(ValueError, match="mode"):
        core.pairs([("u", "k")], 0, 7)
    with pytest.raises(TypeError, match="str key"):
        core.pairs([("u", 7)], 0, KEEP)
    words = np.zeros(4, np.uint64)
    with pytest.raises(ValueError, match="geometry"):
        core.view(1, ((words, 4, 10**6, 3, 0),), np.ones(1, np.intp))  # m past the words
    with pytest.raises(TypeError, match="uint64"):
        core.view(1, ((words.astype(np.float64), 4, 256, 3, 0),), np.ones(1, np.intp))
    assert core.counts()["links"] == 0 and core.pending == 0


# -- two UrlSeen, one on each core ----------------------------------------------------


def _python_core(*args: Any, **kw: Any) -> PySeenCore:
    return PySeenCore(*args, **kw)


def _journal(seen: UrlSeen) -> list[tuple[int, bytes, int]]:
    """Every journal row past 0: (seq, fingerprint, kind)."""
    return [(seq, bytes(fps[16 * j:16 * j + 16]), kind)
            for seqs, fps, kinds in seen.ledger.batches_after(0)
            for j, (seq, kind) in enumerate(zip(seqs.tolist(), kinds.tolist(), strict=True))]


@needs_compiled
@pytest.mark.parametrize("seed", range(3))
def test_two_url_seen_answer_alike_down_to_their_journals(tmp_path: Path, seed: int,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    kw = {"capacity": 2000, "shards": 2, "pending_keys": 13, "pending_seconds": 3600,
          "confirm_cache_size": 40}
    a = UrlSeen(tmp_path / "a", **kw)  # type: ignore[arg-type]
    monkeypatch.setattr(seen_mod, "seen_core", _python_core)
    b = UrlSeen(tmp_path / "b", **kw)  # type: ignore[arg-type]
    assert type(a._core) is not type(b._core)
    rng = random.Random(seed)
    hosts = [f"h{i}.test" for i in range(4)]
    for step in range(300):
        what = rng.random()
        links = [f"http://{rng.choice(hosts)}/p{rng.randint(0, 250)}"
                 for _ in range(rng.randint(1, 20))]
        depth = rng.randint(0, 2)
        if what < 0.35:
            got = [s.filter_new(links, depth=depth) for s in (a, b)]
        elif what < 0.5:
            got = [s.add(links[0], depth=depth) for s in (a, b)]
        elif what < 0.6:
            got = [s.filter_new_pages([(None, links[:5]), (None, links[5:])]) for s in (a, b)]
        elif what < 0.7:
            got = [s.admit_one(links[0], links[0], depth=depth) for s in (a, b)]
        elif what < 0.8:
            got = [[(n.seq, n.url) for n in s.admit(links, depth=depth)] for s in (a, b)]
        elif what < 0.85:
            got = [s.forget(links[:2]) for s in (a, b)]
        elif what < 0.9:
            for s in (a, b):
                s.commit()
            got = [0, 0]
        else:
            got = [s.admit_pages([([(u, u) for u in links[:4]], depth),
                                  ([(u, u) for u in links[4:]], 0)]) for s in (a, b)]
            got = [[[(n.seq, n.url) for n in p] for p in g] for g in got]
        assert got[0] == got[1], step
        assert a.counters == b.counters, step
    for s in (a, b):
        s.commit()
    assert _journal(a) == _journal(b)
    assert a.stats()["queued"] == b.stats()["queued"]
    a.close()
    b.close()


# -- the cache's rules ---------------------------------------------------------------


def _fps(n: int, rng: np.random.Generator) -> list[bytes]:
    return [rng.integers(1, 2**64, size=2, dtype=np.uint64).tobytes() for _ in range(n)]


@pytest.mark.parametrize("cls", ["compiled", "python"])
def test_the_cache_keeps_the_most_recent_keys_of_each_bucket(cls: str) -> None:
    """One bucket (64 bytes): four keys, least recently used replaced; a hit renews."""
    if cls == "compiled" and (compiled.canon is None or not hasattr(compiled.canon,
                                                                    "SeenCore")):
        pytest.skip("not built")
    store = Store()
    core = store.core(compiled.canon.SeenCore if cls == "compiled" else PySeenCore,
                      64)
    keys = [f"k{i}" for i in range(6)]
    pairs = [(k, k) for k in keys]
    store.held.update(fingerprint(k, SEED) for k in keys)  # all written: seen
    for k in keys[:4]:
        core.pairs([(k, k)], 0, KEEP)  # found in the index: cached
    assert core.cached == WAYS
    before = core.counts()["ledger_queries"]
    core.pairs([pairs[0]], 0, KEEP)  # a hit: k0 is the most recent now
    core.pairs([pairs[4]], 0, KEEP)  # a miss, found: k1, the least recent, goes
    assert core.counts()["ledger_queries"] == before + 1
    core.pairs([pairs[0], pairs[2], pairs[3], pairs[4]], 0, KEEP)
    assert core.counts()["ledger_queries"] == before + 1  # all four hits
    core.pairs([pairs[1]], 0, KEEP)
    assert core.counts()["ledger_queries"] == before + 2  # k1 had gone


def test_the_cache_grows_to_its_budget_and_no_further() -> None:
    store = Store()
    budget = 64 * 3000  # not a power of two
    core = store.core(PySeenCore, budget)
    assert core.cache_buckets == 1024
    rng = np.random.default_rng(5)
    core.learn(b"".join(_fps(20_000, rng)))
    assert core.cache_buckets == 3000
    assert 0.9 * 3000 * WAYS <= core.cached <= 3000 * WAYS


def test_no_c_file_reads_a_python_attribute_by_name() -> None:
    """dedup/native: the C code is handed what it works on (DESIGN.md, invariant 8)."""
    native = Path(compiled.__file__).parent
    for path in sorted(native.glob("_*.[ch]")):
        text = path.read_text()
        for banned in ("_PyType_Lookup", "PyObject_GenericGetDict", "PyObject_GetAttr",
                       "PyObject_SetAttr", "PyObject_CallMethod", "tp_dictoffset"):
            assert banned not in text, (path.name, banned)
        assert not re.search(r'"_[a-z][a-z_]*"', text), path.name
