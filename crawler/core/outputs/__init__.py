"""What a crawl leaves behind besides its state: pages.jsonl and items.jsonl
(output) and WARC files (warc), appended in batches and cut back to their
committed sizes on reopen."""
