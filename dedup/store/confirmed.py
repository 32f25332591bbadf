"""The seen-test's confirm cache: keys confirmed or admitted lately, by fingerprint.

Navigation repeats on every page, so most of a page's links were confirmed a
moment ago; answering them here skips the Bloom filter and the index. The cache
holds fingerprints, not key strings: 16 bytes a key in a compiled table
(``confirm_split`` and ``confirm_add`` in ``dedup/native/_lookup.c``), where a set of
strings kept each ~100-byte key alive and cost three hash-table probes a link.
The pass fingerprints each link as it checks it, so the keys it does not hold
come out with their fingerprints, ready for the filter and the ledger.

Eviction is by two generations (as the fleet relay's ``RecentKeys``): keys go into
the young table; when it holds ``size // 2`` keys it becomes the old one and the
previous old one is dropped; a key found in the old table moves back to the
young one, so keys in steady use survive every swap. A table is at most three
quarters full (linear probing: a miss reads ~8 slots, two cache lines, and the
cache holds 1.5x the keys a half-full table holds in the same RAM) and starts
small, doubling as the young generation fills, so a small crawl does not pay for
the full size (64 MB at the default 3 * 2**20 keys,
``dedup.store.seen.CONFIRM_CACHE_SIZE``).
Where the module is not built, sets of fingerprint bytes do the same, with the
same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from dedup.native import compiled as _compiled
from dedup.url.fingerprint import fingerprint, halves

if TYPE_CHECKING:
    from dedup.filter.layers import LayerStack
    from dedup.store.pending import PendingKeys
    from dedup.url.canonical import Canonicalizer

_NONE = bytes(16)  # the fingerprint (0, 0) marks an empty slot: never held
PENDED = "pended"  # count_link: a key the Bloom filter never saw, pending now
_BATCH_SLOTS = 1 << 12  # a group of pages lets through a few thousand keys
_FIRST_SLOTS = 1 << 12  # a generation's first table (64 KB)


def _compiled_lookup() -> ModuleType | None:
    lookup = _compiled.lookup
    return lookup if lookup is not None and hasattr(lookup, "confirm_split") else None


def _fingerprints_in(table: np.ndarray) -> np.ndarray:
    """The fingerprints a compiled table holds, as ``(n, 2)`` rows."""
    rows = table.reshape(-1, 2)
    return rows[(rows[:, 0] | rows[:, 1]) != 0]


def _doubled(table: np.ndarray) -> tuple[np.ndarray, int]:
    """A compiled table of twice the slots holding the same fingerprints, and
    how many (for a generation that filled 3/4 of its slots, or a pass's batch table
    that filled half)."""
    kept = _fingerprints_in(table)
    grown = np.zeros(2 * len(table), dtype=np.uint64)
    stop, held = _compiled_lookup().confirm_add(  # type: ignore[union-attr]
        grown, 0, len(grown) // 4, kept, 0)
    if not stop == held == len(kept):  # a real check: ``python -O`` drops an assert
        raise RuntimeError(f"confirm cache: the grown table kept {held} of {len(kept)} "
                           "fingerprints")
    return grown, held


class ConfirmCache:
    """The last ``size`` (about) distinct keys added or hit; ``size`` 0 keeps none.
    Keys are str, fingerprinted with ``seed`` (the ledger's)."""

    __slots__ = ("_base", "_fast", "_half", "_held", "_lookup", "_old", "_seed", "_slots",
                 "_young", "one")

    def __init__(self, size: int, seed: int) -> None:
        self._half = size // 2 if size > 1 else size  # size 1 still remembers one key
        self._seed = seed
        self._slots = 2  # a full generation's table: at most 3/4 full, short probes
        while 3 * self._slots < 4 * self._half:
            self._slots *= 2
        self.clear()

    def clear(self) -> None:
        """Forget every key (``forget`` of a URL does this: a cache may not answer
        "seen" for a key the ledger no longer holds)."""
        self._lookup = _compiled_lookup()
        self._base: str | None = None  # count_link's last base and what fast_page made of it
        self._fast: tuple[object, object] | None = None
        # the compiled seen-test of one link (dedup/native/_canon.c), or None: it keeps
        # the tables' buffers between calls, so a call a URL does not ask numpy for them
        canon = _compiled.canon
        self.one = canon.OneLink(self._seed) if self._lookup is not None \
            and canon is not None and hasattr(canon, "OneLink") else None
        self._held = 0  # keys in the young generation
        if self._lookup is not None:
            first = 2 * min(self._slots, _FIRST_SLOTS)  # two words a slot
            self._young: np.ndarray | set[bytes] = np.zeros(first, dtype=np.uint64)
            self._old: np.ndarray | set[bytes] = np.zeros(4, dtype=np.uint64)  # (empty)
        else:
            self._young, self._old = set(), set()

    def _swap(self) -> None:
        dropped, self._old = self._old, self._young
        if not isinstance(dropped, np.ndarray):
            self._young = set()
        elif len(dropped) == len(self._old):
            dropped.fill(0)  # cheaper than a new table's page faults
            self._young = dropped
        else:
            self._young = np.zeros(len(self._old), dtype=np.uint64)  # full size by now
        self._held = 0

    def _limit(self) -> int:
        """What the young table may hold now: the generation's size, or 3/4 of its slots."""
        return min(self._half, 3 * len(self._young) // 8)

    def _full(self) -> None:
        """The young table holds :meth:`_limit` keys: swap the generations if that is
        the generation's size, else grow the table."""
        if self._held >= self._half:
            self._swap()
        else:
            self._young, held = _doubled(self._young)
            if held != self._held:
                raise RuntimeError(f"confirm cache: the young table holds {held} keys, "
                                   f"its count {self._held}")

    def count_hits(self, pairs: Sequence[tuple[str, str] | None], out: CacheMisses) -> int:
        """How many of the ``(value, key)`` pairs the cache holds (a hit; a key held by
        the old generation moves to the young one); ``None``, a rejected link, is
        skipped. The keys not held go to ``out``, each once, with their first value
        and fingerprint. One call per page; a group of pages shares ``out``."""
        lookup = self._lookup
        if lookup is None:
            return self._count_hits_python(pairs, out)
        if type(pairs) is not list:
            pairs = list(pairs)
        hits = i = 0
        limit = self._limit()
        while i < len(pairs):
            i, n, self._held, out.held = lookup.confirm_split(
                pairs, i, self._seed, self._young, self._held, self._old, limit,
                out.table, out.held, out.keys, out.values, out.fps)
            hits += n
            if self._held >= limit > 0:
                self._full()
                limit = self._limit()
            if 4 * out.held >= len(out.table):  # half its slots (two words a slot)
                out.grow()
        return hits

    def count_links(self, links: tuple[str, ...], base: str | None, canon: Canonicalizer,
                    out: CacheMisses, pending: np.ndarray | None = None
                    ) -> tuple[int, int, bool] | None:
        """:meth:`count_hits` of ``canon.resolve_many(links, base)`` in one compiled pass
        (``confirm_links``, ``dedup/native/_canon.c``): ``(hits, rejected links,
        screened)``, the same misses in ``out`` in the same order. Most links of a
        page are hits, and this pass makes no Python object for them; the links it
        leaves over (unusual ones) go through ``resolve_many`` and :meth:`count_hits`,
        in their place. ``pending``: a table of the same kind (the caller's pending
        admissions, ``dedup.store.pending``) whose keys count as hits too; screened
        is False if some links were left over (they were not checked against it).
        None where it cannot run (the caller takes the two steps)."""
        lookup = self._lookup
        fast = canon.fast_page(base) if lookup is not None else None
        if fast is None:
            return None
        rules, page = fast
        confirm_links = _compiled.canon.confirm_links  # type: ignore[union-attr]
        hits = rejected = compiled = i = 0
        screened = True
        n = len(links)
        limit = self._limit()
        while i < n:
            i, h, self._held, out.held, r, c, todo = confirm_links(
                links, i, rules, page, self._seed, self._young, self._held, self._old, limit,
                out.table, out.held, out.keys, out.values, out.fps, pending)
            hits += h
            rejected += r
            compiled += c
            if self._held >= limit > 0:
                self._full()
                limit = self._limit()
            if 4 * out.held >= len(out.table):
                out.grow()
            if todo:
                screened = False
                pairs = canon.resolve_many(links[i:i + todo], base)
                rejected += pairs.count(None)
                hits += self.count_hits(pairs, out)
                limit = self._limit()
                i += todo
        canon.count_compiled(compiled)
        return hits, rejected, screened

    def seen_page(self, links: tuple[str, ...], base: str | None, canon: Canonicalizer,
                  pending: PendingKeys, batch: bytearray, stack: LayerStack,
                  held_among: Callable[[bytes], list[int]]) -> tuple[Any, ...] | None:
        """The whole seen-test of a page's ``links`` in one compiled call (``OneLink.page``):
        :meth:`count_links`, the Bloom probe of its misses (``stack``), ``held_among``
        (the ledger's) for the maybe-seen ones, the keys it holds learnt here, and the
        new ones pending (added to ``pending``'s table and to ``batch``, in order). The
        answer, ``(new keys, hits, rejected links, misses, maybe-seen, found, pended,
        rest)``: the caller counts them, then calls :meth:`learn` with ``rest``. None
        where it cannot run (the caller takes the steps one by one).

        The young generation's swap or growth, the links the compiled path leaves over
        and a table with no room stay here, between calls."""
        one = self.one
        if one is None or pending.table is None:
            return None
        fast = canon.fast_page(base)
        if fast is None:
            return None
        rules, page = fast
        pending.reserve(len(links))
        limit = self._limit()
        start, fresh, resolved, at = 0, True, None, 0
        while True:
            got = one.page(links, start, fresh, resolved, rules, page, self._young, self._held,
                           self._old, limit, pending.table, pending.held, batch, stack.rows,
                           stack.probe_layers, stack.nlayers, held_among)
            if len(got) != 3:
                break
            stop, self._held, todo = got
            if stop < 0:
                raise todo
            if resolved is not None and stop < at + len(resolved):  # stopped among them
                resolved = resolved[stop - at:]
            elif todo:
                resolved = canon.resolve_many(links[stop:stop + todo], base)
            else:
                resolved = None
            start, fresh, at = stop, False, stop
            if self._held >= limit > 0:
                self._full()
                limit = self._limit()
        new, self._held, hits, rejected, compiled, misses, maybe, found, rest, pended = got
        canon.count_compiled(compiled)
        return new, hits, rejected, misses, maybe, found, pended, rest

    def learn(self, rest: bytes | None) -> None:
        """After :meth:`seen_page`: the young generation swapped or grown if it is full,
        and the found keys it had no room for added."""
        if self._held >= self._limit() > 0:
            self._full()
        if rest:
            self.add(halves(rest))

    def page_of(self, base: str | None, canon: Canonicalizer) -> tuple[object, object] | None:
        """``canon.fast_page(base)``, kept for the next call with the same base (one
        base a page, or None for absolute URLs: parsed once); None where the compiled
        path cannot take the page."""
        if base is self._base and self._fast is not None:
            return self._fast
        fast = canon.fast_page(base) if self.one is not None else None
        if fast is not None:
            self._base, self._fast = base, fast
        return fast

    def count_link(self, link: str, base: str | None, canon: Canonicalizer,
                   pending: np.ndarray | None = None, pending_held: int = 0,
                   batch: bytearray | None = None, stack: LayerStack | None = None
                   ) -> bool | str | tuple[str, str, bytes] | None:
        """:meth:`count_links` of one link, with no pass (``OneLink.one``, for a call a
        URL): True, a hit (held here or by ``pending``); None, the link is rejected;
        ``(fetch_url, key, fingerprint)``, a miss; False where the compiled path cannot
        take it (the caller takes :meth:`count_hits`).

        Given the Bloom filter's layers (``stack``) and a pending ``batch`` (with
        ``pending`` holding ``pending_held`` keys), a miss the filter has never seen is
        appended to both and answered :data:`PENDED`; a miss is then one the filter
        may hold. The call keeps the tables' buffers between calls: the compiled part
        of the Python :meth:`dedup.store.seen.UrlSeen.add` (``OneLink.add`` is its whole
        path compiled, and hands it only what it does not take)."""
        fast = self._fast if base is self._base else None  # one base a page: parsed once
        if fast is None:
            fast = self.page_of(base, canon)
            if fast is None:
                return False
        limit = min(self._half, 3 * len(self._young) // 8)  # then swap or grow
        if stack is None:
            got = self.one.one(  # type: ignore[union-attr]
                link, fast[0], fast[1], self._young, self._held, self._old, limit, pending,
                0, None, 0, None, None)
        else:
            got = self.one.one(  # type: ignore[union-attr]
                link, fast[0], fast[1], self._young, self._held, self._old, limit, pending,
                pending_held, batch, stack.rows, stack.probe_layers, stack.nlayers)
        if got is True:
            canon.count_compiled(1)
            return PENDED
        if type(got) is int:
            if got == -2:
                return False
            canon.count_compiled(1)
            if got >= 0:  # a hit: the young table holds `got` keys now
                self._held = got
                if got >= limit > 0:
                    self._full()
                return True
            return None
        canon.count_compiled(1)
        return got  # type: ignore[no-any-return]

    def _count_hits_python(self, pairs: Sequence[tuple[str, str] | None], out: CacheMisses) -> int:
        hits = 0
        for pair in pairs:
            if pair is None:
                continue
            value, key = pair
            if type(key) is not str:
                raise TypeError("pairs must be (value, str key) or None")
            fp = fingerprint(key, self._seed)
            if fp != _NONE:
                if fp in self._young:
                    hits += 1
                    continue
                if fp in self._old:
                    hits += 1
                    self._add_python(fp)
                    continue
                if fp in out.let_through:
                    continue
                out.let_through.add(fp)
            out.keys.append(key)
            out.values.append(value)
            out.fps += fp
        return hits

    def add(self, h: np.ndarray) -> None:
        """Hold the keys of fingerprints ``h`` (``(n, 2)`` uint64 halves, as
        :func:`dedup.url.fingerprint.halves` gives them)."""
        if self._half <= 0 or not len(h):
            return
        if self._lookup is None:
            blob = np.ascontiguousarray(h, dtype="<u8").tobytes()
            for at in range(0, len(blob), 16):
                if blob[at:at + 16] != _NONE:
                    self._add_python(blob[at:at + 16])
            return
        h = np.ascontiguousarray(h, dtype=np.uint64)
        i = 0
        while i < len(h):
            limit = self._limit()
            i, self._held = self._lookup.confirm_add(self._young, self._held, limit, h, i)
            if self._held >= limit:
                self._full()

    def _add_python(self, fp: bytes) -> None:
        young = self._young
        assert isinstance(young, set)
        if fp not in young:
            young.add(fp)
            self._held += 1
            if self._held >= self._half:
                self._swap()

    def __len__(self) -> int:
        """Keys held (the old generation may repeat some of the young one's)."""
        if isinstance(self._old, np.ndarray):
            return self._held + len(_fingerprints_in(self._old))
        return self._held + len(self._old)


class CacheMisses:
    """The keys a pass of :meth:`ConfirmCache.count_hits` did not find (its misses),
    over one page or a group: each key once, in first-seen order, with its first
    value (``values[i]`` is the URL of ``keys[i]``) and its fingerprint (bytes
    ``16 i`` to ``16 i + 16`` of ``fps``). Keys are told apart by fingerprint, as
    the ledger does."""

    __slots__ = ("fps", "held", "keys", "let_through", "table", "values")

    def __init__(self, slots: int = _BATCH_SLOTS) -> None:
        """``slots``: the compiled pass's first table (a power of two, doubled as it
        fills); a pass over one link (``UrlSeen.add``) needs 2, not a page's 4,096."""
        self.keys: list[str] = []
        self.values: list[str] = []
        self.fps = bytearray()
        self.table = np.zeros(2 * slots, dtype=np.uint64)  # the compiled pass's
        self.held = 0
        self.let_through: set[bytes] = set()  # the Python pass's

    def reset(self) -> None:
        """Empty, for the next pass (a caller's scratch, cheaper than a new one)."""
        self.keys.clear()
        self.values.clear()
        self.fps.clear()
        self.held = 0
        self.table.fill(0)
        self.let_through.clear()

    def grow(self) -> None:
        """Twice the compiled pass's table."""
        self.table, self.held = _doubled(self.table)

    def __len__(self) -> int:
        return len(self.keys)
