"""The one thing pyproject.toml cannot say: the optional compiled kernel.

``dedup.native._kernel`` (dedup/native/_kernel.c) runs the Bloom filter's hot loops,
``dedup.native._lookup`` (dedup/native/_lookup.c) the exact lookup's,
``dedup.native._canon`` (dedup/native/_canon.c) the canonicalizer's common case. They are
optional: where it does not build (no C compiler), the install still succeeds
and dedup uses its numpy and Python code, with the same answers
(``dedup.native.compiled`` picks the one there is).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(name, [source], optional=True, extra_compile_args=["-O3"],
                             depends=["dedup/native/_buffers.h", "dedup/native/_murmur.h"])
                   for name, source in (("dedup.native._kernel", "dedup/native/_kernel.c"),
                                        ("dedup.native._lookup", "dedup/native/_lookup.c"),
                                        ("dedup.native._canon", "dedup/native/_canon.c"))])
