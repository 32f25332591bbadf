/* One Bloom layer's test of one fingerprint, shared by the filter's batch probe
(stack_maybe, dedup/native/_kernel.c) and the seen-test core (SeenCore,
dedup/native/_seencore.h), so both ask the same bits: the k positions of (h1, h2)
are (h1 + salt + j*h2) mod m, j < k, in the row's words (dedup/filter/arena.py). */
#ifndef BLOOMCRAWL_PROBE_H
#define BLOOMCRAWL_PROBE_H
#include <stdint.h>

#define MAXK 64       /* most hashes a layer may use (dedup.filter.geometry.MAX_K is less) */
#define MAXLAYERS 64  /* dedup.filter.geometry.MAX_LAYERS */

/* A layer's geometry is one the probe can read: m bits in row_words words a row,
   1..MAXK hashes, at least `rows` rows in nwords words. */
static inline int layer_geometry_ok(uint64_t nwords, uint64_t row_words, uint64_t m,
                                    uint64_t k, uint64_t rows) {
    return m >= 2 && k > 0 && k <= MAXK && row_words > 0
        && m / 64 + (m % 64 != 0) <= row_words && nwords / row_words >= rows;
}

/* Every one of the k bits of (h1, h2) set in the row's words `w`? */
static inline int layer_row_has(const uint64_t *w, uint64_t m, uint64_t k, uint64_t salt,
                                uint64_t h1, uint64_t h2) {
    uint64_t x = h1 + salt;
    for (uint64_t t = 0; t < k; t++) {
        uint64_t p = (x + t * h2) % m;
        if (!((w[p >> 6] >> (p & 63)) & 1)) return 0;
    }
    return 1;
}

/* The row of a fingerprint among `rows` (dedup.url.fingerprint.shard_of). */
static inline uint64_t probe_row(uint64_t h1, uint64_t rows) {
    return ((h1 >> 32) * rows) >> 32;
}

#endif
