"""Which URLs are fetched, and when: which links are admitted (admission), the
per-host queues (frontier) and their politeness budget, retries of transient
failures (retry), and which queued URLs are sitemap files (sitemaps)."""
