"""Offline operations on a stopped state directory: resize (merge/split), migrate (format 1
-> 2), diagnose (which parts are damaged), repair (salvage)."""
