"""Snapshot files: one Bloom filter shard per file, versioned, checksummed, written atomically.

This module is the file codec only: a header, raw layer bytes and checksums. It
knows nothing of filters; :mod:`dedup.filter.bloom` hands it the layers' buffers to
write, or a function that allocates them once the header has been validated.

Layout (all integers little-endian)::

    header      144 bytes  magic b"BLOOMCRL", format version, header size, shard
                           index/count, hash algorithm id, seed, growth, layer count,
                           capacity, error rate, element count, ledger high-water mark,
                           creation time, crawl id (64 bytes, UTF-8, NUL-padded), CRC32
    layer table 24 bytes per layer (m, k, count) + CRC32
    bits        m/8 bytes per layer, oldest layer first
    trailer     CRC32 of every byte before it

The header and the layer table carry their own checksums and every field is
range-checked, and the file size must equal what they imply, all before a single
bit buffer is allocated: a truncated, corrupted or hostile file yields a
one-line :class:`SnapshotError`, never a huge allocation or a silently wrong
filter.

Writes go to a temporary file in the same folder (fsynced, then renamed over
the target, then the folder fsynced), so a crash leaves the previous snapshot
intact. Bits are copied out in 4 MiB chunks and the checksum covers exactly the
bytes written, so a snapshot thread can save a shard while one other thread
keeps adding keys (the ledger high-water mark covers the bits it missed).
"""

from __future__ import annotations

import math
import os
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from dedup.base.atomic import atomic_write
from dedup.base.errors import GeometryMismatch, SnapshotError
from dedup.filter.geometry import MAX_K, MAX_LAYERS, MAX_M, MAX_SHARDS, Geometry, layer_geometry
from dedup.url.fingerprint import HASH_ALGO

__all__ = ["HEADER_SIZE", "GeometryMismatch", "SnapshotError", "SnapshotHeader", "read_file",
           "read_header", "write_file"]

MAGIC = b"BLOOMCRL"
FORMAT_VERSION = 1
CRAWL_ID_BYTES = 64
IO_CHUNK = 4 << 20
HASH_ALGOS = {1: HASH_ALGO}
_ALGO_IDS = {name: i for i, name in HASH_ALGOS.items()}

_HEAD = struct.Struct("<8sHHIIIIIIQdQqd64s")
_CRC = struct.Struct("<I")
_LAYER = struct.Struct("<QQQ")
HEADER_SIZE = _HEAD.size + _CRC.size

PathArg = str | PathLike[str]


