"""The seen-test core: the state a "have we seen this key?" answer needs, and its rules.

One object owns everything the hot path reads and writes: the cache of recent keys,
the pending keys (answered "new", not yet written), the counters and the flush
rule (by count and by age). It answers through a few methods (``add``, ``page``,
``pairs``) and reaches the rest of the store only through the callables it is
given: ``resolve`` (the canonicalizer's links the compiled path leaves over),
``probe`` (the Bloom filter's "maybe seen" keys), ``lookup`` (the index's exact
answer for those), ``write`` (a due batch: bits, then one ledger append). Nothing
else of the store is read or written by name, so renaming a field of ``UrlSeen``
cannot break it.

Two implementations answer the same calls the same way, counters and cache order
included: the compiled ``dedup.native._canon.SeenCore`` (``dedup/native/_seencore.h``)
and :class:`PySeenCore` here, used under ``BLOOMCRAWL_NO_KERNEL=1`` and where the
extension did not build. tests/dedup/store/test_seencore.py drives both call by call.

The cache of recent keys holds full 16-byte fingerprints (a hit answers "seen",
so a shorter tag could drop a new URL) in buckets of four, one 64-byte cache line
each: a lookup reads one line, and a hit moves its key to the front of its bucket,
so the bucket's last key is the least recently used and the one replaced. Its
memory is a budget (``cache_bytes``): it starts at 1,024 buckets and doubles as it
fills (past 3/4 of its slots) up to the budget, so a small crawl does not pay for
the full size. (Growing past half its slots lost fewer keys to full buckets on the
way, but the old and new tables side by side then met an index merge and the peak
RSS at 10M's scale rose by 12 MB: bench/README.md, "Where the time goes".)
Bucket of a key: ``((lo >> 32) * buckets) >> 32`` (a doubling splits each bucket
in two).

The flush rule: the pending keys are written (``write``) when there are
``pending_keys`` of them or the oldest has waited ``pending_seconds``, checked at
the end of every call that answers (so an answer's age is bounded by the next call,
not by a timer thread sharing the connection), and by :meth:`PySeenCore.flush`.
The pending state is dropped before ``write`` is called: a write that fails loses
those answers as a crash would (a key answered "new" may be answered "new" again,
never "seen" without being recorded).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from dedup.native import compiled as _compiled
from dedup.url.fingerprint import fingerprint

__all__ = ["COUNTERS", "HOLD", "KEEP", "PEND", "PySeenCore", "seen_core"]

WAYS = 4  # keys a bucket (one 64-byte cache line of 16-byte keys)
BUCKET_BYTES = 16 * WAYS
FIRST_BUCKETS = 1024  # 64 KB: a small crawl's table
# what the new keys of a call become: PEND, pending admissions written by the flush
# rule; HOLD, pending keys whose rows the caller writes (its ``write`` does, first);
# KEEP, not pending: the caller writes them now, then calls ``learn``
KEEP, PEND, HOLD = 0, 1, 2
COUNTERS = ("links", "new", "repeats", "rejected", "bloom_definitely_new", "bloom_maybe",
            "confirm_cache_hits", "ledger_queries", "false_positives", "compiled")
_ZERO = bytes(16)

Resolve = Callable[[Sequence[Any], "str | None"], list]
Probe = Callable[[bytes], list]
Lookup = Callable[[bytes], list]
Write = Callable[[list], None]


def seen_core(seed: int, *, cache_bytes: int, pending_keys: int, pending_seconds: float,
              fast_page: Callable[[str | None], Any], resolve: Resolve, probe: Probe,
              lookup: Lookup, write: Write) -> Any:
    """The compiled core where it is built, else :class:`PySeenCore` (same arguments)."""
    canon = _compiled.canon
    cls: Any = canon.SeenCore if canon is not None and hasattr(canon, "SeenCore") \
        else PySeenCore
    return cls(seed, cache_bytes=cache_bytes, pending_keys=pending_keys,
               pending_seconds=pending_seconds, fast_page=fast_page, resolve=resolve,
               probe=probe, lookup=lookup, write=write)


class _Cache:
    """Recent keys in buckets of :data:`WAYS`, most recently used first."""

    __slots__ = ("buckets", "held", "max_buckets", "nb")

    def __init__(self, cache_bytes: int) -> None:
        self.max_buckets = cache_bytes // BUCKET_BYTES if cache_bytes >= BUCKET_BYTES \
            else (1 if cache_bytes > 0 else 0)
        self.clear()

    def clear(self) -> None:
        self.nb = min(self.max_buckets, FIRST_BUCKETS)
        self.buckets: dict[int, list[bytes]] = {}
        self.held = 0

    def _at(self, fp: bytes) -> int:
        return ((int.from_bytes(fp[8:16], "little") >> 32) * self.nb) >> 32

    def hit(self, fp: bytes) -> bool:
        """Held? A hit moves the key to its bucket's front."""
        if not self.nb:
            return False
        b = self.buckets.get(self._at(fp))
        if not b or fp not in b:
            return False
        if b[0] != fp:
            b.remove(fp)
            b.insert(0, fp)
        return True

    def learn(self, fp: bytes) -> None:
        """Hold ``fp`` at its bucket's front; its last key makes room."""
        if not self.nb or fp == _ZERO:
            return
        at = self._at(fp)
        b = self.buckets.setdefault(at, [])
        if fp in b:
            b.remove(fp)
        elif len(b) == WAYS:
            b.pop()
        else:
            self.held += 1
        b.insert(0, fp)
        if self.held > self.nb * WAYS * 3 // 4 and self.nb < self.max_buckets:
            self._grow()

    def _grow(self) -> None:
        old, nb = self.buckets, self.nb
        self.nb = min(2 * nb, self.max_buckets)
        self.buckets = {}
        self.held = 0
        for i in range(nb):
            for fp in old.get(i, ()):
                b = self.buckets.setdefault(self._at(fp), [])
                if len(b) < WAYS:  # a split always has room; the last step may not
                    b.append(fp)
                    self.held += 1


