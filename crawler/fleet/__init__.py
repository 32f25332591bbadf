"""Many worker processes as one crawl: launch, supervise, join, resize (reshard: its Redis
half), the local redis-server, the fleet's identity."""
