"""Offline work on a stopped crawl's state directory: merge, repair, the stats report."""
