/* The fingerprint index's compiled lookup of one key (IndexParts, dedup/native/_lookup.c)
as another module calls it without a Python call: the compiled UrlSeen.add (OneLink,
dedup/native/_canon.c) asks the index's kept IndexParts (FingerprintIndex._probe)
itself for a "maybe seen" key, where the Python steps (Ledger.held_among,
FingerprintIndex.held_among, the list they answer) cost more than the lookup. */
#ifndef BLOOMCRAWL_HELD_H
#define BLOOMCRAWL_HELD_H
#include <Python.h>
#include <stdint.h>

#define HELD_API_NAME "dedup.native._lookup.held_api"

typedef struct {
    PyTypeObject *type;  /* IndexParts: `held_one` takes only an object of this type */
    /* 1: the parts hold (hi, lo) (its newest record is no tombstone), 0: they do not,
       -1 with an error set (as IndexParts.held([key]) raises) */
    int (*held_one)(PyObject *parts, uint64_t hi, uint64_t lo);
} held_api;

#endif
