"""``bloomcrawl`` command line: one module per group of commands, no library logic.

``args`` (the parser, argument types, the crawl options defined once),
``crawl`` (crawl, resume), ``fleet`` (fleet), ``inspect`` (stats, check,
forget, rebuild), ``merge`` (merge, resize), ``main`` (the entry point).
"""

import os

# numpy's OpenBLAS starts a thread per CPU core when numpy is imported, and each
# spins for a while before it sleeps: CPU the crawl pays for nothing (dedup never
# calls BLAS). The command line owns its process; a program importing the library
# keeps its own setting. Set here, before anything imports numpy.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
