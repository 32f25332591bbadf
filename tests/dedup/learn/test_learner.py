"""The online rule learner on streams of (key, content class) as a crawl's commits
give them: what it accepts, rejects, checks and revokes, and that a restart restores it."""

from __future__ import annotations

import itertools

from dedup.learn.learner import ACCEPTED, REJECTED, REVOKED, LearnConfig, RuleLearner
from dedup.learn.rules import Rule

H = "h.test"
U = "http://h.test"


class Feed:
    """Pages fed to a learner in order, each with a fresh seq."""

    def __init__(self, learner: RuleLearner) -> None:
        self.learner = learner
        self.seq = itertools.count(1)
        self.events: list[tuple[str, Rule]] = []
        self.first: dict[int, str] = {}

    def page(self, path: str, cls: int, *, check: bool = False) -> bool:
        key = U + path
        events, explained = self.learner.observe(H, key, cls, next(self.seq), check=check,
                                                 first=self.first.setdefault(cls, key))
        self.events += [(kind, s.rule) for kind, s in events]
        return explained


def _state(learner: RuleLearner, rule: Rule) -> str | None:
    return next((s.state for s in learner.rules(H) if s.rule == rule), None)


SID = Rule("drop_params", names=("sid",))


def test_a_session_id_is_learned_from_enough_contents_and_rewrites_keys():
    learner = RuleLearner(LearnConfig(min_pairs=4, min_contents=3))
    feed = Feed(learner)
    for i in range(2):  # two contents, many pairs: not yet
        for sid in "abcd":
            feed.page(f"/doc/{i}?sid={sid}", i)
    assert _state(learner, SID) == "candidate"
    assert learner.rewrite(H, U + "/doc/9?sid=z") == (U + "/doc/9?sid=z", ())
    feed.page("/doc/2?sid=a", 2)
    feed.page("/doc/2?sid=b", 2)  # a third content
    assert (ACCEPTED, SID) in feed.events and _state(learner, SID) == ACCEPTED
    rid = next(s.id for s in learner.rules(H) if s.rule == SID)
    assert learner.rewrite(H, U + "/doc/9?a=1&sid=z") == (U + "/doc/9?a=1", (rid,))
    assert learner.rewrite("other.test", U + "/doc/9?sid=z")[1] == ()
    assert learner.has_rules(H) and learner.hosts_with_rules() == [H]


def test_one_counter_example_rejects_a_rule_for_good_on_its_host():
    """?lang= is ignored by most pages but translates the docs: never dropped."""
    learner = RuleLearner(LearnConfig(min_pairs=4, min_contents=3))
    feed = Feed(learner)
    lang = Rule("drop_params", names=("lang",))
    feed.page("/a", 1)
    feed.page("/a?lang=de", 1)  # proposes dropping lang
    feed.page("/docs/x", 2)
    feed.page("/docs/x?lang=de", 3)  # other content under the same key without lang
    assert (REJECTED, lang) in feed.events
    for i in range(10, 20):  # plenty of support afterwards: still rejected
        feed.page(f"/p/{i}", i)
        feed.page(f"/p/{i}?lang=de", i)
    assert _state(learner, lang) == REJECTED
    assert learner.rewrite(H, U + "/p/1?lang=fr")[1] == ()


def test_a_check_with_other_content_revokes_the_rules_that_made_the_keys_one():
    learner = RuleLearner(LearnConfig(min_pairs=3, min_contents=3))
    feed = Feed(learner)
    ref = Rule("drop_params", names=("ref",))
    for i in range(3):
        feed.page(f"/n/{i}", i)
        feed.page(f"/n/{i}?ref=x", i)
    for i in range(3, 6):
        feed.page(f"/n/{i}/", i)
        feed.page(f"/n/{i}", i)
    assert _state(learner, ref) == ACCEPTED
    assert _state(learner, Rule("trailing_slash")) == ACCEPTED
    assert _state(learner, Rule("default_param", names=("ref",), value="x")) == ACCEPTED
    feed.page("/special", 50)
    feed.page("/special/?ref=x", 51, check=True)  # fetched as a check: other content
    # the slash made the two keys one (without it they are two); ref is dropped by two
    # rules, so neither of them alone is to blame: they stay
    assert (REVOKED, Rule("trailing_slash")) in feed.events
    assert _state(learner, ref) == ACCEPTED
    revoked = next(s for s in learner.rules(H) if s.rule == Rule("trailing_slash"))
    assert revoked.counter == [U + "/special", U + "/special/?ref=x"]
    assert learner.rewrite(H, U + "/special/?ref=x")[0] == U + "/special/"
    feed.page("/other?ref=x", 60)
    feed.page("/other", 61, check=True)  # now ref is what made them one: both go
    assert (REVOKED, ref) in feed.events
    assert not learner.has_rules(H)


