"""Figures that move with their hosts: a split's two parts add up to the whole, a merge
adds its parts up, and per-host figures go to their host's owner."""

from __future__ import annotations

from crawler.core.schedule.figures import Figures, merged, split
from crawler.core.schedule.learning import MAX_HOSTS, OTHER_HOSTS


def whole() -> Figures:
    return Figures(
        totals={"links": 100, "new": 60, "repeats": 40},
        sitemaps={"fetched": 3, "with_errors": 1, "failed": 1, "skipped": 0, "urls": 50,
                  "new": 30},
        learn_counts={"suppressed": 20, "budget": 9, "aliases": 4,
                      "hosts": {"a": [8, 2], "b": [5, 5], OTHER_HOSTS: [7, 2]}},
        learn_budgets={"a /cal/*": [3, 1, 10], "b /f/*": [4, 0, 20]})


def test_a_split_gives_each_host_to_its_owner_and_adds_up_to_the_whole():
    f = whole()
    first, second = split(f, lambda host: host == "b", {"fetched": 1, "failed": 1})
    assert second.learn_counts == {"suppressed": 5, "budget": 5, "aliases": 0,
                                   "hosts": {"b": [5, 5]}}
    assert first.learn_counts["hosts"] == {"a": [8, 2], OTHER_HOSTS: [7, 2]}
    assert second.learn_budgets == {"b /f/*": [4, 0, 20]}
    assert first.learn_budgets == {"a /cal/*": [3, 1, 10]}
    assert second.sitemaps == {"fetched": 1, "failed": 1, "skipped": 0}
    assert second.totals == {}  # figures of no host stay with the first
    assert merged([first, second]) == f


def test_a_merge_keeps_the_per_host_table_bounded():
    parts = [Figures(learn_counts={"suppressed": 1, "budget": 0, "aliases": 0,
                                   "hosts": {f"h{i}-{j}": [1, 0] for j in range(MAX_HOSTS)}})
             for i in range(2)]
    hosts = merged(parts).learn_counts["hosts"]
    assert len(hosts) == MAX_HOSTS + 1
    assert hosts[OTHER_HOSTS] == [MAX_HOSTS, 0]
    assert sum(v[0] for v in hosts.values()) == 2 * MAX_HOSTS
