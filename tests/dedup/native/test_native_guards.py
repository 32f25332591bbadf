"""The compiled kernels' guards (dedup/native/_kernel.c, dedup/native/_lookup.c,
dedup/native/_buffers.h):
they are called from Python, so each refuses what would otherwise corrupt memory,
spin forever holding the GIL or read the wrong numbers -- full
tables, wrong dtypes, strided or read-only buffers. Each test calls the
compiled functions directly; a call that could spin runs in a child process
under a timeout, since a spinning loop holds the GIL and no in-process timeout
can stop it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from dedup.native import compiled
from tests.dedup.conftest import require_kernel

ROOT = Path(__file__).resolve().parents[3]
SEED = 3


@pytest.fixture(autouse=True)
def _kernel() -> None:
    require_kernel()


# -- full tables raise instead of spinning ---------------------------------------------

PRELUDE = """
import numpy as np
from dedup.native import compiled
from dedup.url.fingerprint import fingerprint_many, halves
lk = compiled.lookup
def show(call):
    try:
        got = call()
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
    else:
        print(f"returned {got!r}")
junk = np.arange(1, 17, dtype=np.uint64)  # 8 slots, every one taken
h = halves(fingerprint_many(["k"], 3))
"""


def in_child(body: str, timeout: float = 60) -> str:
    """Run ``body`` after PRELUDE in a child interpreter and return its output; a
    child still running after ``timeout`` seconds spun (and is killed)."""
    code = PRELUDE + textwrap.dedent(body)
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, env=dict(os.environ))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the call spun for {timeout} s instead of raising")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_table_put_raises_on_a_full_table_and_table_find_misses() -> None:
    """A held count below the table's keys passes the up-front check; the probe
    then goes round the table once and stops."""
    out = in_child("""
        slots, tags = np.zeros(3 * 8, np.uint64), np.full(8, 0x81, np.uint8)
        five = np.full(1, 5, np.uint64)
        show(lambda: lk.table_put(slots, tags, 0, five, five, five))
        todo, raw = np.ones(1, np.uint8), np.zeros(1, np.uint64)
        show(lambda: lk.table_find(slots, tags, five, five, todo, raw))
        print(todo.tolist(), slots.any())
        """)
    assert out.splitlines() == ["ValueError: table_put: the table is full: it holds 8 keys, "
                                "not 0", "returned 0", "[1] False"]


# -- buffers: dtype, layout, writability ----------------------------------------------

def _table_args() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(3 * 8, np.uint64), np.zeros(8, np.uint8)


def _sorted_args(**change: object) -> list:
    """sorted_find in RAM over 2 records, one bucket (shift 63), one key asked."""
    hi, lo, seq = np.array([1, 2], np.uint64), np.array([1, 2], np.uint64), \
        np.array([7, 8], np.uint64)
    args = {"start": np.array([0, 2], np.int64), "bloom": None, "cols": (hi, lo, seq),
            "hi": np.array([2], np.uint64), "lo": np.array([2], np.uint64),
            "todo": np.ones(1, np.uint8), "raw": np.zeros(1, np.uint64)}
    args.update(change)
    return [args["start"], 63, args["bloom"], -1, 0, args["cols"], args["hi"], args["lo"],
            args["todo"], args["raw"], False]


def _lk():  # the compiled modules, looked up when a case runs
    return compiled.lookup


def _k():
    return compiled.kernel


_ONE = np.ones(1, np.uint64)
_H = np.zeros((2, 2), np.uint64)
# each passes one argument of the right byte length but the wrong dtype
WRONG_DTYPES = {
    "table_put hi float64": lambda: _lk().table_put(*_table_args(), 0, _ONE.astype(np.float64),
                                                    _ONE, _ONE),
    "table_put tags bool": lambda: _lk().table_put(_table_args()[0], np.zeros(8, bool), 0,
                                                   _ONE, _ONE, _ONE),
    "table_find todo int8": lambda: _lk().table_find(*_table_args(), _ONE, _ONE,
                                                     np.ones(1, np.int8), _ONE.copy()),
    "table_find raw int64": lambda: _lk().table_find(*_table_args(), _ONE, _ONE,
                                                     np.ones(1, np.uint8), np.zeros(1, np.int64)),
    "sorted_find start uint32": lambda: _lk().sorted_find(
        *_sorted_args(start=np.array([0, 2], np.uint32))),
    "sorted_find hi float64": lambda: _lk().sorted_find(
        *_sorted_args(hi=np.array([2], np.float64))),
    "sorted_find column int64": lambda: _lk().sorted_find(*_sorted_args(
        cols=(np.array([1, 2], np.int64), np.array([1, 2], np.uint64),
              np.array([7, 8], np.uint64)))),
    "sorted_find bloom uint64": lambda: _lk().sorted_find(
        *_sorted_args(bloom=np.zeros(1, np.uint64))),
    "filter_set bloom float64": lambda: _lk().filter_set(np.zeros(8, np.float64), _ONE, _ONE),
    "layer_set words float64": lambda: _k().layer_set(np.zeros(4, np.float64), _H, None, None,
                                                      4, 256, 3, 0),
    "layer_test out int8": lambda: _k().layer_test(np.zeros(4, np.uint64), _H, None, None,
                                                   4, 256, 3, 0, np.zeros(2, np.int8)),
    "layer_set sel uint64": lambda: _k().layer_set(np.zeros(4, np.uint64), _H, None,
                                                   np.zeros(1, np.uint64), 4, 256, 3, 0),
    "first_new present int8": lambda: _k().first_new(_H, np.zeros(2, np.int8),
                                                     np.zeros(2, np.intp)),
    "first_new out uint64": lambda: _k().first_new(_H, np.zeros(2, bool),
                                                   np.zeros(2, np.uint64)),
}


@pytest.mark.parametrize("name", WRONG_DTYPES)
def test_a_wrong_dtype_raises(name: str) -> None:
    with pytest.raises(TypeError, match="must be"):
        WRONG_DTYPES[name]()


def test_the_right_dtypes_pass() -> None:
    """What dedup passes: uint64 (numpy's 'L', or 'Q' and '<u8'), uint8 or bool
    flags, intp, an int32 or int64 directory."""
    lk, k = compiled.lookup, compiled.kernel
    slots, tags = _table_args()
    one = np.ones(1, np.ulonglong)
    assert lk.table_put(slots.astype(np.ulonglong), tags, 0, one, one.astype("<u8"), one) == 1
    for start in (np.array([0, 2], np.int32), np.array([0, 2], np.int64)):
        for todo in (np.ones(1, np.uint8), np.ones(1, bool)):
            raw = np.zeros(1, np.uint64)
            assert lk.sorted_find(*_sorted_args(start=start, todo=todo, raw=raw)) == 0
            assert raw[0] == 8 and not todo[0]
    out = np.zeros(2, np.intp)
    assert k.first_new(np.array([[1, 1], [2, 2]], np.uint64), np.zeros(2, np.uint8), out) == 2


def test_a_strided_buffer_raises() -> None:
    lk, k = compiled.lookup, compiled.kernel
    with pytest.raises(BufferError, match="C-contiguous"):
        lk.table_put(*_table_args(), 0, np.ones(4, np.uint64)[::2], np.ones(2, np.uint64),
                     np.ones(2, np.uint64))
    with pytest.raises(BufferError, match="C-contiguous"):
        k.layer_set(np.zeros(4, np.uint64), np.zeros((2, 2), np.uint64, order="F"), None,
                    None, 4, 256, 3, 0)
    with pytest.raises(BufferError, match="C-contiguous"):
        lk.sorted_find(*_sorted_args(start=np.array([0, 9, 2], np.int64)[::2]))


def read_only(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def test_a_read_only_buffer_that_is_written_raises() -> None:
    lk, k = compiled.lookup, compiled.kernel
    one = np.ones(1, np.uint64)
    slots, tags = _table_args()
    for call in [
        lambda: lk.table_put(read_only(slots), tags, 0, one, one, one),
        lambda: lk.table_find(slots, tags, one, one, read_only(np.ones(1, np.uint8)),
                              one.copy()),
        lambda: lk.sorted_find(*_sorted_args(raw=read_only(np.zeros(1, np.uint64)))),
        lambda: lk.filter_set(read_only(np.zeros(8, np.uint8)), one, one),
        lambda: k.layer_set(read_only(np.zeros(4, np.uint64)), np.zeros((1, 2), np.uint64),
                            None, None, 4, 256, 3, 0),
        lambda: k.first_new(np.zeros((1, 2), np.uint64), np.zeros(1, bool),
                            read_only(np.zeros(1, np.intp))),
    ]:
        with pytest.raises(BufferError, match="read-only"):
            call()


def test_read_only_inputs_pass() -> None:
    """A table only read (the index buffer's table in a lookup) and a mapped run's
    columns may be read-only."""
    lk = compiled.lookup
    slots, tags = _table_args()
    one = np.ones(1, np.uint64)
    assert lk.table_put(slots, tags, 0, one, one, one + one) == 1
    todo, raw = np.ones(1, np.uint8), np.zeros(1, np.uint64)
    assert lk.table_find(read_only(slots), read_only(tags), one, one, todo, raw) == 1
    assert raw[0] == 2 and not todo[0]
    raw = np.zeros(1, np.uint64)
    cols = tuple(read_only(np.array(c, np.uint64)) for c in ([1, 2], [1, 2], [7, 8]))
    assert lk.sorted_find(*_sorted_args(start=read_only(np.array([0, 2], np.int64)),
                                        cols=cols, raw=raw)) == 0
    assert raw[0] == 8


def test_a_directory_row_count_past_int64_bytes_raises(tmp_path: Path) -> None:
    """Bucket bytes are rows * 24: a corrupt directory must not wrap them."""
    run = tmp_path / "run"
    run.write_bytes(bytes(48))
    with open(run, "rb") as f:
        for rows in (2**62 + 1, 2**61, -1):
            args = _sorted_args(start=np.array([0, rows], np.int64), cols=())
            args[3] = f.fileno()
            with pytest.raises(ValueError, match="row count"):
                compiled.lookup.sorted_find(*args)
