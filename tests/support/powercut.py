"""Power cuts for tests: run processes under a shim that records what fsync made
durable (``powercut.c``, LD_PRELOAD), then drop every write that was not.

    cut = PowerCut(state_dir, tmp_path / "shadow")
    proc = start(..., env=cut.env())   # every fsync of a file under state_dir is recorded
    ... proc.kill()                    # the power goes out: the process dies first
    lost = cut.cut()                   # each file as its last fsync left it, or empty

Why not LazyFS (a FUSE file system that does the same): it needs a FUSE mount
and a build of its own; the shim is one C file compiled here in a fraction of a
second, and sees the same calls (SQLite's and Python's fsync/fdatasync go through
libc). What it models is LazyFS's: file data reaches the disk only when fsynced,
names (create, rename, unlink) at once.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("powercut.c")
_built: Path | None = None


def shim() -> Path:
    """The shim, compiled once per process (a C compiler is a build requirement of
    the package anyway: dedup/native)."""
    global _built
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the power-cut shim")
    if _built is None:
        folder = tempfile.mkdtemp(prefix="powercut-")
        atexit.register(shutil.rmtree, folder, True)
        out = Path(folder) / "libpowercut.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out),
                        str(SOURCE), "-ldl"], check=True, capture_output=True)
        _built = out
    return _built


@dataclass
class PowerCut:
    """The durable copies of the files under ``root``, kept in ``shadow``."""

    root: Path
    shadow: Path

    def __post_init__(self) -> None:
        self.root = Path(os.path.realpath(self.root))
        self.shadow.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        """The environment that runs a process under the shim."""
        return {"LD_PRELOAD": str(shim()), "POWERCUT_ROOT": str(self.root),
                "POWERCUT_SHADOW": str(self.shadow)}

    def _files(self) -> list[Path]:
        return [Path(d) / f for d, _, files in os.walk(self.root) for f in files
                if (Path(d) / f).is_file() and not (Path(d) / f).is_symlink()]

    def _copy_of(self, path: Path) -> Path:
        st = path.stat()
        return self.shadow / f"{st.st_dev}-{st.st_ino}"

    def settle(self) -> None:
        """Count every file as it stands as durable (a clean shutdown: the state dir
        was written by processes not under the shim)."""
        for path in self._files():
            shutil.copyfile(path, self._copy_of(path))

    def cut(self) -> dict[str, int]:
        """The power cut, once every process writing under ``root`` is dead: each file
        back to its last durable copy, or emptied if it has none. Returns how many
        files were rolled back and emptied, and the bytes dropped."""
        rolled = emptied = dropped = 0
        for path in self._files():
            copy = self._copy_of(path)
            size = path.stat().st_size
            if copy.exists():
                data = copy.read_bytes()
                if data != path.read_bytes():
                    rolled += 1
                    dropped += max(0, size - len(data))
                    path.write_bytes(data)
            elif size:
                emptied += 1
                dropped += size
                path.write_bytes(b"")
        return {"rolled_back": rolled, "emptied": emptied, "bytes_dropped": dropped}