class PySeenCore:
    """The seen-test core in Python (see the module docstring): the compiled
    ``SeenCore``'s interface and answers."""

    def __init__(self, seed: int, *, cache_bytes: int, pending_keys: int,
                 pending_seconds: float, fast_page: Callable[[str | None], Any],
                 resolve: Resolve, probe: Probe, lookup: Lookup, write: Write) -> None:
        self._seed = seed
        self._cache = _Cache(cache_bytes)
        self._keys_limit = pending_keys
        self._seconds = float(pending_seconds)
        self._resolve, self._probe, self._lookup, self._write = resolve, probe, lookup, write
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._drop()

    def _drop(self) -> None:
        self._pend: set[bytes] = set()  # pending keys, (0, 0) aside: answered "seen"
        self._n = 0  # pending keys to write (HOLD ones included)
        self._since = 0.0
        self._batches: dict[int, bytearray] = {}
        self._held = bytearray()  # HOLD keys, written by the caller

    # -- answering --------------------------------------------------------------------

    def add(self, url: str, base_url: str | None = None, *, depth: int = 0) -> bool:
        """True if ``url`` (resolved against ``base_url``) is new, and pending now."""
        return bool(self.page((url,), base_url, depth))

    def page(self, links: tuple[str, ...], base: str | None, depth: int) -> list[str]:
        """The keys of ``links`` never seen, in first-seen order, pending now."""
        pairs = self._resolve(links, base)
        idx, _ = self._answer(pairs, depth, PEND, len(links))
        return [pairs[i][1] for i in idx]

    def pairs(self, pairs: Sequence[tuple[str, str] | None], depth: int,
              mode: int) -> tuple[list[int], bytes]:
        """Indexes in ``pairs`` (``(value, key)`` or None) of the new keys (each key's
        first), and their fingerprints; ``mode``: :data:`PEND`, :data:`HOLD` or
        :data:`KEEP`. Only PEND ends with :meth:`tick`."""
        if mode not in (KEEP, PEND, HOLD):
            raise ValueError(f"mode must be KEEP, PEND or HOLD, not {mode!r}")
        return self._answer(pairs, depth, mode, len(pairs))

    def _answer(self, pairs: Sequence[Any], depth: int, mode: int,
                n: int) -> tuple[list[int], bytes]:
        if type(depth) is not int:
            raise TypeError(f"depth must be an int, not {type(depth).__name__}")
        cache, pend, seed = self._cache, self._pend, self._seed
        hits = rejected = 0
        met: set[bytes] = set()
        misses: list[tuple[int, bytes]] = []
        for i, pair in enumerate(pairs):
            if pair is None:
                rejected += 1
                continue
            key = pair[1]
            if type(key) is not str:
                raise TypeError("pairs must be (value, str key) or None")
            fp = fingerprint(key, seed)
            if fp != _ZERO:
                if cache.hit(fp):
                    hits += 1
                    continue
                if fp in met:
                    continue
                met.add(fp)
                if fp in pend:
                    hits += 1
                    continue
            misses.append((i, fp))
        blob = b"".join(fp for _, fp in misses)
        maybe = self._probe(blob) if misses else []
        found: list[int] = []
        if maybe:
            asked = b"".join(misses[j][1] for j in maybe)
            found = [maybe[j] for j in self._lookup(asked)]
            for j in found:
                cache.learn(misses[j][1])
        gone = set(found)
        new = [m for j, m in enumerate(misses) if j not in gone]
        c = self._counts
        links = n - rejected
        c["links"] += links
        c["rejected"] += rejected
        c["confirm_cache_hits"] += hits
        c["bloom_maybe"] += len(maybe)
        c["bloom_definitely_new"] += len(misses) - len(maybe)
        if maybe:
            c["ledger_queries"] += 1
            c["false_positives"] += len(maybe) - len(found)
        c["new"] += len(new)
        c["repeats"] += links - len(new)
        fps = b"".join(fp for _, fp in new)
        if new and mode != KEEP:
            if not self._n:
                self._since = time.monotonic()
            self._n += len(new)
            pend.update(fp for _, fp in new if fp != _ZERO)
            if mode == PEND:
                self._batches.setdefault(depth, bytearray()).extend(fps)
            else:
                self._held += fps
        if mode == PEND:
            self.tick()
        return [i for i, _ in new], fps

    # -- the flush rule -----------------------------------------------------------------

    def due(self) -> bool:
        """Pending keys to write: ``pending_keys`` of them, or the oldest has waited
        ``pending_seconds``."""
        return bool(self._n) and (self._n >= self._keys_limit
                                  or time.monotonic() - self._since >= self._seconds)

    def tick(self) -> None:
        """Flush if :meth:`due` (``add`` and ``page`` end with it; a caller of
        ``pairs`` with HOLD calls it once its rows are recorded)."""
        if self._n and self.due():
            self.flush()

    def take_pending(self) -> list[tuple[int, bytes]]:
        """The pending batches, ``(depth, fingerprints)`` shallowest first, dropped
        here (HOLD keys too: their rows are the caller's)."""
        out = [(d, bytes(self._batches[d])) for d in sorted(self._batches)]
        self._drop()
        return out

    def flush(self) -> None:
        """Write the pending keys (``write(batches)``), then hold them in the cache."""
        if not self._n:
            return
        held = bytes(self._held)
        batches = self.take_pending()
        self._write(batches)
        self.learn(b"".join(fps for _, fps in batches) + held)

    def learn(self, fps: bytes) -> None:
        """Hold the keys of ``fps`` (16 bytes each, written or found) in the cache."""
        cache = self._cache
        for at in range(0, len(fps) - len(fps) % 16, 16):
            cache.learn(bytes(fps[at:at + 16]))

    def forget_all(self) -> None:
        """Drop every cached key (a forgotten key must not be answered "seen")."""
        self._cache.clear()

    def view(self, rows: int, layers: tuple[Any, ...], nlayers: Any) -> None:
        """The Bloom filter's buffers, for the compiled core; ``probe`` answers here."""

    # -- counts -------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    @property
    def pending(self) -> int:
        """Pending keys (to write)."""
        return self._n

    @property
    def cached(self) -> int:
        """Keys the cache holds."""
        return self._cache.held

    @property
    def cache_buckets(self) -> int:
        return self._cache.nb
