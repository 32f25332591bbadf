/* The Bloom filter's hot loops, compiled: fingerprints and a layer's bit tests/sets.

Why C: numpy does a batch's bit positions as (k, n) temporaries, many passes over
memory plus a fixed cost per call that dominates a page's dozen keys, and
mmh3.hash_bytes costs a Python call per key. Here one pass per key keeps the
hash and its k positions in registers. The results are bit for bit those of the
numpy code in dedup/filter/arena.py (the fallback when this module did not build) and
of mmh3.hash_bytes; the tests compare them.

The functions check every buffer's dtype, layout and writability (uint64 words
and hashes, intp rows and selections; see dedup/native/_buffers.h), every length and
index, so a mistake raises instead of reading the wrong numbers or writing
outside the filter.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_buffers.h"
#include "_murmur.h"
#include "_probe.h"

/* fingerprints(keys, seed) -> bytes: mmh3.hash_bytes(key, seed) of each key, joined.
   A str is hashed as its UTF-8 bytes (a lone surrogate raises UnicodeEncodeError). */
static PyObject *fingerprints(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *keys; long long seed;
    if (!PyArg_ParseTuple(args, "OL", &keys, &seed)) return NULL;
    if (seed < 0 || seed > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "seed is out of range");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > PY_SSIZE_T_MAX / 16) { Py_DECREF(seq); return PyErr_NoMemory(); }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 16);
    if (!out) { Py_DECREF(seq); return NULL; }
    uint64_t *dst = (uint64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* `seq` is `keys` itself when a list: a buffer key's exporter may run
           Python code that changes it, so its items are read afresh each time,
           a key is held across the request, and a change of size raises */
        PyObject *k = PySequence_Fast_ITEMS(seq)[i];
        if (PyUnicode_Check(k)) {
            if (fingerprint_str(k, (uint32_t)seed, dst + 2 * i) < 0) goto fail;
            continue;
        }
        if (PyBytes_Check(k)) {
            murmur3_x64_128((const uint8_t *)PyBytes_AS_STRING(k), PyBytes_GET_SIZE(k),
                            (uint32_t)seed, dst + 2 * i);
            continue;
        }
        Py_buffer view;  /* another read-only buffer, as mmh3 takes */
        Py_INCREF(k);
        if (PyObject_GetBuffer(k, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Format(PyExc_TypeError, "keys must be str or bytes-like, not %.80s",
                         Py_TYPE(k)->tp_name);
            Py_DECREF(k);
            goto fail;
        }
        murmur3_x64_128((const uint8_t *)view.buf, view.len, (uint32_t)seed, dst + 2 * i);
        PyBuffer_Release(&view);
        Py_DECREF(k);
        if (PySequence_Fast_GET_SIZE(seq) != n) {
            PyErr_SetString(PyExc_RuntimeError, "keys changed size during fingerprints");
            goto fail;
        }
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq); Py_DECREF(out); return NULL;
}


/* One layer of `rows` filters: `words` holds rows * row_words uint64 words; key i
   (an (n, 2) uint64 array `h` of fingerprint halves) lives in row rows[i] (row 0
   if rows is None); its k positions are (h1 + salt + j*h2) mod m, j < k. */
typedef struct {
    Py_buffer words, h, rows, sel;
    Py_ssize_t n, nsel, nwords;
    uint64_t row_words, m, k, salt;
} Layer;

static void layer_release(Layer *L) {
    if (L->words.obj) PyBuffer_Release(&L->words);
    if (L->h.obj) PyBuffer_Release(&L->h);
    if (L->rows.obj) PyBuffer_Release(&L->rows);
    if (L->sel.obj) PyBuffer_Release(&L->sel);
}

/* Every selected key and its row in range? Checked before any bit is touched, so
   a refused call leaves the filter as it was. */
static int layer_check(const Layer *L) {
    const Py_ssize_t *sel = L->sel.obj ? L->sel.buf : NULL;
    const Py_ssize_t *rows = L->rows.obj ? L->rows.buf : NULL;
    const Py_ssize_t nrows = L->nwords / (Py_ssize_t)L->row_words;
    for (Py_ssize_t j = 0; j < L->nsel; j++) {
        Py_ssize_t i = sel ? sel[j] : j;
        if (i < 0 || i >= L->n || (rows ? (rows[i] < 0 || rows[i] >= nrows) : nrows < 1)) {
            PyErr_SetString(PyExc_IndexError, "key or row index out of range");
            return -1;
        }
    }
    return 0;
}

