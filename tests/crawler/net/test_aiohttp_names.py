"""The crawler uses only what aiohttp exports: no private module, class or attribute.

Why: ``crawler/net`` once built aiohttp's internal objects (``client_reqrep``'s
``ConnectionKey`` positionally, ``compression_utils``'s decoders) and set a
private session attribute; an aiohttp upgrade could break or silently change
them. A name a module lists in ``__all__`` (or a public submodule) is aiohttp's
promise; anything else fails here, on the aiohttp installed.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import crawler

ROOT = Path(crawler.__file__).parent
# Public modules with no ``__all__``: their documented names are every name without
# a leading underscore (docs.aiohttp.org: "Abstract Base Classes", the header names).
_DOCUMENTED = frozenset({"aiohttp.abc", "aiohttp.hdrs"})


def _exported(module: str, name: str) -> bool:
    if name.startswith("_") or any(part.startswith("_") for part in module.split(".")):
        return False
    mod = importlib.import_module(module)
    if name in getattr(mod, "__all__", ()) or (module in _DOCUMENTED and hasattr(mod, name)):
        return True
    return hasattr(mod, "__path__") and importlib.util.find_spec(f"{module}.{name}") is not None


def _uses() -> list[tuple[str, str, str]]:
    """(where, module, name) for every aiohttp name the crawler's sources use."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        where = str(path.relative_to(ROOT.parent))
        aliases = {}  # local name -> aiohttp module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "aiohttp":
                        aliases[a.asname or a.name] = a.name
                        if "." in a.name:
                            parent, _, last = a.name.rpartition(".")
                            out.append((f"{where}:{node.lineno}", parent, last))
            elif isinstance(node, ast.ImportFrom) and node.module and \
                    node.module.split(".")[0] == "aiohttp":
                for a in node.names:
                    out.append((f"{where}:{node.lineno}", node.module, a.name))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases):
                out.append((f"{where}:{node.lineno}", aliases[node.value.id], node.attr))
    return out


def test_the_crawler_uses_only_names_aiohttp_exports() -> None:
    uses = _uses()
    assert len({m for _, m, _ in uses}) >= 3  # the scan sees the HTTP code
    private = [f"{where}: {module}.{name}" for where, module, name in uses
               if not _exported(module, name)]
    assert private == []


def test_the_scan_finds_a_private_name() -> None:
    assert not _exported("aiohttp.client_reqrep", "ConnectionKey")
    assert not _exported("aiohttp.compression_utils", "ZLibDecompressor")
    assert not _exported("aiohttp", "_retry_connection")
    assert _exported("aiohttp", "ClientSession") and _exported("aiohttp", "hdrs")
