/* A miss of the confirm pass (dedup/native/_lookup.c, dedup/native/_canon.c): its key,
value and fingerprint appended to the pass's three outputs together or not at all, so
a failed append (out of memory, a view of the bytearray held) leaves them in step. */
#ifndef BLOOMCRAWL_MISSES_H
#define BLOOMCRAWL_MISSES_H
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Append the pair's key and value to `keys` and `values` and its fingerprint to
   `fps`: all three or none (-1 with an error set, the three as they were). */
static int append_new(PyObject *keys, PyObject *values, PyObject *fps, PyObject *pair,
                      const uint64_t f[2]) {
    Py_ssize_t len = PyByteArray_GET_SIZE(fps);
    if (PyByteArray_Resize(fps, len + 16) < 0) return -1;  /* e.g. a view of it is held */
    if (PyList_Append(keys, PyTuple_GET_ITEM(pair, 1)) == 0) {
        if (PyList_Append(values, PyTuple_GET_ITEM(pair, 0)) == 0) {
            memcpy(PyByteArray_AS_STRING(fps) + len, f, 16);
            return 0;
        }
        /* take the key back: the pair still holds it, so nothing is freed */
        Py_ssize_t k = PyList_GET_SIZE(keys) - 1;
        PyObject *key = PyList_GET_ITEM(keys, k);
        Py_SET_SIZE(keys, k);
        Py_DECREF(key);
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    /* back to its size: it grew a moment ago, so no view of it is held */
    if (PyByteArray_Resize(fps, len) < 0) PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return -1;
}

#endif