static int layer_open(Layer *L, PyObject *words, int writable, PyObject *h, PyObject *rows,
                      PyObject *sel) {
    if (get_items(words, &L->words, "words", &U64, writable) < 0
            || get_items(h, &L->h, "hashes", &U64, 0) < 0)
        return -1;
    if (L->h.len % 16) {
        PyErr_SetString(PyExc_ValueError, "hashes must be (n, 2) uint64");
        return -1;
    }
    L->n = L->h.len / 16;
    L->nwords = L->words.len / 8;
    /* m <= 64 row_words, without the product (a huge row_words would wrap it) */
    if (L->m < 2 || L->k == 0 || L->k > MAXK || L->row_words == 0
        || L->m / 64 + (L->m % 64 != 0) > L->row_words) {
        PyErr_SetString(PyExc_ValueError, "bad layer geometry");
        return -1;
    }
    if (rows != Py_None) {
        if (get_items(rows, &L->rows, "rows", &INTP, 0) < 0) return -1;
        if (L->rows.len != L->n * (Py_ssize_t)sizeof(Py_ssize_t)) {
            PyErr_SetString(PyExc_ValueError, "rows must be one intp per key");
            return -1;
        }
    }
    L->nsel = L->n;
    if (sel != Py_None) {
        if (get_items(sel, &L->sel, "selection", &INTP, 0) < 0) return -1;
        L->nsel = L->sel.len / (Py_ssize_t)sizeof(Py_ssize_t);
    }
    return layer_check(L);
}

/* The j-th selected key's index into h, and the first word of its row. */
static inline Py_ssize_t layer_key(const Layer *L, Py_ssize_t j, uint64_t *base) {
    Py_ssize_t i = L->sel.obj ? ((const Py_ssize_t *)L->sel.buf)[j] : j;
    *base = L->rows.obj ? (uint64_t)((const Py_ssize_t *)L->rows.buf)[i] * L->row_words : 0;
    return i;
}

/* layer_test(words, h, rows, sel, row_words, m, k, salt, out): out[j] = 1 if every
   bit of selected key j is set (out: uint8, one per selected key). */
static PyObject *layer_test(PyObject *Py_UNUSED(self), PyObject *args) {
    Layer L = {0};
    PyObject *words, *h, *rows, *sel, *out_o;
    Py_buffer out = {0};
    if (!PyArg_ParseTuple(args, "OOOOKKKKO", &words, &h, &rows, &sel, &L.row_words, &L.m,
                          &L.k, &L.salt, &out_o))
        return NULL;
    if (layer_open(&L, words, 0, h, rows, sel) < 0) { layer_release(&L); return NULL; }
    if (get_items(out_o, &out, "out", &FLAGS, 1) < 0) { layer_release(&L); return NULL; }
    if (out.len != L.nsel) {
        PyBuffer_Release(&out); layer_release(&L);
        PyErr_SetString(PyExc_ValueError, "out must hold one byte per selected key");
        return NULL;
    }
    const uint64_t *w = L.words.buf, *hh = L.h.buf;
    uint8_t *o = out.buf;
    for (Py_ssize_t j = 0; j < L.nsel; j++) {
        uint64_t base;
        Py_ssize_t i = layer_key(&L, j, &base);
        uint64_t x = hh[2 * i] + L.salt, step = hh[2 * i + 1];
        uint8_t all = 1;
        for (uint64_t t = 0; t < L.k; t++) {
            uint64_t p = (x + t * step) % L.m;
            if (!((w[base + (p >> 6)] >> (p & 63)) & 1)) { all = 0; break; }
        }
        o[j] = all;
    }
    PyBuffer_Release(&out);
    layer_release(&L);
    Py_RETURN_NONE;
}

/* layer_set(words, h, rows, sel, row_words, m, k, salt): set every bit of the
   selected keys. */