@dataclass(frozen=True)
class SnapshotHeader:
    version: int
    shard_index: int
    shard_count: int
    hash_algo: str
    seed: int
    capacity: int
    error_rate: float
    growth: int
    layers: tuple[tuple[int, int, int], ...]  # (m, k, count) per layer
    element_count: int
    hwm: int
    crawl_id: str
    created: float

    @property
    def file_size(self) -> int:
        """The exact size of a file with this header."""
        return (HEADER_SIZE + len(self.layers) * _LAYER.size + _CRC.size
                + sum(m // 8 for m, _, _ in self.layers) + _CRC.size)

    def shape(self) -> dict[str, Any]:
        """What another shard file must share with this one to be ORed with it."""
        return {"hash": self.hash_algo, "seed": self.seed, "shard_count": self.shard_count,
                "shard_index": self.shard_index, "m": self.layers[0][0],
                "k": self.layers[0][1], "capacity": self.capacity,
                "error_rate": self.error_rate, "growth": self.growth}


# -- writing -------------------------------------------------------------------------------


def write_file(path: PathArg, buffers: Sequence[np.ndarray], *,
               table: Sequence[tuple[int, int, int]], seed: int, capacity: int,
               error_rate: float, growth: int, shard_index: int = 0, shard_count: int = 1,
               hwm: int = 0, crawl_id: str = "") -> SnapshotHeader:
    """Write one filter's layers atomically: ``buffers[j]`` holds layer j's ``m/8``
    bytes and ``table[j]`` its ``(m, k, count)``. Returns the header written."""
    if not (isinstance(shard_count, int) and 1 <= shard_count <= MAX_SHARDS):
        raise ValueError(f"shard_count must be 1..{MAX_SHARDS}, not {shard_count!r}")
    if not (isinstance(shard_index, int) and 0 <= shard_index < shard_count):
        raise ValueError(f"shard_index must be 0..{shard_count - 1}, not {shard_index!r}")
    if not (isinstance(hwm, int) and 0 <= hwm < 2**63):
        raise ValueError(f"hwm must be a non-negative 64-bit integer, not {hwm!r}")
    _encode_crawl_id(crawl_id)
    table = tuple(tuple(row) for row in table)
    header = SnapshotHeader(
        version=FORMAT_VERSION, shard_index=shard_index, shard_count=shard_count,
        hash_algo=HASH_ALGO, seed=seed, capacity=capacity, error_rate=error_rate,
        growth=growth, layers=table, element_count=sum(c for _, _, c in table), hwm=hwm,
        crawl_id=crawl_id, created=time.time())
    prefix = _pack_header(header) + _pack_table(table)

    def body(f: BinaryIO) -> None:
        crc = zlib.crc32(prefix)
        f.write(prefix)
        for buf in buffers:
            mv = memoryview(buf).cast("B")
            for a in range(0, mv.nbytes, IO_CHUNK):
                chunk = bytes(mv[a:a + IO_CHUNK])  # one copy, so the CRC matches what is written
                crc = zlib.crc32(chunk, crc)
                f.write(chunk)
        f.write(_CRC.pack(crc))

    atomic_write(Path(path), body)
    return header


def _pack_header(h: SnapshotHeader) -> bytes:
    raw = _HEAD.pack(MAGIC, h.version, HEADER_SIZE, h.shard_index, h.shard_count,
                     _ALGO_IDS[h.hash_algo], h.seed, h.growth, len(h.layers), h.capacity,
                     h.error_rate, h.element_count, h.hwm, h.created,
                     _encode_crawl_id(h.crawl_id))
    return raw + _CRC.pack(zlib.crc32(raw))


def _pack_table(table: Sequence[tuple[int, int, int]]) -> bytes:
    raw = b"".join(_LAYER.pack(*row) for row in table)
    return raw + _CRC.pack(zlib.crc32(raw))


def _encode_crawl_id(crawl_id: str) -> bytes:
    if not isinstance(crawl_id, str):
        raise ValueError(f"crawl_id must be a string, not {crawl_id!r}")
    raw = crawl_id.encode("utf-8")
    if len(raw) > CRAWL_ID_BYTES or b"\0" in raw:
        raise ValueError(f"crawl_id must be at most {CRAWL_ID_BYTES} UTF-8 bytes without NUL: "
                         f"{crawl_id!r}")
    return raw


# -- reading -------------------------------------------------------------------------------


def read_header(path: PathArg) -> SnapshotHeader:
    """Validate a snapshot's header, layer table and size without reading its bits."""
    with open(path, "rb") as f:
        return _read_header(f, os.fspath(path))[0]


def read_file(path: PathArg, buffers_for: Callable[[SnapshotHeader], Sequence[np.ndarray]],
              *, crawl_id: str | None = None) -> SnapshotHeader:
    """Validate a snapshot's header, then read its layers into the writable buffers
    ``buffers_for(header)`` returns (one per layer, ``m/8`` bytes each) and verify the
    checksum. With ``crawl_id``, a file of another crawl is refused."""
    name = os.fspath(path)
    with open(path, "rb") as f:
        header, prefix = _read_header(f, name)
        if crawl_id is not None and header.crawl_id != crawl_id:
            raise SnapshotError(f"{name}: belongs to crawl {header.crawl_id!r}, "
                                f"not {crawl_id!r}")
        crc = zlib.crc32(prefix)
        for j, buf in enumerate(buffers_for(header)):
            mv = memoryview(buf).cast("B")
            for a in range(0, mv.nbytes, IO_CHUNK):
                part = mv[a:a + IO_CHUNK]
                if f.readinto(part) != part.nbytes:
                    raise SnapshotError(f"{name}: truncated while reading layer {j}")
                crc = zlib.crc32(part, crc)
        stored = f.read(_CRC.size)
        if len(stored) != _CRC.size:
            raise SnapshotError(f"{name}: truncated before its checksum")
        if _CRC.unpack(stored)[0] != crc:
            raise SnapshotError(f"{name}: checksum mismatch: the file is corrupted")
    return header


def _read_header(f: BinaryIO, name: str) -> tuple[SnapshotHeader, bytes]:
    """Parse and check everything before the bits; returns the header and its raw bytes."""
    size = os.fstat(f.fileno()).st_size
    raw = f.read(HEADER_SIZE)
    if raw[:len(MAGIC)] != MAGIC and not (len(raw) < len(MAGIC) and MAGIC.startswith(raw)):
        raise SnapshotError(f"{name}: not a bloomcrawl snapshot (bad magic)")
    if len(raw) < HEADER_SIZE:
        raise SnapshotError(f"{name}: truncated: expected at least {HEADER_SIZE} bytes, "
                            f"found {size}")
    (_, version, header_size, shard_index, shard_count, algo, seed, growth, nlayers,
     capacity, error_rate, element_count, hwm, created, crawl) = _HEAD.unpack_from(raw)
    if version != FORMAT_VERSION:
        newer = " (written by a newer bloomcrawl)" if version > FORMAT_VERSION else ""
        raise SnapshotError(f"{name}: unsupported format version {version}{newer}; "
                            f"this build reads version {FORMAT_VERSION}")
    if header_size != HEADER_SIZE:
        raise SnapshotError(f"{name}: bad header size {header_size} (expected {HEADER_SIZE})")
    if _CRC.unpack_from(raw, _HEAD.size)[0] != zlib.crc32(raw[:_HEAD.size]):
        raise SnapshotError(f"{name}: header checksum mismatch: the header is corrupted")

    def bad(what: str) -> SnapshotError:
        return SnapshotError(f"{name}: invalid header: {what}")

    if not 1 <= shard_count <= MAX_SHARDS:
        raise bad(f"shard count {shard_count} not in 1..{MAX_SHARDS}")
    if not shard_index < shard_count:
        raise bad(f"shard index {shard_index} not below shard count {shard_count}")
    if algo not in HASH_ALGOS:
        raise bad(f"unknown hash algorithm id {algo}")
    if not 1 <= nlayers <= MAX_LAYERS:
        raise bad(f"layer count {nlayers} not in 1..{MAX_LAYERS}")
    if not math.isfinite(error_rate):
        raise bad(f"error rate {error_rate}")
    try:
        Geometry(capacity=capacity, error_rate=error_rate, shards=shard_count, seed=seed,
                 growth=growth, hash=HASH_ALGOS[algo])
    except ValueError as exc:
        raise bad(str(exc)) from None
    if hwm < 0:
        raise bad(f"negative high-water mark {hwm}")
    if not math.isfinite(created):
        raise bad(f"creation time {created}")
    try:
        crawl_id = crawl.rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        raise bad("crawl id is not UTF-8") from None

    table_size = nlayers * _LAYER.size + _CRC.size
    table_raw = f.read(table_size)
    if len(table_raw) < table_size:
        raise SnapshotError(f"{name}: truncated: expected at least "
                            f"{HEADER_SIZE + table_size} bytes, found {size}")
    if _CRC.unpack_from(table_raw, table_size - _CRC.size)[0] != zlib.crc32(
            table_raw[:-_CRC.size]):
        raise SnapshotError(f"{name}: layer table checksum mismatch: the file is corrupted")
    layers = []
    for j in range(nlayers):
        m, k, count = _LAYER.unpack_from(table_raw, j * _LAYER.size)
        if not (0 < m <= MAX_M and m % 64 == 0):
            raise bad(f"layer {j}: m {m} is not a positive multiple of 64 up to 2**40")
        if not 1 <= k <= MAX_K:
            raise bad(f"layer {j}: k {k} not in 1..{MAX_K}")
        if count >= 2**62:
            raise bad(f"layer {j}: count {count}")
        try:
            geo = layer_geometry(capacity, error_rate, growth, j)
        except ValueError as exc:
            raise bad(f"layer {j}: {exc}") from None
        if (m, k) != (geo.m, geo.k):
            raise bad(f"layer {j}: m={m} k={k} do not match capacity {capacity}, error rate "
                      f"{error_rate}, growth {growth} (expected m={geo.m} k={geo.k})")
        layers.append((m, k, count))
    if element_count != sum(c for _, _, c in layers):
        raise bad(f"element count {element_count} is not the sum of the layer counts")

    header = SnapshotHeader(
        version=version, shard_index=shard_index, shard_count=shard_count,
        hash_algo=HASH_ALGOS[algo], seed=seed, capacity=capacity, error_rate=error_rate,
        growth=growth, layers=tuple(layers), element_count=element_count, hwm=hwm,
        crawl_id=crawl_id, created=created)
    if size != header.file_size:
        what = "truncated" if size < header.file_size else "trailing bytes"
        raise SnapshotError(f"{name}: {what}: expected {header.file_size} bytes, found {size}")
    return header, raw + table_raw
