/* The confirm cache's fingerprint tables, shared by its pass over resolved pairs
(confirm_split, dedup/native/_lookup.c) and the one over a page's raw links
(confirm_links, dedup/native/_canon.c), so both read and write them the same way. */
#ifndef BLOOMCRAWL_FPSET_H
#define BLOOMCRAWL_FPSET_H
#include <Python.h>
#include <stdint.h>

#include "_buffers.h"

/* The confirm cache's two generations (dedup/store/confirmed.py): each 2**k slots of a
   fingerprint's two uint64 halves, (0, 0) empty, probed linearly from hi's low
   bits (a fingerprint is uniformly random); the two may differ in size. The
   fingerprint (0, 0) is never held: caching is only speed. The caller keeps
   every table at most three quarters full (`half`: what the young one may hold;
   a miss then probes ~8 slots, two cache lines, and the same 64 MB hold 1.5x the
   keys of a half-full table), so a probe ends at an empty slot; it is bounded by the table's size all the same,
   so a table filled behind the caller's count raises instead of spinning. */
typedef struct { Py_buffer b; uint64_t *s; uint64_t mask; } fpset;

static inline int fpset_open(fpset *t, PyObject *o, const char *what, int writable) {
    if (get_items(o, &t->b, what, &U64, writable) < 0) return -1;
    Py_ssize_t n = t->b.len / 16;
    if (t->b.len % 16 || n < 2 || (n & (n - 1))) {
        PyErr_SetString(PyExc_ValueError, "confirm cache: need 2 * 2**k uint64 slots");
        return -1;
    }
    t->s = t->b.buf;
    t->mask = (uint64_t)n - 1;
    return 0;
}

/* The slot holding (hi, lo), or the empty slot where it would go; NULL if the
   table is full without it. */
static inline uint64_t *fpset_slot(const fpset *t, uint64_t hi, uint64_t lo) {
    uint64_t j = hi & t->mask;
    for (uint64_t left = t->mask + 1; left; left--, j = (j + 1) & t->mask) {
        uint64_t *s = t->s + 2 * j;
        if ((s[0] == hi && s[1] == lo) || !(s[0] | s[1])) return s;
    }
    return NULL;
}

static inline void fpset_full(const char *which) {
    PyErr_Format(PyExc_ValueError,
                 "confirm cache: the %s table is full (it holds more than its count says)", which);
}

static inline int fpset_args(fpset *young, PyObject *yo, fpset *old, PyObject *oo,
                      Py_ssize_t held, Py_ssize_t half) {
    if (fpset_open(young, yo, "young", 1) < 0 || (oo && fpset_open(old, oo, "old", 0) < 0))
        return -1;
    if (half < 0 || held < 0 || held > half || 4 * (uint64_t)half > 3 * (young->mask + 1)) {
        PyErr_SetString(PyExc_ValueError, "confirm cache: held <= half <= 3/4 of the slots");
        return -1;
    }
    return 0;
}

/* Whether two tables share memory (a view of the other): each is written or
   read on the assumption that no other write changes it. */
static inline int fpset_overlap(const fpset *a, const fpset *b) {
    const char *x = a->b.buf, *y = b->b.buf;
    return x < y + b->b.len && y < x + a->b.len;
}

static inline void fpset_release(fpset *t) {
    if (t->b.obj) PyBuffer_Release(&t->b);
}

/* A confirm pass's tables, opened and checked once a call (confirm_split,
   confirm_links): a 32-bit seed, young and old (fpset_args), then
   `batch` (written, at most half full with `bheld`) and `pend` (read; not opened
   when `po` is None) where the pass takes them (non-NULL), no two sharing memory.
   -1 with an error set; what was opened is released by fpset_release. */
static inline int confirm_open(long long seed, fpset *young, PyObject *yo, fpset *old,
                               PyObject *oo, Py_ssize_t held, Py_ssize_t half,
                               fpset *batch, PyObject *bo, Py_ssize_t bheld,
                               fpset *pend, PyObject *po) {
    if (seed < 0 || seed > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "seed is out of range");
        return -1;
    }
    if (fpset_args(young, yo, old, oo, held, half) < 0) return -1;
    if (batch && fpset_open(batch, bo, "batch", 1) < 0) return -1;
    if (pend && po != Py_None && fpset_open(pend, po, "pending", 0) < 0) return -1;
    int shared = fpset_overlap(young, old);
    if (batch) shared = shared || fpset_overlap(young, batch) || fpset_overlap(old, batch);
    if (pend && pend->s)
        shared = shared || fpset_overlap(pend, young) || (batch && fpset_overlap(pend, batch));
    if (shared) {
        PyErr_Format(PyExc_ValueError, "confirm cache: the young, old%s tables must not "
                     "share memory", !pend ? " and batch" : !batch ? " and pending"
                     : ", batch and pending");
        return -1;
    }
    if (batch && (bheld < 0 || bheld >= (Py_ssize_t)(batch->mask + 1) / 2)) {
        PyErr_SetString(PyExc_ValueError, "confirm cache: the batch table is half full");
        return -1;
    }
    return 0;
}

#endif
