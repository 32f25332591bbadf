"""One page over HTTP: the fetch (timeouts, size cap, retries) through aiohttp or the lean
HTTP/1.1 client and its Content-Encoding decoders, headers, outcomes and each hop as
exchanged (for the WARC), the private-address guard, robots.txt, link extraction,
sitemaps."""