def test_a_check_that_agrees_counts_and_only_the_needed_rule_is_blamed():
    learner = RuleLearner(LearnConfig(min_pairs=3, min_contents=3))
    feed = Feed(learner)
    for i in range(3):
        feed.page(f"/n/{i}?sid={i}", i)
        feed.page(f"/n/{i}?sid=x{i}", i)
    for i in range(3, 6):
        feed.page(f"/m/{i}/", i)
        feed.page(f"/m/{i}", i)
    feed.page("/k?sid=1", 70)
    feed.page("/k?sid=2", 70, check=True)
    assert next(s for s in learner.rules(H) if s.rule == SID).checks == 1
    feed.page("/q/?sid=1", 80)
    feed.page("/q/?sid=2", 81, check=True)  # sid alone makes these one
    assert (REVOKED, SID) in feed.events
    assert _state(learner, Rule("trailing_slash")) == ACCEPTED


def test_judge_checks_each_new_place_and_value_once_and_counts_the_rest_saved():
    learner = RuleLearner(LearnConfig(min_pairs=3, min_contents=3, check_first=0,
                                      check_rate=0.0))
    feed = Feed(learner)
    lang = Rule("drop_params", names=("lang",))
    for i in range(3):
        feed.page(f"/news/{i}", i)
        feed.page(f"/news/{i}?lang=de", i)
    assert _state(learner, lang) == ACCEPTED
    rid = next(s.id for s in learner.rules(H) if s.rule == lang)
    news = U + "/news/7"
    # where the evidence was (news pages, lang=de): no check needed
    assert not learner.judge(H, [rid], news + "?lang=de", "~" + news)
    # a value the evidence did not have, then a place it did not: checked, once each
    assert learner.judge(H, [rid], news + "?lang=fr", "~" + news)
    assert not learner.judge(H, [rid], U + "/news/8?lang=fr", "~" + U + "/news/8")
    docs = U + "/docs/intro"
    assert learner.judge(H, [rid], docs + "?lang=de", "~" + docs)
    assert not learner.judge(H, [rid], docs + "?lang=de", "~" + docs)
    s = learner.rule(rid)
    assert (s.sent, s.suppressed) == (2, 3)


def test_a_session_like_parameter_is_checked_by_place_not_by_value():
    learner = RuleLearner(LearnConfig(min_pairs=3, min_contents=3, check_first=0,
                                      check_rate=0.0))
    feed = Feed(learner)
    for i in range(3):
        for sid in range(4):
            feed.page(f"/n/{i}?sid={i}{sid}", i)
    rid = next(s.id for s in learner.rules(H) if s.rule == SID)
    sent = [learner.judge(H, [rid], f"{U}/n/{i}?sid=v{i}", f"~{U}/n/{i}") for i in range(20)]
    assert sent == [False] * 20  # many values: the value is no news
    assert learner.judge(H, [rid], f"{U}/other/1?sid=q", f"~{U}/other/1")


def test_explained_duplicates_are_the_learners_not_the_budgets():
    learner = RuleLearner(LearnConfig(min_pairs=3, min_contents=3))
    feed = Feed(learner)
    assert not feed.page("/a", 1)  # new
    assert feed.page("/a?sid=2", 1)  # a duplicate a proposal covers
    assert not feed.page("/cal/2031/05", 9)
    assert not feed.page("/cal/2032/11", 9)  # a duplicate no rule would explain


