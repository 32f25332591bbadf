"""Fingerprints: layout of the 128-bit hash, zero-copy halves, stable shard routing."""

from __future__ import annotations

import os
import subprocess
import sys

import mmh3
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dedup.url.fingerprint import fingerprint, fingerprint_many, halves, shard_of

keys_st = st.lists(st.one_of(st.text(max_size=40), st.binary(max_size=40)), max_size=50)


def test_fingerprint_is_murmur3_x64_128_h1_then_h2_little_endian():
    for key, seed in [("https://example.com/", 0), ("", 0), ("é/ü", 7), (b"\x00\xff", 2**32 - 1)]:
        fp = fingerprint(key, seed)
        assert len(fp) == 16
        value = mmh3.hash128(key, seed, x64arch=True, signed=False)  # h2 << 64 | h1
        assert int.from_bytes(fp[:8], "little") == value & (2**64 - 1)
        assert int.from_bytes(fp[8:], "little") == value >> 64


def test_str_key_hashes_as_its_utf8_bytes():
    assert fingerprint("café") == fingerprint("café".encode())


def test_seed_changes_the_fingerprint():
    assert fingerprint("a", 0) != fingerprint("a", 1)
    with pytest.raises(ValueError, match="seed is out of range"):
        fingerprint("a", -1)


@given(keys_st, st.integers(0, 2**32 - 1))
def test_fingerprint_many_is_the_concatenation(keys, seed):
    assert fingerprint_many(keys, seed) == b"".join(fingerprint(k, seed) for k in keys)
    assert fingerprint_many(iter(keys), seed) == fingerprint_many(keys, seed)


@given(keys_st)
def test_halves_are_h1_h2_of_each_fingerprint(keys):
    fps = fingerprint_many(keys)
    h = halves(fps)
    assert h.shape == (len(keys), 2) and h.dtype == np.uint64
    for row, key in zip(h.tolist(), keys, strict=True):
        fp = fingerprint(key)
        assert row == [int.from_bytes(fp[:8], "little"), int.from_bytes(fp[8:], "little")]


def test_halves_is_zero_copy():
    buf = bytearray(fingerprint_many(["a", "b", "c"]))
    h = halves(buf)
    assert np.shares_memory(h, np.frombuffer(buf, dtype=np.uint8))
    buf[0] ^= 0xFF
    assert h[0, 0] == int.from_bytes(buf[:8], "little")
    assert halves(memoryview(buf)[16:]).shape == (2, 2)
    assert halves(b"").shape == (0, 2)


def test_halves_rejects_partial_fingerprints():
    with pytest.raises(ValueError, match="multiple of 16"):
        halves(b"x" * 17)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=100), st.integers(1, 65536))
def test_shard_of_is_multiply_shift_of_the_top_32_bits(values, shards):
    got = shard_of(np.array(values, dtype=np.uint64), shards)
    assert got.dtype == np.intp
    assert got.tolist() == [((v >> 32) * shards) >> 32 for v in values]
    assert all(0 <= s < shards for s in got.tolist())


def test_shard_of_is_stable():
    # On-disk contract: these keys live in these shard files forever.
    h = halves(fingerprint_many(["https://example.com/", "https://example.org/a?b=c"]))
    assert shard_of(h[:, 0], 64).tolist() == [45, 2]
    assert shard_of(h[:, 0], 1).tolist() == [0, 0]


def test_shard_of_spreads_keys_evenly():
    h = halves(fingerprint_many(f"https://site{i}.example/page" for i in range(64_000)))
    counts = np.bincount(shard_of(h[:, 0], 64), minlength=64)
    assert counts.min() > 800 and counts.max() < 1200  # mean 1000, sd ~31


@pytest.mark.parametrize("shards", [0, 65537])
def test_shard_of_rejects_bad_shard_counts(shards):
    with pytest.raises(ValueError, match=r"shards must be 1\.\.65536"):
        shard_of(np.zeros(1, dtype=np.uint64), shards)


@pytest.mark.parametrize("env", [{}, {"BLOOMCRAWL_NO_KERNEL": "1"}])
def test_a_lone_surrogate_is_an_error_not_a_crash(env):
    """mmh3 5.3 ends the process (SIGSEGV) on a str holding a lone surrogate, as a
    command-line URL with undecodable bytes becomes; both paths raise instead."""
    code = ("from dedup.url.fingerprint import fingerprint as f, fingerprint_many as fm\n"
            "for call in (lambda: f('\\udcff'), lambda: fm(['a', '\\ud800'])):\n"
            "    try:\n        call()\n    except UnicodeEncodeError:\n"
            "        print('refused')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["refused", "refused"]
