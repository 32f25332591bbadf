"""The crawl's side of learning: content classes, rules before the seen-test, budgets.

``dedup.learn`` decides (which pages are copies, which rules hold, which budgets
close); this module makes those decisions act on one crawl, in four places:

1. **a fetched page** (the worker): its main text's SimHash (``text_print``);
2. **the group commit** (``pages``): each page with a 2xx body, in commit order,
   gets its content class (the first page of its host with the same payload
   digest or within ``near_distance`` bits: pages.jsonl's ``near_duplicate_of``),
   a ``prints`` row in the ledger, and goes to the host's rule learner and trap
   budgets; what they decide (a rule accepted or revoked, a budget reopened) acts
   at once, in the same transaction;
3. **the links of a group, before the seen-test** (``rewrite`` and ``settle``,
   called by ``Admission.admit_pages``): a link a host's accepted rules rewrite is
   tested under its *rule key* (``RULE_KEY`` + the rewritten key: its own key
   space, so a rule never makes a real URL look seen). A rule key seen before
   means a duplicate: the link is recorded under its own key, skipped, and held
   (``held`` table) so that revoking the rule admits it again; a share of them is
   fetched anyway, as checks (``RuleLearner.judge``);
4. **a queued URL's turn** (``at_turn``, run by the group commit): one queued before
   its host's rules (or under an earlier rule key) gets its rule key recorded, or
   is a duplicate, held or checked like a link; one whose pattern's budget is
   closed is held (skipped, reason "budget: PATTERN"), or let through as a probe;
   one an open proposal would make a duplicate is put back once (``later``).

Why rule keys are in the ledger and not in memory: the seen-test is what makes a
decision exact across kill -9 and at any scale; a rule key costs one ledger row
like a URL. What the learner and the budgets hold in memory (recent pages,
windows) is rebuilt on resume by reading ``prints`` in commit order.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from crawler.config.settings import LearnSettings
from crawler.core.state.crawlstate import CrawlState
from dedup import (
    HELD_KINDS,
    NOVELTY,
    BudgetConfig,
    Budgets,
    CrawlPort,
    HeldRow,
    LearnConfig,
    NearIndex,
    NewUrl,
    PrintRow,
    RuleLearner,
    RuleRow,
    Shingles,
    State,
    UrlRejected,
)

if TYPE_CHECKING:  # the frontier's module imports asyncio: `stats` reads these figures
    from crawler.core.schedule.frontier import Frontier, QueuedUrl

__all__ = ["LATER", "RULE_KEY", "Learning", "PageContent", "learning_figures", "merge_figures"]

LATER = "later"  # Learning.turn: the URL was put back behind its host, not decided
RULE_KEY = "~"  # a rule key is this + the rewritten canonical key (no URL starts so)
# learning's counts (``CrawlState.learn_counts``, kept with the outcomes they count):
# the URLs it marked skipped, by why: "suppressed" (a duplicate under a rule),
# "budget" (held by a closed budget), "aliases" (rule keys recorded for pages
# fetched under their own keys); "hosts": {host: [suppressed, held by budgets]} for
# up to MAX_HOSTS hosts
MAX_HOSTS = 500
OTHER_HOSTS = "(other hosts)"
# ledger states of a URL that is fetched, or will be (failed: tried, as without rules)
_TRIED = ("queued", "fetched", "failed")
_SUPPRESSED, _KEY, _CHECK, _BUDGET, _ALIAS = (HELD_KINDS[k] for k in (
    "suppressed", "key", "check", "budget", "alias"))

# A page's main text: (simhash, its shingles, of its wider shingles those new to its
# host, and all of those) (``text_print``)
TextPrint = tuple[int, int, int, int]
# (seq, host, url, its key or None, payload digest, its TextPrint or None) of a
# committed 2xx page (its key: as the frontier had it, when it was not a rule key)
PageContent = tuple[int, str, str, str | None, str | None, TextPrint | None]
_OLD, _NEW, _EXPLAINED = NOVELTY["old"], NOVELTY["new"], NOVELTY["explained"]
_row = tuple.__new__  # a PrintRow without its Python-level __new__ (a page at each commit)
Pairs = list[tuple[str, str]]
# per page: rewritten link index -> (its own (url, key), its rule key, the rules' ids)
Rewrites = list[dict[int, tuple[tuple[str, str], str, tuple[int, ...]]]]


def _ids(ids: Sequence[int]) -> str:
    return ",".join(map(str, ids))


def _parse_ids(why: str) -> tuple[set[int], int | None]:
    ids, _, page = why.partition("@")
    return {int(i) for i in ids.split(",") if i}, int(page) if page else None


def _same_reason(seq: int) -> str:
    return f"the same URL, admitted under a learned rule key as seq {seq}"


class Learning:
    """One crawl's learning, over its seen-test (``seen``: rule keys are keys) and its
    crawl state (``state``: prints, rules, held URLs, budgets and counts, in the same
    transaction); ``admit`` re-admits URLs (a revoked rule's, a reopened budget's)
    through the crawl's admission, which applies the rules again."""

    @classmethod
    def of_crawl(cls, seen: CrawlPort, state: CrawlState, settings: LearnSettings,
                 frontier: Frontier) -> Learning | None:
        """The learning of a crawl, None with ``--no-learn`` (``[learn] enabled``)."""
        return cls(seen, state, settings, frontier) if settings.enabled else None

    def __init__(self, seen: CrawlPort, state: CrawlState, settings: LearnSettings,
                 frontier: Frontier) -> None:
        self.seen = seen
        self.state = state
        self.settings = settings
        self.frontier = frontier
        self.canon = seen.canonicalizer
        self.admit: Callable[[Sequence[tuple[Pairs, int]], Sequence[str | None]], list[int]] \
            | None = None
        self.near = NearIndex(settings.near_distance)
        # text-less pages' classes: (host, digest) -> (first seq, its URL)
        self._digests: dict[tuple[str, str], tuple[int, str]] = {}
        self._shingles: dict[str, Shingles] = {}  # per host: the shingles its pages had
        self.learner = RuleLearner(LearnConfig(
            history=settings.history, min_pairs=settings.min_pairs,
            min_contents=settings.min_contents, check_first=settings.check_first,
            check_rate=settings.check_rate), lookup=self._lookup)
        self.budgets = Budgets(BudgetConfig(
            window=settings.budget_window, host_window=settings.budget_host_window,
            grace=settings.budget_grace, probe_first=settings.budget_probe_first))
        self._checks: dict[int, str] = {}  # seq of a URL queued as a check -> its host
        self._later: set[int] = set()  # seqs put back once (``later``)
        # seqs queued under a rule key that a page fetched before a newer rule now
        # holds too -> the rules that made it so (``_shadow``)
        self._shadowed: dict[int, tuple[int, ...]] = {}
        self._prefixes: tuple[str, ...] = ()  # origins of hosts with rules
        self._version = -1
        self.events: list[dict[str, Any]] = []  # what was decided, newest last (summary)
        self.counts: dict[str, Any] = {"suppressed": 0, "budget": 0, "aliases": 0,
                                       "hosts": {}}
        self._counts_changed = False
        self._restore()

    # -- restart ------------------------------------------------------------------------

    def _restore(self) -> None:
        """The learner's rules, recent pages and the budgets' windows, from the ledger."""
        state = self.state
        self.learner.restore(r for r in state.learned_rules())
        history = self.settings.history
        recent: dict[str, list[PrintRow]] = {}
        for row in state.prints():
            self._classify_restored(row)
            if row.novel != _EXPLAINED:
                self.budgets.replay(row.host, self._budget_key(row.host, self._key(row.url)),
                                    row.novel == _NEW)
            pages = recent.setdefault(row.host, [])
            pages.append(row)
            if len(pages) > 2 * history:
                del pages[:history]
        for host, pages in recent.items():
            for row in pages[-history:]:
                self.learner.replay(host, self._key(row.url), row.cls, row.seq)
        self.budgets.restore(state.learn_budgets())
        self.counts.update(state.learn_counts())
        for h in state.held(kinds=(_CHECK,)):
            if state.print_of(h.seq) is None:  # not fetched yet
                self._checks[h.seq] = h.host

    def _classify_restored(self, row: PrintRow) -> None:
        if row.simhash is not None and row.near is None:
            self.near.add(row.host, row.simhash, (row.seq, row.url))
        elif row.simhash is None and row.digest is not None:
            self._digests.setdefault((row.host, row.digest), (row.seq, row.url))

    def _budget_key(self, host: str, key: str) -> str:
        """What a budget files a key under: the key as its host's rules rewrite it
        (a session id is not a pattern)."""
        return self.learner.rewrite(host, key)[0]

    def _key(self, url: str) -> str:
        try:
            return self.canon.resolve(url)[1]
        except UrlRejected:
            return url

    # -- a fetched page -----------------------------------------------------------------

    def text_print(self, host: str, text: str | None) -> TextPrint | None:
        """``(simhash, shingles, new wider shingles, wider shingles)`` of a page's main
        text (its wider shingles join the host's), None without a word of text."""
        if not text:
            return None
        shingles = self._shingles.get(host)
        if shingles is None:
            shingles = self._shingles[host] = Shingles()
        out = shingles.print(text, self.settings.shingle)
        return out if out[1] else None

    # -- the group commit: pages with content, in commit order ------------------------

    def pages(self, pages: Sequence[PageContent], now: float | None = None) -> list[str | None]:
        """Each page's ``near_duplicate_of`` (the URL of its host's first page within
        the distance, None if it is that page or has too little text); their prints
        rows and what the learner and budgets decide, in the open transaction."""
        now = time.time() if now is None else now
        st = self.settings
        min_shingles = max(1, st.near_min_words - st.shingle + 1)
        enough = st.budget_new_shingles
        find_or_add = self.near.find_or_add
        digests = self._digests
        observe = self._observe
        out: list[str | None] = []
        rows: list[PrintRow] = []
        for seq, host, url, key, digest, fp in pages:
            near = first_url = None  # the first page of its content, and its URL
            if fp is not None and fp[1] >= min_shingles:
                simhash = fp[0]
                found = find_or_add(host, simhash, (seq, url))
                if found is not None:
                    near, first_url = found  # type: ignore[misc]
                cls = near if near is not None else seq
                # new shingles: at least so many, or half of a short text
                new = fp[2] >= min(enough, (fp[3] + 1) // 2)
            else:
                simhash = None
                if digest is not None:
                    cls, first = digests.setdefault((host, digest), (seq, url))
                    if cls != seq:
                        first_url = first
                else:
                    cls = seq
                new = cls == seq  # too few words to judge by them (a hub of links)
            out.append(first_url if near is not None else None)
            rows.append(observe(_row(PrintRow, (seq, host, url, digest, simhash, near, cls,
                                                _NEW if new else _OLD)), now, first_url,
                                key if key is not None and not key.startswith(RULE_KEY)
                                else None))
        self.state.note_prints(rows)
        self._save()
        return out

    def _save(self) -> None:
        """The rules, budgets and counts that changed, in the open transaction."""
        changed = self.learner.changed()
        if changed:
            self.state.note_rules(RuleRow(*s.row()) for s in changed)
        if self.budgets.changed:
            self.state.set_learn_budgets(self.budgets.state())
        if self._counts_changed:
            self.state.set_learn_counts(self.counts)
            self._counts_changed = False

    def _count(self, what: str, n: int = 1, host: str | None = None) -> None:
        self.counts[what] += n
        self._counts_changed = True
        if host is not None and what in ("suppressed", "budget"):
            hosts = self.counts["hosts"]
            if host not in hosts and len(hosts) >= MAX_HOSTS:
                host = OTHER_HOSTS
            row = hosts.setdefault(host, [0, 0])
            row[what == "budget"] += n

    def _observe(self, row: PrintRow, now: float, first_url: str | None,
                 key: str | None) -> PrintRow:
        """A page through the learner, then (unless a URL rule explains it) the
        budgets; the row as stored (``novel`` says which)."""
        seq, host = row.seq, row.host
        if key is None:
            key = self._key(row.url)
        check = self._checks.pop(seq, None) is not None if self._checks else False
        events, explained = self.learner.observe(
            host, key, row.cls, seq, now=now, check=check,
            first=self._key(first_url) if first_url is not None else None)
        if events:
            accepted = False
            for kind, s in events:
                self._event(kind, host=host, rule=s.id, what=s.rule.describe(), at=now)
                if kind == "accepted":
                    accepted = True
                elif kind == "revoked":
                    self._release(host, lambda h, rid=s.id: h.kind != _BUDGET and
                                  rid in _parse_ids(h.why)[0])
            if accepted:  # the recent pages' rule keys, this one's included
                self._alias(host, self.learner.recent(host))
        novel = row.novel == _NEW
        if explained and not novel:
            return row._replace(novel=_EXPLAINED)
        for event, where, pattern, held in self.budgets.observe(
                host, self._budget_key(host, key), novel):
            self._event(f"budget {event}", host=where, pattern=pattern, held=held, at=now)
            if event == "reopened":
                self._release(where, lambda h, p=pattern: h.kind == _BUDGET and h.why == p)
        return row

    def _event(self, kind: str, **what: Any) -> None:
        self.events.append({"event": kind, **what})
        del self.events[:-100]

    def _lookup(self, host: str, rkey: str) -> tuple[int, str] | None:
        """The content class and key of the page fetched under a rule key (a check
        whose partner left the learner's history)."""
        row = self.state.lookup_key(RULE_KEY + rkey)
        if row is None:
            return None
        seq = row["seq"]
        held = self.state.held_of(seq)
        if held is not None and held.kind == _ALIAS:
            seq = _parse_ids(held.why)[1] or seq
        p = self.state.print_of(seq)
        return None if p is None else (p.cls, self._key(p.url))

    def _alias(self, host: str, pages: list[tuple[str, int, str, tuple[int, ...]]]) -> None:
        """Fetched pages of a host with rules (``(key, seq, rewritten key, rules that
        rewrote it)``): each one's rule key is recorded (skipped, and held as an alias
        to forget if a rule that made it goes), so that another URL of the page is a
        known duplicate. A page fetched under its rule key has it already."""
        pairs: list[tuple[str, str]] = []
        why: dict[str, str] = {}
        for key, seq, rkey, applied in pages:
            pairs.append((key, RULE_KEY + rkey))
            why[RULE_KEY + rkey] = f"{_ids(applied)}@{seq}"
        if not pairs:
            return
        (new,) = self.seen.admit_pages([(pairs, 0)])
        if len(new) < len(pairs):
            self._shadow(pages, {n.key for n in new})
        if not new:
            return
        self.state.record_outcomes((n.seq, State.SKIPPED, None,
                                    f"learned rule key of a page fetched as {n.url}")
                                   for n in new)
        self.state.note_held(HeldRow(n.seq, host, _ALIAS, why[n.key], n.url, n.key, 0)
                             for n in new)
        self._count("aliases", len(new))

    def _shadow(self, pages: list[tuple[str, int, str, tuple[int, ...]]],
                recorded: set[str]) -> None:
        """Fetched pages whose new rule key another URL holds, still queued under it
        (admitted under an earlier rule's key that the new rule does not change): that
        URL is now a duplicate of the fetched page, and is decided at its turn like one
        (``_duplicate``) instead of being fetched as the key's own page. In memory: after
        a restart such a URL is fetched, as before the rule."""
        for key, seq, rkey, applied in pages:
            if not applied or RULE_KEY + rkey in recorded:
                continue
            holder = self.state.lookup_key(RULE_KEY + rkey)
            if holder is not None and holder["state"] == "queued" and holder["seq"] != seq \
                    and self._key(holder["url"]) != key:
                self._shadowed[int(holder["seq"])] = applied

    def _release(self, host: str, which: Callable[[HeldRow], bool]) -> None:
        """Held rows of ``host`` that ``which`` picks: their keys forgotten, the URLs
        a rule or a budget kept admitted again (through the rules as they now are)."""
        rows = [h for h in self.state.held(host=host) if which(h)]
        if not rows:
            return
        requeue: dict[int, list[tuple[str, str]]] = {}
        keys = []
        own: list[HeldRow] = []  # URLs admitted under a rule key: their own keys recorded
        for h in rows:
            if h.kind == _KEY:
                own.append(h)
                # one still queued (or in flight) keeps its rule key: forgetting that
                # would mark it skipped while the frontier still fetches it
                if (self.state.lookup_key(h.key) or {}).get("state") != "queued":
                    keys.append(h.key)
            elif h.kind == _ALIAS:
                keys.append(h.key)
            elif h.kind in (_SUPPRESSED, _BUDGET):
                keys.append(h.key)
                requeue.setdefault(h.depth, []).append((h.url, self._key(h.url)))
        self.seen.forget_keys(keys)
        self.state.drop_held(h.seq for h in rows)
        if own:  # a later link to one is seen: its URL is (or will be) fetched once
            (new,) = self.seen.admit_pages([([(h.url, self._key(h.url)) for h in own], 0)])
            seq_of = {h.url: h.seq for h in own}
            self.state.record_outcomes((n.seq, State.SKIPPED, None,
                                        f"fetched under a learned rule key as seq {seq_of[n.url]}")
                                       for n in new)
            self.state.note_held(HeldRow(n.seq, host, _ALIAS, f"@{seq_of[n.url]}", n.url, n.key,
                                         0) for n in new)
        if requeue and self.admit is not None:
            pages = sorted(requeue.items())
            self.admit([(pairs, depth) for depth, pairs in pages], [None] * len(pages))

    # -- links before the seen-test -----------------------------------------------------

    def _hosts_prefixes(self) -> tuple[str, ...]:
        if self._version != self.learner.version:
            self._version = self.learner.version
            self._prefixes = tuple(f"{scheme}://{host}/" for host in
                                   self.learner.hosts_with_rules()
                                   for scheme in ("http", "https"))
        return self._prefixes

    def rewrite(self, pages: Sequence[tuple[Pairs, int]]
                ) -> tuple[Sequence[tuple[Pairs, int]], Rewrites | None]:
        """Pages' links with the keys their hosts' rules rewrite replaced by rule keys,
        and what was rewritten (None: nothing, the pages are returned as they were)."""
        prefixes = self._hosts_prefixes()
        if not prefixes:
            return pages, None
        learner = self.learner
        out: list[tuple[Pairs, int]] = []
        rewrites: Rewrites = []
        any_ = False
        for pairs, depth in pages:
            done: dict[int, tuple[tuple[str, str], str, tuple[int, ...]]] = {}
            new_pairs = pairs
            for i, (url, key) in enumerate(pairs):
                if not key.startswith(prefixes):
                    continue
                rkey, ids = learner.rewrite(key.split("/", 3)[2], key)
                if not ids:
                    continue
                if new_pairs is pairs:
                    new_pairs = list(pairs)
                new_pairs[i] = (url, RULE_KEY + rkey)
                done[i] = ((url, key), RULE_KEY + rkey, ids)
            any_ = any_ or bool(done)
            out.append((new_pairs, depth))
            rewrites.append(done)
        return (out, rewrites) if any_ else (pages, None)

    def settle(self, pages: Sequence[tuple[Pairs, int]], per_page: list[list[NewUrl]],
               rewrites: Rewrites, sources: Sequence[str | None] | None) -> None:
        """After the seen-test of rewritten pages: rule-key admissions are recorded;
        a rewritten link whose rule key was seen is a duplicate: its own key goes
        through the seen-test, and a new one is recorded skipped (and held), or
        queued as a check (appended to its page's ``per_page`` list)."""
        seen, state = self.seen, self.state
        held: list[HeldRow] = []
        aliases: list[tuple[int, State, int | None, str | None]] = []
        raw_pages: list[tuple[Pairs, int]] = []
        raw_ids: list[dict[str, tuple[tuple[int, ...], str]]] = []
        for (pairs, depth), new, done in zip(pages, per_page, rewrites, strict=True):
            if not done:
                raw_pages.append(([], depth))
                raw_ids.append({})
                continue
            admitted = {(n.url, n.key) for n in new}
            by_key = {rk: ids for _, rk, ids in done.values()}
            own_of = {(pair[0], rk): pair[1] for pair, rk, _ in done.values()}
            kept = []
            for n in new:
                ids = by_key.get(n.key)
                if ids is None:
                    kept.append(n)
                    continue
                known = state.lookup_key(own_of[n.url, n.key])
                if known is None or known["state"] not in _TRIED:
                    held.append(HeldRow(n.seq, n.host, _KEY, _ids(ids), n.url, n.key, depth))
                    kept.append(n)
                else:  # its URL was admitted under its own key before the rules, and
                    # is fetched or queued: that admission stands, this one records it
                    held.append(HeldRow(n.seq, n.host, _ALIAS, f"{_ids(ids)}@{known['seq']}",
                                        n.url, n.key, 0))
                    aliases.append((n.seq, State.SKIPPED, None,
                                    f"learned rule key of a page fetched as {n.url}"))
            if len(kept) < len(new):
                new[:] = kept
            raw: Pairs = []
            ids_of: dict[str, tuple[tuple[int, ...], str]] = {}
            for i, (pair, rk, ids) in done.items():
                if (pairs[i][0], rk) not in admitted:
                    raw.append(pair)
                    ids_of[pair[1]] = (ids, rk)
            raw_pages.append((raw, depth))
            raw_ids.append(ids_of)
        if held:
            state.note_held(held)
        if aliases:
            state.record_outcomes(aliases)
            self._count("aliases", len(aliases))
        if not any(raw for raw, _ in raw_pages):
            return
        again = seen.admit_pages(raw_pages)
        if sources is not None:
            state.note_referrers((page[0].seq, page[-1].seq, source)
                                for page, source in zip(again, sources, strict=True) if page)
        held = []
        skipped = []
        for new, ids_of, queued, (_, depth) in zip(again, raw_ids, per_page, raw_pages,
                                                    strict=True):
            for n in new:
                ids, rk = ids_of[n.key]
                same = self._same_url(n.url, rk)
                if same is not None:  # this very URL holds the rule key: fetched once
                    held.append(HeldRow(n.seq, n.host, _ALIAS, f"@{same}", n.url, n.key, 0))
                    skipped.append((n.seq, State.SKIPPED, None, _same_reason(same)))
                elif self.learner.judge(n.host, ids, n.key, rk):
                    held.append(HeldRow(n.seq, n.host, _CHECK, _ids(ids), n.url, n.key, depth))
                    self._checks[n.seq] = n.host
                    queued.append(n)
                else:
                    held.append(HeldRow(n.seq, n.host, _SUPPRESSED, _ids(ids), n.url, n.key,
                                        depth))
                    skipped.append((n.seq, State.SKIPPED, None,
                                    f"duplicate under learned rule {_ids(ids)}"))
        state.note_held(held)
        if skipped:
            state.record_outcomes(skipped)
            for h in held:
                if h.kind == _SUPPRESSED:
                    self._count("suppressed", 1, h.host)
        self._save()

    # -- a queued URL's turn ------------------------------------------------------------

    async def turn(self, queued: QueuedUrl, decide: Callable[
                       [QueuedUrl, Callable[[QueuedUrl], str | None]], Awaitable[str | None]]
                   ) -> str | None:
        """A queued URL's turn: None to fetch it; ``LATER`` when it was put back behind
        its host; else why it is not fetched (``at_turn``, decided in the group commit
        by ``decide``, the committer's ``turn``: the URL is done in the frontier). The
        caller asks only of a ``busy`` host."""
        if self.later(queued):
            self.frontier.push_back(queued)
            return LATER
        if not self.may_hold(queued.host):
            return None
        try:
            reason = await decide(queued, self.at_turn)
        except BaseException:
            self.frontier.done(queued, requested=False, counted=False)
            raise
        if reason is not None:  # a duplicate under a learned rule, a closed budget
            self.frontier.done(queued, requested=False, counted=False)
        return reason

    def busy(self, host: str) -> bool:
        """Whether a queued URL of ``host`` may be put back or held at its turn (its host
        has open proposals, rules or a closed budget): one test for most URLs."""
        learner = self.learner
        return learner.proposing(host) or learner.has_rules(host) or \
            self.budgets.has_closed(host)

    def later(self, queued: QueuedUrl) -> bool:
        """Whether to put a queued URL back, once, behind the rest of its host: an open
        proposal with support would make it a duplicate of a page already fetched,
        and may be accepted meanwhile (then the URL is not fetched at all)."""
        if queued.seq in self._later or not self.learner.proposing(queued.host) or \
                not self.learner.speculative(queued.host, self._key(queued.url)):
            return False
        self._later.add(queued.seq)
        return True

    def may_hold(self, host: str) -> bool:
        """Whether a queued URL of ``host`` may not be fetched at its turn (its host has
        rules, or a closed budget): only then is ``at_turn`` asked."""
        return self.learner.has_rules(host) or self.budgets.has_closed(host)

    def at_turn(self, queued: QueuedUrl) -> str | None:
        """Before a queued URL is fetched: None to fetch it, or why it is not (the
        caller records it skipped in the same transaction: the group commit runs
        this). One its host's rules (as they are now) make a duplicate of a page
        fetched or queued is held, or fetched as a check; one whose budget is closed
        is held, or let through as a probe."""
        host = queued.host
        key = self._key(queued.url)
        if queued.seq not in self._checks and self.learner.has_rules(host):
            rkey, ids = self.learner.rewrite(host, key)
            reason = self._duplicate(queued, key, RULE_KEY + rkey, ids)
            if reason is not None:
                self._save()
                return reason
        verdict, pattern = self.budgets.decide(host, self._budget_key(host, key))
        if verdict == "hold":
            self.state.note_held([HeldRow(queued.seq, host, _BUDGET, pattern, queued.url,
                                          self._admitted(queued, key), queued.depth)])
            self._count("budget", 1, host)
        self._save()
        return f"budget: {pattern}" if verdict == "hold" else None

    def _same_url(self, url: str, rkey: str) -> int | None:
        """The seq of ``url`` itself admitted under the rule key ``rkey`` and fetched or
        queued there (then another admission of it is no duplicate: the same page),
        else None."""
        holder = self.state.lookup_key(rkey)
        if holder is None or holder["url"] != url or holder["state"] not in _TRIED:
            return None
        return int(holder["seq"])

    def _admitted(self, queued: QueuedUrl, key: str) -> str:
        """The key ``queued`` was admitted under: its own, or a rule key (a NewUrl says;
        a row paged in from the ledger has it in its held row)."""
        admitted = getattr(queued, "key", None)
        if admitted is not None:
            return admitted
        held = self.state.held_of(queued.seq)
        return held.key if held is not None and held.kind == _KEY else key

    def _duplicate(self, queued: QueuedUrl, key: str, rkey: str, ids: tuple[int, ...]
                   ) -> str | None:
        """A queued URL of a host with rules, whose rule key (its key as the rules now
        rewrite it; its own key, when they do not) is ``rkey``. If that rule key is new,
        it is recorded for this URL (an alias, skipped) and the URL fetched; if another
        URL holds it (a variant fetched first), this one is a duplicate under the rules
        that made the two keys one: held, or fetched as a check."""
        if getattr(queued, "key", None) == rkey:
            # queued under the rule key as it still is: its page, unless a page fetched
            # before the rule that made the two one holds it now (``_shadow``)
            shadowed = self._shadowed.pop(queued.seq, None)
            if shadowed is None:
                return None
            ids = tuple(sorted(set(ids) | {i for i in shadowed
                                           if self.learner.rule(i).state == "accepted"}))
            if not ids:
                return None
            return self._judged(queued, key, rkey, ids)
        (new,) = self.seen.admit_pages([([(queued.url, rkey)], queued.depth)])
        if new:
            n = new[0]
            self.state.record_outcomes([(n.seq, State.SKIPPED, None,
                                         f"learned rule key of a page fetched as {n.url}")])
            self.state.note_held([HeldRow(n.seq, n.host, _ALIAS, f"{_ids(ids)}@{queued.seq}",
                                          n.url, n.key, 0)])
            self._count("aliases", 1)
            return None
        holder = self.state.lookup_key(rkey)
        if holder is None or holder["seq"] == queued.seq:
            return None  # it is the rule key's own page
        if holder["url"] == queued.url and holder["state"] in _TRIED:
            return _same_reason(holder["seq"])  # this URL, admitted again under the key
        alias = self.state.held_of(holder["seq"])
        if alias is not None and alias.kind == _ALIAS and _parse_ids(alias.why)[1] == queued.seq:
            return None  # the rule key stands for this URL's own admission: its page
        if not ids:  # the rules left this URL as it is: blame those that made the holder's
            held = self.state.held_of(holder["seq"])
            made = _parse_ids(held.why)[0] if held and held.kind in (_KEY, _ALIAS) else ()
            ids = tuple(sorted(i for i in made if self.learner.rule(i).state == "accepted"))
            if not ids:
                return None
        reason = self._judged(queued, key, rkey, ids)
        if reason is None and holder["state"] == "queued":
            # fetched as a check while the rule key's own URL waits in the queue: that
            # one is now the duplicate, decided at its turn (``_shadow``)
            self._shadowed[int(holder["seq"])] = ids
        return reason

    def _judged(self, queued: QueuedUrl, key: str, rkey: str, ids: tuple[int, ...]) -> str | None:
        """A queued URL these rules make a duplicate of a page fetched or queued: held
        (the reason), or fetched as a check (None)."""
        admitted = self._admitted(queued, key)
        if self.learner.judge(queued.host, ids, key, rkey):
            self.state.note_held([HeldRow(queued.seq, queued.host, _CHECK, _ids(ids), queued.url,
                                         admitted, queued.depth)])
            self._checks[queued.seq] = queued.host
            return None
        self.state.note_held([HeldRow(queued.seq, queued.host, _SUPPRESSED, _ids(ids), queued.url,
                                      admitted, queued.depth)])
        self._count("suppressed", 1, queued.host)
        return f"duplicate under learned rule {_ids(ids)}"

    # -- figures ------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the summary and the dashboard show: rules, fetches saved, budgets."""
        rules = [{"id": st.id, "host": st.host, "state": st.state,
                  "description": st.rule.describe(), "suppressed": st.suppressed,
                  "checks": st.sent} for st in self.learner.rules()]
        out = learning_figures(rules, self.budgets.closed(), self.counts)
        out["events"] = list(self.events[-20:])
        return out


def learning_figures(rules: Sequence[dict[str, Any]], budgets: Sequence[dict[str, Any]],
                     counts: dict[str, Any], *, top: int = 20) -> dict[str, Any]:
    """The figures of a crawl's learning (the summary, ``stats``, the dashboard and the
    report show them): ``rules`` as ``{id, host, state, description, suppressed,
    checks}``, ``budgets`` as ``{host, pattern, held, probes}``, ``counts`` as kept under
    ``CrawlState.learn_counts``. A URL kept by two rules counts for each in ``by_rule``, once in
    ``saved_by_rules`` and ``by_host``."""
    accepted = [r for r in rules if r["state"] == "accepted"]
    hosts = counts.get("hosts") or {}
    by_host = sorted(({"host": h, "rules": sum(r["host"] == h for r in accepted),
                       "saved_by_rules": v[0], "saved_by_budgets": v[1]}
                      for h, v in hosts.items()),
                     key=lambda r: (-(r["saved_by_rules"] + r["saved_by_budgets"]), r["host"]))
    by_rule = sorted((r for r in rules if r["state"] in ("accepted", "revoked")),
                     key=lambda r: (-r["suppressed"], r["id"]))
    return {
        "rules": len(accepted),
        "revoked": sum(r["state"] == "revoked" for r in rules),
        "hosts": len({r["host"] for r in accepted}),
        "saved_by_rules": int(counts.get("suppressed", 0)),
        "saved_by_budgets": int(counts.get("budget", 0)),
        "checks": sum(r["checks"] for r in rules),
        "skipped": {k: v for k, v in counts.items() if k != "hosts"},
        "by_host": by_host[:top],
        "by_rule": [{k: r[k] for k in ("id", "host", "state", "description", "suppressed",
                                       "checks")} for r in by_rule[:top]],
        "budgets": list(budgets),
    }


def merge_figures(figures: Sequence[dict[str, Any]], *, top: int = 20) -> dict[str, Any]:
    """A fleet's ``learning_figures`` from its workers' (each learns its own hosts)."""
    out: dict[str, Any] = {k: sum(int(f.get(k) or 0) for f in figures)
                           for k in ("rules", "revoked", "hosts", "saved_by_rules",
                                     "saved_by_budgets", "checks")}
    skipped: dict[str, int] = {}
    for f in figures:
        for k, v in (f.get("skipped") or {}).items():
            skipped[k] = skipped.get(k, 0) + int(v)
    out["skipped"] = skipped
    out["by_host"] = sorted((h for f in figures for h in f.get("by_host", ())),
                            key=lambda h: -(h["saved_by_rules"] + h["saved_by_budgets"]))[:top]
    out["by_rule"] = sorted((r for f in figures for r in f.get("by_rule", ())),
                            key=lambda r: -r["suppressed"])[:top]
    out["budgets"] = [b for f in figures for b in f.get("budgets", ())]
    return out