static PyObject *layer_set(PyObject *Py_UNUSED(self), PyObject *args) {
    Layer L = {0};
    PyObject *words, *h, *rows, *sel;
    if (!PyArg_ParseTuple(args, "OOOOKKKK", &words, &h, &rows, &sel, &L.row_words, &L.m,
                          &L.k, &L.salt))
        return NULL;
    if (layer_open(&L, words, 1, h, rows, sel) < 0) { layer_release(&L); return NULL; }
    uint64_t *w = L.words.buf;
    const uint64_t *hh = L.h.buf;
    for (Py_ssize_t j = 0; j < L.nsel; j++) {
        uint64_t base;
        Py_ssize_t i = layer_key(&L, j, &base);
        uint64_t x = hh[2 * i] + L.salt, step = hh[2 * i + 1];
        for (uint64_t t = 0; t < L.k; t++) {
            uint64_t p = (x + t * step) % L.m;
            w[base + (p >> 6)] |= (uint64_t)1 << (p & 63);
        }
    }
    layer_release(&L);
    Py_RETURN_NONE;
}

/* first_new(h, present, out) -> count: writes to out the indexes i, ascending, of
   the keys not present whose fingerprint did not occur at an earlier such index
   (a batch's definitely-new keys, each once). An open-addressing table of the
   new keys' indexes, probed by h1, which is already uniformly random; it has at
   least 2n slots for at most n indexes, so a probe always ends at an empty one. */
static PyObject *first_new(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *h_o, *present_o, *out_o;
    Py_buffer h = {0}, present = {0}, out = {0};
    Py_ssize_t count = -1, n;
    Py_ssize_t *table = NULL;
    if (!PyArg_ParseTuple(args, "OOO", &h_o, &present_o, &out_o)) return NULL;
    if (get_items(h_o, &h, "first_new: hashes", &U64, 0) < 0
            || get_items(present_o, &present, "first_new: present", &FLAGS, 0) < 0
            || get_items(out_o, &out, "first_new: out", &INTP, 1) < 0)
        goto done;
    n = h.len / 16;
    if (h.len % 16 || present.len != n || out.len != n * (Py_ssize_t)sizeof(Py_ssize_t)) {
        PyErr_SetString(PyExc_ValueError, "need (n, 2) uint64 hashes, n bools, n intp out");
        goto done;
    }
    const uint64_t *hh = h.buf;
    const uint8_t *pr = present.buf;
    Py_ssize_t *o = out.buf;
    size_t size = 16;
    while (size < 2 * (size_t)n) size <<= 1;
    table = PyMem_Malloc(size * sizeof(Py_ssize_t));
    if (!table) { PyErr_NoMemory(); goto done; }
    memset(table, 0xff, size * sizeof(Py_ssize_t));  /* -1: empty */
    count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (pr[i]) continue;
        size_t slot = (size_t)hh[2 * i] & (size - 1);
        int seen = 0;
        while (table[slot] >= 0) {
            Py_ssize_t e = table[slot];
            if (hh[2 * e] == hh[2 * i] && hh[2 * e + 1] == hh[2 * i + 1]) { seen = 1; break; }
            slot = (slot + 1) & (size - 1);
        }
        if (seen) continue;
        table[slot] = i;
        o[count++] = i;
    }
done:
    PyMem_Free(table);
    if (h.obj) PyBuffer_Release(&h);
    if (present.obj) PyBuffer_Release(&present);
    if (out.obj) PyBuffer_Release(&out);
    return count < 0 ? NULL : PyLong_FromSsize_t(count);
}

/* The 64-bit little-endian word at p (fingerprints are h1 || h2, little-endian). */
static inline uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--) v = (v << 8) | p[b];
    return v;
}

/* stack_maybe(fps, rows, layers, nlayers) -> list of int: the indexes i, ascending, of
   the n fingerprints in `fps` (16 bytes each) that may be in their row's filter: every
   bit of some layer j < nlayers[row] set, row = ((h1 >> 32) * rows) >> 32 (shard_of).
   `layers`: a tuple of (words, row_words, m, k, salt), layer j of all rows, as
   layer_test takes them. A page's dozen keys in one call: in numpy the fixed cost of
   a call per step (rows, each layer's test) was most of a page's probe. */
