"""Trap budgets: a pattern whose fetches bring nothing new closes, probes less and less
often, reopens on a new page, and a closed level of a loop holds the deeper ones."""

from __future__ import annotations

from dedup.learn.novelty import FETCH, HOLD, HOST, PROBE, BudgetConfig, Budgets

H = "h.test"
U = "http://h.test"
CFG = BudgetConfig(window=5, host_window=50, grace=0, probe_first=2)


def _month(i: int) -> str:
    return f"{U}/calendar/{2000 + i // 12}/{i % 12 + 1:02d}"


def test_a_pattern_with_nothing_new_closes_and_probes_twice_as_far_each_time():
    b = Budgets(CFG)
    assert b.observe(H, _month(0), True) == []
    events = [e for i in range(1, 6) for e in b.observe(H, _month(i), False)]
    assert events == [("closed", H, "/calendar/*/*", 0)]
    assert b.has_closed(H) and not b.has_closed("other.test")
    verdicts = [b.decide(H, _month(100 + i))[0] for i in range(16)]
    # probes after 2, 4, 8 and 16 held URLs
    assert [i + 1 for i, v in enumerate(verdicts) if v == PROBE] == [2, 4, 8, 16]
    assert verdicts.count(HOLD) == 12
    assert b.decide(H, U + "/news/1")[0] == FETCH  # another pattern
    assert b.closed() == [{"host": H, "pattern": "/calendar/*/*", "held": 16, "probes": 4}]


def test_a_probe_with_new_content_reopens_the_budget_with_what_it_held():
    b = Budgets(CFG)
    for i in range(5):
        b.observe(H, _month(i), False)
    for i in range(3):
        b.decide(H, _month(50 + i))
    assert b.observe(H, _month(60), True) == [("reopened", H, "/calendar/*/*", 3)]
    assert b.decide(H, _month(61)) == (FETCH, "")
    for i in range(4):  # a fresh window: not closed again at once
        assert b.observe(H, _month(70 + i), False) == []


def test_some_new_content_keeps_a_pattern_open():
    b = Budgets(CFG)
    for i in range(40):
        assert b.observe(H, _month(i), i % 5 == 0) == []


def test_a_closed_level_of_a_loop_holds_the_deeper_levels_not_the_shallower():
    b = Budgets(CFG)
    for i in range(5):
        b.observe(H, f"{U}/help/a/b{i}/", False)
    assert b.decide(H, f"{U}/help/a/b/c/d/")[0] in (HOLD, PROBE)
    assert b.decide(H, f"{U}/help/x/")[0] == FETCH
    assert b.decide(H, f"{U}/help/a/b/?q=1")[0] == FETCH  # other parameters


def test_the_host_budget_holds_every_pattern():
    b = Budgets(BudgetConfig(window=100, host_window=6, probe_first=4))
    events = [e for i in range(6) for e in b.observe(H, f"{U}/p{i}/x", False)]
    assert ("closed", H, HOST, 0) in events
    assert b.decide(H, U + "/anything")[1] == HOST


def test_state_and_replay_restore_the_budgets():
    a = Budgets(CFG)
    for i in range(5):
        a.observe(H, _month(i), False)
    a.decide(H, _month(40))
    assert a.changed
    state = a.state()
    assert not a.changed
    b = Budgets(CFG)
    for i in range(5):
        b.replay(H, _month(i), False)
    b.restore(state)
    assert b.closed() == a.closed()
    assert [b.decide(H, _month(41 + i)) for i in range(5)] == \
        [a.decide(H, _month(41 + i)) for i in range(5)]


def test_a_pattern_that_brought_new_pages_must_stay_dry_longer_before_it_closes():
    """A calendar's months with events come mixed with empty ones: after 3 new pages,
    the 5-page window closes only after 5 + 3 x 2 dry pages."""
    b = Budgets(BudgetConfig(window=5, host_window=500, grace=2, probe_first=2))
    for i in range(3):
        b.observe(H, _month(i), True)
    closed_at = next(i for i in range(1, 50)
                     if b.observe(H, _month(10 + i), False))
    assert closed_at == 11


def test_a_parameter_with_nothing_new_in_every_section_closes_as_one_budget():
    """?lang on the articles of four sections, one at a time in turn (as a breadth-first
    crawl meets them): one window across the sections closes them all, while the
    translated docs, whose ?lang pages are new, and the articles themselves stay open."""
    b = Budgets(CFG)
    events = []
    for i in range(2):
        for sec in ("news", "food", "sport", "travel"):
            events += b.observe(H, f"{U}/{sec}/{i}/slug?lang=de", False)
            events += b.observe(H, f"{U}/docs/d{sec}{i}?lang=de", True)
            events += b.observe(H, f"{U}/{sec}/{i}/slug", True)
    # no section's own pattern saw a window of nothing new: the sections' one did
    assert events == [("closed", H, "/**/*/*?lang", 0)]
    assert b.decide(H, f"{U}/opinion/7/x?lang=fr") == (HOLD, "/**/*/*?lang")
    assert b.decide(H, f"{U}/docs/other?lang=fr") == (FETCH, "")
    assert b.decide(H, f"{U}/news/9/slug") == (FETCH, "")
    # a new page of the parameter in any section reopens it, with what it held
    assert b.observe(H, f"{U}/food/8/slug?lang=fr", True) == [
        ("reopened", H, "/**/*/*?lang", 1)]
