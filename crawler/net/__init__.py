"""One page over HTTP: the fetch (timeouts, size cap, retries), headers, outcomes and each
hop as exchanged (for the WARC), the private-address guard, robots.txt, link extraction."""