static PyObject *stack_maybe(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *layers_o, *nlayers_o, *out = NULL;
    Py_buffer fps = {0}, nl = {0};
    Py_ssize_t rows, nlay = 0;
    Layer L[MAXLAYERS];
    memset(L, 0, sizeof(L));
    if (!PyArg_ParseTuple(args, "y*nO!O", &fps, &rows, &PyTuple_Type, &layers_o, &nlayers_o))
        return NULL;
    if (fps.len % 16 || rows < 1 || rows > 65536) {
        PyErr_SetString(PyExc_ValueError, "stack_maybe: fingerprints must be 16 bytes each, "
                        "rows 1..65536");
        goto done;
    }
    if (get_items(nlayers_o, &nl, "stack_maybe: nlayers", &INTP, 0) < 0) goto done;
    if (nl.len != rows * (Py_ssize_t)sizeof(Py_ssize_t)) {
        PyErr_SetString(PyExc_ValueError, "stack_maybe: nlayers must be one intp per row");
        goto done;
    }
    Py_ssize_t given = PyTuple_GET_SIZE(layers_o);
    if (given < 1 || given > MAXLAYERS) {
        PyErr_SetString(PyExc_ValueError, "stack_maybe: 1 to 64 layers");
        goto done;
    }
    for (; nlay < given; nlay++) {
        Layer *y = &L[nlay];
        PyObject *words;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(layers_o, nlay), "OKKKK;a layer is (words, "
                              "row_words, m, k, salt)", &words, &y->row_words, &y->m, &y->k,
                              &y->salt)
                || get_items(words, &y->words, "stack_maybe: words", &U64, 0) < 0)
            goto done;
        y->nwords = y->words.len / 8;
        if (!layer_geometry_ok((uint64_t)y->nwords, y->row_words, y->m, y->k,
                               (uint64_t)rows)) {
            PyErr_SetString(PyExc_ValueError, "stack_maybe: bad layer geometry");
            nlay++;  /* its words are held: released below */
            goto done;
        }
    }
    const Py_ssize_t *depth = nl.buf;
    for (Py_ssize_t r = 0; r < rows; r++)
        if (depth[r] < 0 || depth[r] > nlay) {
            PyErr_SetString(PyExc_ValueError, "stack_maybe: a row has more layers than given");
            goto done;
        }
    out = PyList_New(0);
    if (!out) goto done;
    const unsigned char *f = fps.buf;
    Py_ssize_t n = fps.len / 16;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t h1 = le64(f + 16 * i), h2 = le64(f + 16 * i + 8);
        uint64_t row = probe_row(h1, (uint64_t)rows);
        int found = 0;
        for (Py_ssize_t j = 0; j < depth[row] && !found; j++) {
            const Layer *y = &L[j];
            found = layer_row_has((const uint64_t *)y->words.buf + row * y->row_words, y->m,
                                  y->k, y->salt, h1, h2);
        }
        if (found) {
            PyObject *at = PyLong_FromSsize_t(i);
            if (!at || PyList_Append(out, at) < 0) {
                Py_XDECREF(at);
                Py_CLEAR(out);
                goto done;
            }
            Py_DECREF(at);
        }
    }
done:
    for (Py_ssize_t j = 0; j < nlay; j++)
        if (L[j].words.obj) PyBuffer_Release(&L[j].words);
    if (nl.obj) PyBuffer_Release(&nl);
    PyBuffer_Release(&fps);
    return out;
}

static PyMethodDef methods[] = {
    {"fingerprints", fingerprints, METH_VARARGS,
     "fingerprints(keys, seed) -> bytes: mmh3.hash_bytes of each key, joined"},
    {"layer_test", layer_test, METH_VARARGS,
     "layer_test(words, h, rows, sel, row_words, m, k, salt, out): all k bits set?"},
    {"layer_set", layer_set, METH_VARARGS,
     "layer_set(words, h, rows, sel, row_words, m, k, salt): set the k bits"},
    {"stack_maybe", stack_maybe, METH_VARARGS,
     "stack_maybe(fps, rows, layers, nlayers) -> indexes of the keys maybe in the filter"},
    {"first_new", first_new, METH_VARARGS,
     "first_new(h, present, out) -> count: first occurrences of the keys not present"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dedup.native._kernel",
    "The Bloom filter's hot loops, compiled (see dedup/filter/arena.py)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__kernel(void) { return PyModule_Create(&module); }
