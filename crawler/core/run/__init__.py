"""A crawl running: the loop over the frontier (engine), the test for its end
(underway), signals, the status line and summary (progress), and ``Crawler``
(crawl), the Python API the command line runs on, with the page handlers it
calls (page)."""
