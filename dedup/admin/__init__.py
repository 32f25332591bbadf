"""State-directory administration, dedup's second public module: what tools over a
stopped (or, read-only, a running) state directory need and the seen-test itself
never calls.

``from dedup.admin import ...`` is for the crawler's administration commands
(``crawler.admin``: merge, repair, stats; ``crawler.fleet``: resize; ``crawler.cli``:
migrate, repair's diagnosis) and any tool of the same kind; a crawl (``crawler.core``
and the layers below it) never imports it (the ``crawler-core-not-admin`` contract
in pyproject.toml). Its modules, each named for its idea (the functions are the
verbs):

- ``resizing``: merge state directories into one (OR the filters, unite the
  ledgers) or split one by owner (``resize``, ``merge_states``), and the check
  that they can be (``check_compatible``);
- ``migration``: a format-1 ledger (bloomcrawl 0.1) rewritten as format 2
  (``migrate``);
- ``diagnosis``: which parts of a directory are damaged: ledger, WAL, index,
  shards (``diagnose``, ``index_damage``);
- ``salvage``: a damaged ledger's readable rows into a new one (``repair``), and
  the keys an old index held (``index_keys``).

Besides those, the parts they work with: a shard file's header (``read_header``),
the OR of shard files (``merge_files``), a filter's planned capacity from its
shards' (``planned_capacity``) and the portable row that merge, resize and repair
move (``PortableRow``).
"""

from dedup.admin.diagnosis import Diagnosis, diagnose, index_damage
from dedup.admin.migration import V1_BACKUP, migrate
from dedup.admin.resizing import check_compatible, merge_states, resize
from dedup.admin.salvage import RepairReport, index_keys, repair
from dedup.filter.shards import merge_files, planned_capacity
from dedup.filter.snapshot import read_header
from dedup.journal.format import PortableRow

__all__ = [
    "V1_BACKUP",
    "Diagnosis",
    "PortableRow",
    "RepairReport",
    "check_compatible",
    "diagnose",
    "index_damage",
    "index_keys",
    "merge_files",
    "merge_states",
    "migrate",
    "planned_capacity",
    "read_header",
    "repair",
    "resize",
]
