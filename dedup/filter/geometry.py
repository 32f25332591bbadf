"""A filter's geometry: what it was sized for and how it hashes, validated once.

Two filters can be ORed (merged across workers, resized, reopened) only when their
geometry is identical, so the geometry is one frozen value recorded in the
ledger's metadata and in every snapshot header, and compared field by field by
one function that names the first difference.

Layer sizing lives here too: a layer's ``m`` and ``k`` follow from the geometry
alone, and a geometry is valid only if its first layer can be built.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dedup.base.errors import GeometryMismatch
from dedup.url.fingerprint import HASH_ALGO

TIGHTENING = 0.2          # error-rate ratio between consecutive layers
MAX_LAYERS = 64
MAX_K = 64
MAX_M = 2**40             # bits in one layer of one filter (128 GiB)
MAX_CAPACITY = 2**48
MAX_GROWTH = 1024
MAX_SEED = 2**32 - 1      # mmh3 seeds are uint32
MAX_SHARDS = 65536

_LN2 = math.log(2)


@dataclass(frozen=True, slots=True)
class LayerGeometry:
    """Size of layer ``index`` of a filter: it holds ``capacity`` keys at ``error_rate``."""

    index: int
    capacity: int
    error_rate: float
    m: int
    k: int


def layer_geometry(capacity: int, error_rate: float, growth: int, index: int) -> LayerGeometry:
    """Geometry of layer ``index``: ``m = ceil(-n ln p / ln2^2)`` rounded up to whole uint64
    words, ``k = round(m/n ln 2)`` clamped to 1..64. Raises ValueError past ``MAX_M`` bits."""
    n = capacity * growth**index
    p = error_rate * (1 - TIGHTENING) * TIGHTENING**index
    bits = math.ceil(-n * math.log(p) / _LN2**2) if p > 0 else math.inf
    if not bits <= MAX_M:
        raise ValueError(f"layer {index} of a filter for {capacity} keys at error rate "
                         f"{error_rate} would need more than 2**40 bits")
    m = max(64, -(-bits // 64) * 64)
    k = min(MAX_K, max(1, round(m / n * _LN2)))
    return LayerGeometry(index, n, p, m, k)


def is_int(x: Any) -> bool:
    """An integer that is not a bool (``True`` is an ``int`` to Python, not to a user)."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


@dataclass(frozen=True, slots=True)
class Geometry:
    """Capacity, target error rate, shard count, hash seed, growth factor and hash
    algorithm of a (sharded) filter. Constructing one validates it (ValueError)."""

    capacity: int = 10_000_000
    error_rate: float = 0.01
    shards: int = 64
    seed: int = 0
    growth: int = 2
    hash: str = HASH_ALGO

    def __post_init__(self) -> None:
        if not (is_int(self.capacity) and 1 <= self.capacity <= MAX_CAPACITY):
            raise ValueError(f"capacity must be an integer in 1..2**48, not {self.capacity!r}")
        if not (isinstance(self.error_rate, numbers.Real) and 0 < self.error_rate < 1):
            raise ValueError(f"error_rate must be between 0 and 1, not {self.error_rate!r}")
        if not (is_int(self.shards) and 1 <= self.shards <= MAX_SHARDS):
            raise ValueError(f"shards must be an integer in 1..{MAX_SHARDS}, "
                             f"not {self.shards!r}")
        if not (is_int(self.seed) and 0 <= self.seed <= MAX_SEED):
            raise ValueError(f"seed must be an integer in 0..2**32-1, not {self.seed!r}")
        if not (is_int(self.growth) and 1 <= self.growth <= MAX_GROWTH):
            raise ValueError(f"growth must be an integer in 1..1024, not {self.growth!r}")
        if self.hash != HASH_ALGO:
            raise ValueError(f"unknown hash algorithm {self.hash!r} (this build has "
                             f"{HASH_ALGO})")
        layer_geometry(int(self.capacity), float(self.error_rate), int(self.growth), 0)

    def to_dict(self) -> dict[str, Any]:
        """The form recorded in the ledger's metadata (and sent to a fleet)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Geometry:
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown geometry field(s) {sorted(unknown)}")
        return cls(**d)


def first_difference(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> str | None:
    """The first field (in ``ours``'s order, then ``theirs``'s extra ones) whose values differ."""
    for field in [*ours, *(f for f in theirs if f not in ours)]:
        if ours.get(field) != theirs.get(field):
            return field
    return None


def require_same(ours: Mapping[str, Any], theirs: Mapping[str, Any], where: str = "") -> None:
    """Raise GeometryMismatch naming the first field on which the two differ."""
    field = first_difference(ours, theirs)
    if field is not None:
        raise GeometryMismatch(f"{where}{field} differs: {ours.get(field)!r} != "
                               f"{theirs.get(field)!r}")
