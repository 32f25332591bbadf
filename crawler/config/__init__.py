"""What a crawl is told and what it answers: every knob (settings), the request options
as the user writes them (requestopts), the scope and seeds, which hosts are IP literals,
the exit statuses. The crawler's lowest layer."""