def test_an_open_proposal_with_support_makes_a_duplicate_speculative():
    learner = RuleLearner(LearnConfig(min_pairs=4, min_contents=3))
    feed = Feed(learner)
    feed.page("/a?sid=1", 1)
    feed.page("/a?sid=2", 1)
    assert learner.speculative(H, U + "/a?sid=3")
    assert not learner.speculative(H, U + "/b?sid=3")  # nothing fetched under /b
    assert not learner.speculative("other.test", U + "/a?sid=3")


def test_a_restored_learner_decides_as_the_one_that_stopped():
    cfg = LearnConfig(min_pairs=4, min_contents=3, history=50)

    def stream(n: int):
        for i in range(n):
            yield f"/d/{i % 7}?sid={i}", i % 7
            yield f"/e/{i % 5}/", 100 + i % 5
            yield f"/e/{i % 5}", 100 + i % 5

    pages = list(stream(40))
    a = RuleLearner(cfg)
    fa = Feed(a)
    for path, cls in pages[:30]:
        fa.page(path, cls)
    rows = [s.row() for s in a.rules()]
    history = a.recent(H)
    b = RuleLearner(cfg)
    b.restore(rows)
    for key, seq, _, _ in history:
        cls = next(c for p, c in pages if U + p == key)
        b.replay(H, key, cls, seq)
    fb = Feed(b)
    fb.seq = itertools.count(31)
    fb.first = dict(fa.first)
    fa.events.clear()
    for path, cls in pages[30:]:
        fa.page(path, cls)
        fb.page(path, cls)
    assert fa.events == fb.events
    assert [s.row()[:4] for s in a.rules()] == [s.row()[:4] for s in b.rules()]
    assert a.rewrite(H, U + "/e/1/?sid=4") == b.rewrite(H, U + "/e/1/?sid=4")


def test_pairs_that_differ_in_two_ways_teach_both_rules_and_no_wrong_one():
    """Every duplicate link carries a referral tag AND a trailing slash: no pair differs
    in one way only, yet both rules are learned from those pairs; a parameter that
    changes the page somewhere is still rejected by a pair that one rule alone makes
    one."""
    learner = RuleLearner(LearnConfig(min_pairs=4, min_contents=3))
    feed = Feed(learner)
    ref, slash = Rule("drop_params", names=("ref",)), Rule("trailing_slash")
    for i in range(4):
        feed.page(f"/n/{i}", i)
        assert feed.page(f"/n/{i}/?ref=x{i}", i)  # a duplicate the proposals explain
    assert (ACCEPTED, ref) in feed.events and (ACCEPTED, slash) in feed.events
    assert learner.rewrite(H, U + "/n/9/?ref=z")[0] == U + "/n/9"
    page = Rule("drop_params", names=("page",))
    feed.page("/list", 20)
    feed.page("/list?page=2&sort=a", 20)  # supports "page ignored" jointly ...
    assert _state(learner, page) == "candidate"
    feed.page("/list?page=3", 21)  # ... until one pair contradicts it alone
    assert _state(learner, page) == REJECTED


def test_the_sample_checks_a_rule_key_once_whatever_the_values_its_urls_drop():
    learner = RuleLearner(LearnConfig(min_pairs=3, min_contents=3, check_first=0,
                                      check_rate=1.0))  # every rule key in the sample
    feed = Feed(learner)
    ref = Rule("drop_params", names=("ref",))
    for i in range(3):
        for tag in ("", "?ref=nav", "?ref=list"):
            feed.page(f"/n/{i}{tag}", i)
    rid = next(s.id for s in learner.rules(H) if s.rule == ref)
    page = U + "/n/7"
    assert learner.judge(H, [rid], page + "?ref=nav", "~" + page)
    # the same page linked with another tag the evidence covered: no second check
    assert not learner.judge(H, [rid], page + "?ref=list", "~" + page)
    assert learner.judge(H, [rid], U + "/n/8?ref=list", "~" + U + "/n/8")
