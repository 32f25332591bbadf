/* MurmurHash3_x64_128 of a key, shared by dedup/native/_kernel.c (the filter's batch of
fingerprints) and dedup/native/_lookup.c (the confirm cache, which fingerprints a
page's links as it checks them). Bit for bit mmh3.hash_bytes; the tests compare. */
#ifndef BLOOMCRAWL_MURMUR_H
#define BLOOMCRAWL_MURMUR_H
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* MurmurHash3_x64_128, Austin Appleby (public domain). */
static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33; return k;
}
static inline uint64_t load64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void murmur3_x64_128(const uint8_t *data, Py_ssize_t len, uint32_t seed, uint64_t out[2]) {
    const Py_ssize_t nblocks = len / 16;
    uint64_t h1 = seed, h2 = seed;
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;
    for (Py_ssize_t i = 0; i < nblocks; i++) {
        uint64_t k1 = load64(data + i * 16), k2 = load64(data + i * 16 + 8);
        k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
        h1 = rotl64(h1, 27); h1 += h2; h1 = h1 * 5 + 0x52dce729;
        k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2;
        h2 = rotl64(h2, 31); h2 += h1; h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = data + nblocks * 16;
    uint64_t k1 = 0, k2 = 0;
    switch (len & 15) {
    case 15: k2 ^= ((uint64_t)tail[14]) << 48; /* fall through */
    case 14: k2 ^= ((uint64_t)tail[13]) << 40; /* fall through */
    case 13: k2 ^= ((uint64_t)tail[12]) << 32; /* fall through */
    case 12: k2 ^= ((uint64_t)tail[11]) << 24; /* fall through */
    case 11: k2 ^= ((uint64_t)tail[10]) << 16; /* fall through */
    case 10: k2 ^= ((uint64_t)tail[9]) << 8;   /* fall through */
    case 9:  k2 ^= ((uint64_t)tail[8]);
             k2 *= c2; k2 = rotl64(k2, 33); k2 *= c1; h2 ^= k2; /* fall through */
    case 8:  k1 ^= ((uint64_t)tail[7]) << 56; /* fall through */
    case 7:  k1 ^= ((uint64_t)tail[6]) << 48; /* fall through */
    case 6:  k1 ^= ((uint64_t)tail[5]) << 40; /* fall through */
    case 5:  k1 ^= ((uint64_t)tail[4]) << 32; /* fall through */
    case 4:  k1 ^= ((uint64_t)tail[3]) << 24; /* fall through */
    case 3:  k1 ^= ((uint64_t)tail[2]) << 16; /* fall through */
    case 2:  k1 ^= ((uint64_t)tail[1]) << 8;  /* fall through */
    case 1:  k1 ^= ((uint64_t)tail[0]);
             k1 *= c1; k1 = rotl64(k1, 31); k1 *= c2; h1 ^= k1;
    }
    h1 ^= (uint64_t)len; h2 ^= (uint64_t)len;
    h1 += h2; h2 += h1;
    h1 = fmix64(h1); h2 = fmix64(h2);
    h1 += h2; h2 += h1;
    out[0] = h1; out[1] = h2;
}

/* The fingerprint of a str key: of its UTF-8 bytes (a lone surrogate raises
   UnicodeEncodeError); an ASCII str is hashed in place. -1 with an error set. */
static int fingerprint_str(PyObject *k, uint32_t seed, uint64_t out[2]) {
    if (PyUnicode_IS_COMPACT_ASCII(k)) {
        murmur3_x64_128((const uint8_t *)PyUnicode_DATA(k), PyUnicode_GET_LENGTH(k), seed, out);
        return 0;
    }
    /* a new bytes object: PyUnicode_AsUTF8AndSize would keep a copy in the str */
    PyObject *tmp = PyUnicode_AsUTF8String(k);
    if (!tmp) return -1;
    murmur3_x64_128((const uint8_t *)PyBytes_AS_STRING(tmp), PyBytes_GET_SIZE(tmp), seed, out);
    Py_DECREF(tmp);
    return 0;
}

#endif
