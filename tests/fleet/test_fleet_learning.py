"""Learned rules in a fleet: each worker learns the rules of the hosts it owns (links to
them are forwarded to it and admitted under its rules), with no sharing, and the fleet
finds every distinct page of the duplicate-URL site and ends by itself."""

from __future__ import annotations

import pytest

from crawler.wire.owner import owner_of
from dedup import UrlSeen, host_of
from tests.support.dupsite import build
from tests.support.fleetrun import Fleet, finish, fleet_files, worker_settings

pytestmark = pytest.mark.redis


async def test_each_worker_learns_the_rules_of_the_hosts_it_owns(tmp_path, redis_server):
    for seed in range(40):  # hosts on ports that give each of the 2 workers one
        site = build(seed=seed, hosts=[{"sid_query", "noise"}, {"jsessionid", "noise"}],
                     pages=120)
        async with site.serve() as running:
            owners = [owner_of(host_of(o + "/"), 2) for o in running.origins]
            if sorted(owners) != [0, 1]:
                continue
            seeds, config = fleet_files(tmp_path, running.seeds, worker_settings())
            fleet = Fleet(tmp_path, seeds, config, redis_server.url, 2)
            procs = [await fleet.start(i) for i in range(2)]
            results = await finish(procs)
            assert all(rc == 0 for rc, _ in results), results
            assert running.truth <= running.found()  # every distinct page, by some worker
            for i, d in enumerate(fleet.dirs):
                with UrlSeen(d, readonly=True) as seen:
                    rules = [r.rule for r in seen.records.learned_rules() if r.state == "accepted"]
                    hosts = {r.host for r in seen.records.learned_rules()}
                h = owners.index(i)  # the host worker i owns: 0 has ?sid=, 1 ;jsessionid=
                assert hosts == {running.origins[h].split("//")[1]}  # its own host's only
                want = ({"kind": "drop_params", "names": ["sid"]} if h == 0 else
                        {"kind": "path_param", "names": ["jsessionid"]})
                assert want in rules, rules
            return
    pytest.skip("no seed put the two hosts on ports owned by different workers")
