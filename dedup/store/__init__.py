"""A state directory as one seen-store: UrlSeen = confirm cache + Bloom filter + ledger
(journal + index), restore at open, identity, paths and lock."""
