"""Merge and split state directories: the fleet's seen-set, and changing its size.

Every worker of a fleet has the same filter geometry, so:

- **merge** (``bloomcrawl merge``, and W -> W/2): OR the shard files and take the
  union of the ledgers. The merged filter is, bit for bit, the filter of every
  URL any input saw.
- **split** (W -> 2W): each new owner gets a copy of the whole filter (a superset
  of its URLs: extra bits only cost a ledger look-up, never a lost URL) and the
  ledger rows of the hosts it now owns.

Owners are ``hash(host) mod W`` (``crawler.owner``), so halving merges worker
``i`` with ``i + W/2`` and doubling splits worker ``i`` into ``i`` and ``i + W``.
This module takes the owner function as a parameter and never imports crawler.

Ledger sequence numbers are what make crash recovery work (a shard snapshot
covers rows up to its high-water mark; later rows are replayed), so each output
is built to keep that invariant:

- merge: the output ledger is a copy of the first input's (its rows keep their
  numbers, its metadata is kept whole), the other inputs' rows are appended
  (new numbers), and every merged shard is written with the output ledger's
  high-water mark. That is correct because each input was snapshotted at its
  own ledger's mark first, so the OR holds the bits of every row in the output
  ledger. The inputs' marks themselves would be wrong here: a mark from an input
  with many forgotten rows can exceed the output's, and rows numbered in
  between later would never be replayed after a crash.
- split: each output ledger is built, not pruned (the journal is append-only):
  a new ledger that imports the input's metadata and the live rows of the hosts
  it owns, under new numbers, and every copied shard file is written with that
  output ledger's own high-water mark, for the same reason as in a merge.

Inputs are opened as ``UrlSeen`` one at a time (that takes their lock, so a
running worker's directory is refused, replays any ledger rows the snapshots
missed, and brings their snapshots up to date). Outputs are built in a
temporary directory beside the target and renamed into place: a failure leaves
no half-written output.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dedup.base.atomic import fsync_dir
from dedup.base.errors import GeometryMismatch
from dedup.filter.bloom import read_snapshot, write_snapshot
from dedup.filter.geometry import require_same
from dedup.filter.shards import ShardedBloom, merge_files
from dedup.store.ledger import Ledger
from dedup.store.seen import UrlSeen
from dedup.store.statedir import ledger_path, require_state_dir, shards_dir

PathArg = str | os.PathLike[str]
IMPORT_CHUNK = 50_000


@dataclass(frozen=True, slots=True)
class ResizedState:
    """What one output directory received."""

    path: Path
    rows: int         # ledger rows in the output
    duplicates: int   # rows offered twice (same fingerprint): the first input's row was kept
    hwm: int          # the output ledger's high-water mark, recorded in every shard


# -- checks -------------------------------------------------------------------------------


def _identity(state_dir: Path) -> dict[str, Any]:
    with Ledger(ledger_path(require_state_dir(state_dir)), readonly=True) as ledger:
        return {"geometry": ledger.meta_get("geometry"),
                "canon_rules": ledger.meta_get("canon_rules"),
                "crawl_id": ledger.meta_get("crawl_id")}


def check_compatible(state_dirs: Sequence[PathArg]) -> dict[str, Any]:
    """Refuse state dirs that cannot be merged, naming the differing field; before any write.

    Returns the common geometry/rules/crawl id.
    """
    dirs = [Path(d) for d in state_dirs]
    if not dirs:
        raise ValueError("no state directories given")
    first = _identity(dirs[0])
    if first["geometry"] is None:
        raise GeometryMismatch(f"{dirs[0]}: the ledger records no filter geometry")
    for d in dirs[1:]:
        other = _identity(d)
        # crawl id, then rules, then the geometry: the first difference is the one to fix
        require_same({"crawl_id": other["crawl_id"], "canon_rules": other["canon_rules"],
                      **(other["geometry"] or {})},
                     {"crawl_id": first["crawl_id"], "canon_rules": first["canon_rules"],
                      **first["geometry"]}, f"{d} (vs {dirs[0]}): ")
    return first


# -- building outputs safely ----------------------------------------------------------------


def _claim_output(out: Path) -> Path:
    """A fresh temp dir beside ``out``; ``out`` itself must be absent or an empty dir."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out}: already exists and is not empty; refusing to overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    return tmp


