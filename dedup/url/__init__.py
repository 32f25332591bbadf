"""From a link to its key: canonical form (WHATWG join + the project's normal form), the
128-bit fingerprint, the host."""
