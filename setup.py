"""The one thing pyproject.toml cannot say: the optional compiled kernel.

``dedup.native._kernel`` (dedup/native/_kernel.c) runs the Bloom filter's hot loops,
``dedup.native._lookup`` (dedup/native/_lookup.c) the exact lookup's,
``dedup.native._canon`` (dedup/native/_canon.c) the canonicalizer's common case,
``dedup.native._rowcrc`` (dedup/native/_rowcrc.c, linked to SQLite and zlib) the
journal's row checksum pass, ``dedup.native._simhash`` (dedup/native/_simhash.c) a
page's near-duplicate fingerprint; ``crawler.net._markup`` (crawler/net/_markup.c)
which tag names a page's markup can hold (links.py's main text). They are optional:
where one does not build (no C compiler, no SQLite or zlib headers), the install still
succeeds and dedup (and links.py) use their numpy and Python code, with the same
answers (``dedup.native.compiled`` picks the one there is).
"""

from setuptools import Extension, setup

LIBRARIES = {"dedup.native._rowcrc": ["sqlite3", "z"]}

setup(ext_modules=[Extension(name, [source], optional=True, extra_compile_args=["-O3"],
                             libraries=LIBRARIES.get(name, []),
                             depends=["dedup/native/_buffers.h", "dedup/native/_murmur.h",
                                      "dedup/native/_probe.h", "dedup/native/_seencore.h"])
                   for name, source in (("dedup.native._kernel", "dedup/native/_kernel.c"),
                                        ("dedup.native._lookup", "dedup/native/_lookup.c"),
                                        ("dedup.native._canon", "dedup/native/_canon.c"),
                                        ("dedup.native._rowcrc", "dedup/native/_rowcrc.c"),
                                        ("dedup.native._simhash", "dedup/native/_simhash.c"),
                                        ("crawler.net._markup", "crawler/net/_markup.c"))])
