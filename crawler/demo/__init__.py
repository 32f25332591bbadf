"""The bundled sample site (``site``: what it links, ``serve``: on loopback) and
``make demo`` (``run``), which crawls it and checks the result."""
