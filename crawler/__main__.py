"""``python -m crawler ...`` is the ``bloomcrawl`` command."""

import sys

from crawler.cli import main

sys.exit(main())
