"""``python -m crawler.demo`` (``make demo``)."""

import sys

from crawler.demo.run import main

sys.exit(main())
