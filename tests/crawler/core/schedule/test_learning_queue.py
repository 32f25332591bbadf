"""Learning at a queued URL's turn, over a real state directory, admission and frontier
(crawler/core/schedule/learning.py): a URL queued under a rule key that a rule learned
later makes the key of a page fetched before it is a duplicate of that page, decided
at its turn, not fetched as the key's own page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from crawler.config.scope import Scope
from crawler.config.settings import LearnSettings
from crawler.core.schedule.admission import Admission
from crawler.core.schedule.frontier import Frontier
from crawler.core.schedule.learning import Learning
from crawler.core.schedule.politeness import Politeness
from crawler.core.state.crawlstate import CrawlState
from dedup import HELD_KINDS, State, UrlSeen

H = "h.test"
U = f"http://{H}"


@pytest.fixture
def crawl(tmp_path: Path) -> Iterator[tuple[UrlSeen, Admission, Learning]]:
    with UrlSeen(tmp_path / "state", capacity=10_000, shards=2) as seen:
        state = CrawlState(seen.records)
        frontier = Frontier(state, Politeness(per_host=100))
        admission = Admission(seen, state, Scope.for_seeds([U + "/"]), 0, {})
        learning = Learning(seen, state, LearnSettings(check_first=0, check_rate=0.0),
                            frontier)
        admission.learn_with(learning)
        yield seen, admission, learning


def admit(seen: UrlSeen, admission: Admission, learning: Learning, url: str) -> int:
    """``url`` found as a link and queued: its seq (in the ledger under its own key, or
    under the rule key its host's rules give it)."""
    key = seen.canonicalizer.resolve(url)[1]
    admission.admit_pages([([(url, key)], 1)])
    seen.commit()
    row = seen.records.lookup_key(key) \
        or seen.records.lookup_key("~" + learning.learner.rewrite(H, key)[0])
    assert row is not None and row["url"] == url
    return int(row["seq"])


def fetch(seen: UrlSeen, admission: Admission, learning: Learning, url: str,
          content: int) -> None:
    """``url`` admitted, fetched, and its page (of content ``content``) committed."""
    seq = admit(seen, admission, learning, url)
    seen.records.record_outcomes([(seq, State.FETCHED, 200, None)])
    learning.pages([(seq, H, url, seen.canonicalizer.resolve(url)[1], f"digest-{content}",
                     None)], now=1.0)
    seen.commit()


def test_a_url_queued_under_a_rule_key_that_a_later_rule_gives_a_fetched_page_is_its_duplicate(
        crawl):
    seen, admission, learning = crawl
    for i in range(4):  # "sid ignored" learned
        for sid in ("x", "y"):
            fetch(seen, admission, learning, f"{U}/a/{i}?sid={sid}{i}", i)
    assert [s.rule.kind for s in learning.learner.rules(H) if s.state == "accepted"] == \
        ["drop_params"]
    # a link queued under its rule key /a/7 ...
    queued = admit(seen, admission, learning, f"{U}/a/7?sid=q")
    assert seen.records.held_of(queued).kind == HELD_KINDS["key"]
    # ... and page /a/7/ fetched, which no rule yet makes /a/7
    fetch(seen, admission, learning, f"{U}/a/7/", 7)
    for i in range(10, 14):  # then "/path/ is /path" is learned
        fetch(seen, admission, learning, f"{U}/b/{i}", i)
        fetch(seen, admission, learning, f"{U}/b/{i}/", i)
    assert sorted(s.rule.kind for s in learning.learner.rules(H) if s.state == "accepted") \
        == ["drop_params", "trailing_slash"]
    item = SimpleNamespace(seq=queued, host=H, url=f"{U}/a/7?sid=q", depth=1,
                           key="~" + U + "/a/7")
    reason = learning.at_turn(item)
    # a duplicate of /a/7/: kept (the reason says which rules), or fetched as a check
    held = seen.records.held_of(queued)
    assert held.kind in (HELD_KINDS["suppressed"], HELD_KINDS["check"])
    assert (reason is None) == (held.kind == HELD_KINDS["check"])


def test_a_page_fetched_as_a_check_of_a_queued_rule_key_makes_that_url_its_duplicate(crawl):
    seen, admission, learning = crawl
    for i in range(4):
        for sid in ("x", "y"):
            fetch(seen, admission, learning, f"{U}/a/{i}?sid={sid}{i}", i)
    variant = admit(seen, admission, learning, f"{U}/a/7?sid=q")  # under the rule key /a/7
    page = admit(seen, admission, learning, f"{U}/a/7")  # under its own key
    # /a/7's turn comes first: the rule key's URL is still queued, so /a/7 is judged its
    # duplicate, and fetched as a check (its place, /a/<num> without sid, is new to the
    # rule's evidence) ...
    first = learning.at_turn(SimpleNamespace(seq=page, host=H, url=f"{U}/a/7", depth=1,
                                             key=U + "/a/7"))
    assert first is None and seen.records.held_of(page).kind == HELD_KINDS["check"]
    # ... so the variant waiting under the rule key is now the duplicate: decided at its
    # turn, not fetched as the rule key's own page
    learning.at_turn(SimpleNamespace(seq=variant, host=H, url=f"{U}/a/7?sid=q", depth=1,
                                     key="~" + U + "/a/7"))
    assert seen.records.held_of(variant).kind in (HELD_KINDS["suppressed"], HELD_KINDS["check"])