def _publish(tmp: Path, out: Path) -> None:
    _fsync_tree(tmp)
    if out.exists():
        out.rmdir()  # empty, checked by _claim_output
    os.rename(tmp, out)
    fsync_dir(out.parent)


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(Path(dirpath))


def _copy_ledger(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite ledger (WAL included), via the backup API."""
    source = sqlite3.connect(src)
    target = sqlite3.connect(dst)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


# -- merge --------------------------------------------------------------------------------


def merge_states(out_dir: PathArg, in_dirs: Sequence[PathArg]) -> ResizedState:
    """Combine state dirs into ``out_dir``: OR of the filters, union of the ledgers.

    Ledger rows keep their state, depth, status and times; a fingerprint present
    in several inputs keeps the first input's row (``duplicates`` counts them).
    The metadata (geometry, rules, crawl id and anything the crawler stored) is
    the first input's: a caller that tracks worker ids or counts updates them.
    """
    ins = [Path(d) for d in in_dirs]
    out = Path(out_dir)
    if len({p.resolve() for p in ins}) != len(ins):
        raise ValueError("the same state directory is given twice")
    if out.resolve() in {p.resolve() for p in ins}:
        raise ValueError(f"{out}: the output cannot be one of the inputs")
    common = check_compatible(ins)
    tmp = _claim_output(out)
    try:
        summary = _merge_into(tmp, ins, common["crawl_id"], int(common["geometry"]["shards"]))
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ResizedState(out, summary[0], summary[1], summary[2])


def _merge_into(tmp: Path, ins: list[Path], crawl_id: str, nshards: int) -> tuple[int, int, int]:
    out_ledger = ledger_path(tmp)
    offered = 0
    for j, src in enumerate(ins):
        with UrlSeen(src, create=False) as seen:
            seen.snapshot()  # its shards now cover every row of its ledger
            if j == 0:
                _copy_ledger(ledger_path(src), out_ledger)
                offered += len(seen.ledger)
                continue
            with Ledger(out_ledger) as ledger:
                offered += len(seen.ledger)
                ledger.import_rows(seen.ledger.live_rows())
    with Ledger(out_ledger) as ledger:
        hwm, rows = ledger.last_seq(), len(ledger)
    shard_dir = shards_dir(tmp)
    shard_dir.mkdir()
    for i in range(nshards):
        target = ShardedBloom.shard_path(shard_dir, i)
        merge_files(target, [ShardedBloom.shard_path(shards_dir(src), i) for src in ins],
                    crawl_id=crawl_id)
        bf, header = read_snapshot(target, crawl_id=crawl_id)
        write_snapshot(target, bf, shard_index=header.shard_index,
                       shard_count=header.shard_count, hwm=hwm, crawl_id=crawl_id)
    return rows, offered - rows, hwm


# -- split --------------------------------------------------------------------------------


def split_state(in_dir: PathArg, out_dirs: Sequence[PathArg],
                owner: Callable[[str], int]) -> list[ResizedState]:
    """Split one state dir into ``len(out_dirs)``: ``owner(host)`` is the index of the
    output that keeps a ledger row; every output gets the whole filter.

    A row whose owner is not a valid index is refused (a host in the wrong
    worker's ledger means the owner function does not match this fleet).
    """
    src = Path(in_dir)
    outs = [Path(d) for d in out_dirs]
    if not outs:
        raise ValueError("split_state needs at least one output directory")
    if len({p.resolve() for p in outs}) != len(outs):
        raise ValueError("the same output directory is given twice")
    if src.resolve() in {p.resolve() for p in outs}:
        raise ValueError(f"{src}: the input cannot be one of the outputs")
    require_state_dir(src)
    tmps: list[Path] = []
    try:
        for out in outs:
            tmps.append(_claim_output(out))
        with UrlSeen(src, create=False) as seen:
            seen.snapshot()
            ledgers = [Ledger(ledger_path(tmp), autocommit=False) for tmp in tmps]
            try:
                _split_rows(src, seen.ledger, ledgers, owner)
                results = []
                for out, tmp, ledger in zip(outs, tmps, ledgers, strict=True):
                    ledger.commit()
                    results.append(ResizedState(out, len(ledger), 0, ledger.last_seq()))
                    _copy_shards(seen, tmp, ledger.last_seq())
            finally:
                for ledger in ledgers:
                    ledger.close()
        for tmp, out in zip(tmps, outs, strict=True):
            _publish(tmp, out)
    except BaseException:
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    return results


def _split_rows(src: Path, ledger: Ledger, outs: list[Ledger],
                owner: Callable[[str], int]) -> None:
    """Import into each output the rows its hosts own (the journal is append-only, so
    outputs are built, not pruned); the metadata goes to every output.

    A row whose host is unknown (its text was compacted) goes to every output: an
    extra row only answers "seen" for a host that output never admits, while a
    missing one could refetch a URL."""
    for key, value in ledger.meta_items().items():
        for out in outs:
            out.meta_set(key, value)
    chunks: list[list[Any]] = [[] for _ in outs]
    for row in ledger.live_rows():
        if row.host is None:
            targets = range(len(outs))
        else:
            k = owner(row.host)
            if not (isinstance(k, int) and 0 <= k < len(outs)):
                raise ValueError(f"{src}: {row.url} (host {row.host}) belongs to output "
                                 f"{k!r}, not to any of the {len(outs)} outputs of this split")
            targets = (k,)
        for k in targets:
            chunks[k].append(row)
            if len(chunks[k]) >= IMPORT_CHUNK:
                outs[k].import_rows(chunks[k])
                chunks[k] = []
    for out, chunk in zip(outs, chunks, strict=True):
        out.import_rows(chunk)


def _copy_shards(seen: UrlSeen, tmp: Path, hwm: int) -> None:
    """The whole filter for an output, marked with the output's own ledger mark (its
    seqs are new numbers: the input's marks would hide later rows from replay)."""
    shards_dir(tmp).mkdir()
    for i in range(seen.nshards):
        bf, header = read_snapshot(seen.shard_path(i), crawl_id=seen.crawl_id)
        write_snapshot(ShardedBloom.shard_path(shards_dir(tmp), i), bf,
                       shard_index=header.shard_index, shard_count=header.shard_count,
                       hwm=hwm, crawl_id=seen.crawl_id)


# -- resize -------------------------------------------------------------------------------


def resize(from_dirs: Sequence[PathArg], to: int, out_root: PathArg,
           owner_fn_factory: Callable[[int], Callable[[str], int]]) -> list[ResizedState]:
    """Turn the state dirs of a W-worker fleet (``from_dirs[i]`` is worker ``i``) into
    ``to`` dirs ``out_root/worker-I``: W -> W/2 merges ``i`` with ``i + W/2``,
    W -> 2W splits ``i`` into ``i`` and ``i + W`` by ``owner_fn_factory(2W)``.

    Other ratios are refused: with ``owner = hash mod W`` only halving and
    doubling move hosts between exactly paired workers. The whole ``out_root``
    appears at once or not at all.
    """
    dirs = [Path(d) for d in from_dirs]
    w = len(dirs)
    if w == 0:
        raise ValueError("no state directories given")
    if not ((to * 2 == w) or (to == w * 2)):
        raise ValueError(f"can only halve (W -> W/2, W even) or double (W -> 2W) a fleet, "
                         f"not go from {w} to {to} workers; resize in several steps")
    check_compatible(dirs)
    root = Path(out_root)
    tmp_root = _claim_output(root)
    try:
        if to * 2 == w:
            results = [merge_states(tmp_root / f"worker-{i}", [dirs[i], dirs[i + to]])
                       for i in range(to)]
        else:
            new_owner = owner_fn_factory(to)
            results = []
            for i, src in enumerate(dirs):
                pair = {i: 0, i + w: 1}
                halves = [tmp_root / f"worker-{i}", tmp_root / f"worker-{i + w}"]
                results += split_state(src, halves,
                                       lambda host, pair=pair: pair.get(new_owner(host), -1))
        _publish(tmp_root, root)
    except BaseException:
        shutil.rmtree(tmp_root, ignore_errors=True)
        raise
    results = [ResizedState(root / r.path.name, r.rows, r.duplicates, r.hwm) for r in results]
    return sorted(results, key=lambda r: int(r.path.name.split("-")[1]))
