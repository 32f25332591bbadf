"""Host ownership: stable across processes and versions, balanced, resize-friendly."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from crawler.wire.owner import owner_function, owner_of


def murmur3_x86_32(data: bytes, seed: int = 0) -> int:
    """Reference MurmurHash3 x86 32-bit, written from the published algorithm."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed
    n = len(data) // 4 * 4
    for i in range(0, n, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[n:]
    k = 0
    for j, byte in enumerate(tail):
        k |= byte << (8 * j)
    if tail:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


# Pinned: changing the owner function silently re-homes every host of a running
# fleet (double crawls, lost politeness), so it must be a deliberate, visible change.
PINNED = {
    ("example.com", 4): 3,
    ("www.example.com", 8): 7,
    ("127.0.0.1:8080", 3): 2,
    ("xn--bcher-kva.example", 4): 2,
    ("a", 3): 2,
}


@pytest.mark.parametrize(("host", "workers"), sorted(PINNED))
def test_owner_values_are_pinned(host: str, workers: int) -> None:
    assert owner_of(host, workers) == PINNED[host, workers]


@pytest.mark.parametrize("host", ["", "a", "ab", "abc", "abcd", "example.com",
                                  "127.0.0.1:8080", "bücher.example"])
def test_owner_is_murmur3_x86_32_seed0_mod_w(host: str) -> None:
    for workers in (1, 2, 3, 7, 64):
        assert owner_of(host, workers) == murmur3_x86_32(host.lower().encode()) % workers


def test_owner_ignores_case() -> None:
    assert owner_of("Example.COM:8080", 5) == owner_of("example.com:8080", 5)


def test_owner_is_the_same_in_another_process_with_another_hash_seed() -> None:
    hosts = [f"host{i}.example:{8000 + i}" for i in range(50)]
    code = ("import sys; from crawler.wire.owner import owner_of; "
            "print(','.join(str(owner_of(h, 7)) for h in sys.argv[1:]))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, *hosts], capture_output=True, text=True,
                         check=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == ",".join(str(owner_of(h, 7)) for h in hosts)


def test_owners_are_balanced() -> None:
    hosts = [f"site{i}.example" for i in range(20_000)]
    for workers in (2, 3, 4, 8):
        counts = Counter(owner_of(h, workers) for h in hosts)
        assert set(counts) == set(range(workers))
        mean = len(hosts) / workers
        assert max(abs(c - mean) for c in counts.values()) < 0.05 * mean


def test_halving_and_doubling_move_hosts_pairwise() -> None:
    """The property dedup.admin.resizing relies on: W/2 merges i with i + W/2; 2W splits i into i,
    i+W."""
    for i in range(2_000):
        host = f"h{i}.example"
        o4 = owner_of(host, 4)
        assert owner_of(host, 2) == o4 % 2
        assert owner_of(host, 8) in (o4, o4 + 4)


def test_owner_function_and_bad_worker_counts() -> None:
    f = owner_function(6)
    assert [f(h) for h in ("a", "b", "c")] == [owner_of(h, 6) for h in ("a", "b", "c")]
    with pytest.raises(ValueError, match="workers"):
        owner_of("a", 0)
    with pytest.raises(ValueError, match="workers"):
        owner_function(0)


def test_a_host_with_a_lone_surrogate_gets_an_owner_not_a_crash() -> None:
    """mmh3 5.3 ends the process (SIGSEGV) when handed such a str itself."""
    code = ("from crawler.wire.owner import owner_of\n"
            "print(owner_of('\\udcffa.example', 3), owner_of('\\udcffa.example', 3))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    a, b = out.stdout.split()
    assert a == b and 0 <= int(a) < 3
