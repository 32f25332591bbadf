"""``bloomcrawl`` command line: one module per group of commands, no library logic.

``args`` (the parser, argument types, the crawl options defined once),
``crawl`` (crawl, resume), ``fleet`` (fleet), ``inspect`` (stats, check,
forget, rebuild), ``merge`` (merge, resize), ``main`` (the entry point).
"""
