"""``python -m crawler ...`` is the ``bloomcrawl`` command."""

import sys

from crawler.cli.main import main

sys.exit(main())
