/* SimHash of a page's main text (Charikar 2002; Manku, Jain, Das Sarma, WWW 2007):
   the 64-bit near-duplicate fingerprint of dedup/learn/simhash.py.

Why C: a page's text is thousands of words, and the fingerprint is a loop over
its bytes (the words), a hash per word, one per shingle and 64 counters per
shingle: in Python that is a few hundred microseconds a page, several times the
rest of the crawl's work on it; here a few microseconds.

The features are the text's word shingles: a word is a maximal run of bytes that
are ASCII letters or digits or any byte >= 0x80 (so UTF-8 letters of any script
are word characters; punctuation and spaces separate), ASCII lowercased, its
first 64 bytes kept; its hash is the first half of MurmurHash3_x64_128 (seed 0)
of those bytes. A shingle is `w` consecutive words (all of them, if the text has
fewer but at least one): its hash is fmix64 of the xor of its words' hashes, the
j-th rotated left by 17*j bits, xor the number of words. Bit b of the
fingerprint is set when more than half of the shingle hashes have it set. The
pure-Python code in dedup/learn/simhash.py computes the same bits; the tests
compare them. NearTable, the near-duplicate lookup's tables of one host, is here
too (dedup/learn/nearindex.py is its Python twin). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_murmur.h"

#define MAX_SHINGLE 8
#define RING 16  /* the last words' hashes: a window and the word before it */
#define WORD_BYTES 64

static inline uint64_t rot(uint64_t x, unsigned r) {
    r &= 63;
    return r ? (x << r) | (x >> (64 - r)) : x;
}

static inline int word_byte(uint8_t c) {
    return c >= 0x80 || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

/* A byte as a word keeps it (ASCII lowercased), 0 for a byte that is no word's: one
   load a byte in the text's loop, where the tests above cost a dozen instructions
   (filled from word_byte by the module's init). */
static uint8_t word_of[256];

static void fill_word_of(void) {
    for (unsigned c = 0; c < 256; c++)
        word_of[c] = !word_byte((uint8_t)c) ? 0
                     : (c >= 'A' && c <= 'Z') ? (uint8_t)(c | 0x20) : (uint8_t)c;
}

static inline uint64_t shingle_hash(const uint64_t *ring, unsigned start, unsigned k) {
    uint64_t f = 0;
    for (unsigned j = 0; j < k; j++)
        f ^= rot(ring[(start + j) % RING], 17 * j);
    return fmix64(f ^ (uint64_t)k);
}

/* The xor of a window of k word hashes, the j-th rotated by 17*j, kept as the text
   goes (shingle_hash before its fmix64): rotation distributes over xor, so the next
   window's is the last one without its first word, rotated back by 17, and the new
   word rotated by 17*(k-1); a few instructions a word where the loop takes k steps. */
typedef struct { uint64_t x; unsigned k, top; } window;

static inline void window_init(window *w, unsigned k) {
    w->x = 0;
    w->k = k;
    w->top = (17 * (k - 1)) & 63;
}

/* `ring` holds the words' hashes, the newest (word number `words` - 1) just stored;
   the window is full from word number k - 1 on. */
static inline uint64_t window_push(window *w, const uint64_t *ring, Py_ssize_t words) {
    uint64_t h = ring[(size_t)(words - 1) % RING];
    if (words > (Py_ssize_t)w->k) {  /* drop the first word of the last window */
        uint64_t first = ring[(size_t)(words - 1 - w->k) % RING];
        w->x = rot(w->x ^ first, 64 - 17);
        w->x ^= rot(h, w->top);
    } else {
        w->x ^= rot(h, (17 * (unsigned)(words - 1)) & 63);
    }
    return w->x;
}

/* Bit counts, eight at a time: byte i of lanes[j] counts bit 8*i + j of the
   shingle hashes added since the last spill (at most 255 of them). */
typedef struct { uint64_t lanes[8]; unsigned pending; uint64_t ones[64]; } counter;

static inline void spill(counter *c) {
    for (unsigned j = 0; j < 8; j++) {
        for (unsigned i = 0; i < 8; i++)
            c->ones[8 * i + j] += (c->lanes[j] >> (8 * i)) & 0xFF;
        c->lanes[j] = 0;
    }
    c->pending = 0;
}

static inline void count_bits(uint64_t f, counter *c) {
    for (unsigned j = 0; j < 8; j++)
        c->lanes[j] += (f >> j) & 0x0101010101010101ULL;
    if (++c->pending == 255) spill(c);
}

/* A set of 32-bit shingle keys (never 0). */
typedef struct {
    PyObject_HEAD
    uint32_t *slots;
    size_t mask;   /* slots - 1 (a power of two) */
    size_t used;
    size_t limit;  /* most keys held */
} Shingles;

static int set_grow(Shingles *s) {
    size_t n = (s->mask + 1) * 2;
    uint32_t *slots = PyMem_Calloc(n, sizeof(uint32_t));
    if (!slots) return -1;
    for (size_t i = 0; i <= s->mask; i++) {
        uint32_t k = s->slots[i];
        if (!k) continue;
        size_t j = k & (n - 1);
        while (slots[j]) j = (j + 1) & (n - 1);
        slots[j] = k;
    }
    PyMem_Free(s->slots);
    s->slots = slots;
    s->mask = n - 1;
    return 0;
}

/* 1 if `key` was not in the set (added when there is room), 0 if it was; -1 on
   an allocation failure. */
static inline int set_add(Shingles *s, uint32_t key) {
    size_t j = key & s->mask;
    while (s->slots[j]) {
        if (s->slots[j] == key) return 0;
        j = (j + 1) & s->mask;
    }
    if (s->used >= s->limit) return 1;
    s->slots[j] = key;
    s->used++;
    if (4 * s->used > 3 * (s->mask + 1) && set_grow(s) < 0) return -1;
    return 1;
}

/* With `set`, shingles of `wset` words go to it: *fresh counts those it did not hold
   (they are added). Their keys wait in a batch of PENDING, each slot prefetched when
   its key is known, and go in, in text order, when the batch is full or the text
   ends: a host's table outgrows the cache (a megabyte at ~250k shingles), and a
   page's ~100 lookups then wait for memory one after another, several microseconds
   a page, unless their loads overlap. */
#define PENDING 64
typedef struct {
    Shingles *set;
    Py_ssize_t *fresh;
    unsigned n;
    uint32_t keys[PENDING];
} pending;

static int flush_shingles(pending *q) {
    for (unsigned i = 0; i < q->n; i++) {
        int added = set_add(q->set, q->keys[i]);
        if (added < 0) return -1;
        *q->fresh += added;
    }
    q->n = 0;
    return 0;
}

static int add_shingle(pending *q, uint64_t f) {
    uint32_t key = (uint32_t)(f >> 32) | 1;
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&q->set->slots[key & q->set->mask]);
#endif
    q->keys[q->n++] = key;
    return q->n == PENDING ? flush_shingles(q) : 0;
}

/* The fingerprint of `n` bytes at `p` (shingles of `w` words); *features: the
   shingles counted. With `set`: its shingles of `wset` words are added to it,
   *fresh counting those it did not hold, *total all of them. -1 in *features on an
   allocation failure. */
static uint64_t fingerprint(const uint8_t *p, Py_ssize_t n, unsigned w, Py_ssize_t *features,
                            Shingles *set, unsigned wset, Py_ssize_t *fresh,
                            Py_ssize_t *total) {
    counter ones;
    memset(&ones, 0, sizeof ones);
    uint64_t ring[RING];
    uint8_t word[WORD_BYTES];
    Py_ssize_t words = 0, feats = 0, i = 0;
    window win, winset;
    window_init(&win, w);
    window_init(&winset, wset);
    pending q;
    q.set = set;
    q.fresh = fresh;
    q.n = 0;
    *fresh = *total = 0;
    while (i < n) {
        while (i < n && !word_of[p[i]]) i++;
        if (i >= n) break;
        Py_ssize_t len = 0;
        uint8_t c;
        while (i < n && (c = word_of[p[i]]) != 0) {
            i++;
            if (len < WORD_BYTES)
                word[len++] = c;
        }
        uint64_t h[2];
        murmur3_x64_128(word, len, 0, h);
        ring[(size_t)words % RING] = h[0];
        words++;
        uint64_t xw = window_push(&win, ring, words);
        if (words >= (Py_ssize_t)w) {
            count_bits(fmix64(xw ^ (uint64_t)w), &ones);
            feats++;
        }
        if (!set)
            continue;
        uint64_t xs = window_push(&winset, ring, words);
        if (words >= (Py_ssize_t)wset) {
            (*total)++;
            if (add_shingle(&q, fmix64(xs ^ (uint64_t)wset)) < 0) {
                *features = -1;
                return 0;
            }
        }
    }
    if (words > 0 && words < (Py_ssize_t)w) {  /* one shingle of every word */
        count_bits(shingle_hash(ring, 0, (unsigned)words), &ones);
        feats = 1;
    }
    if (set && words > 0 && words < (Py_ssize_t)wset) {
        *total = 1;
        if (add_shingle(&q, shingle_hash(ring, 0, (unsigned)words)) < 0) {
            *features = -1;
            return 0;
        }
    }
    if (set && flush_shingles(&q) < 0) {
        *features = -1;
        return 0;
    }
    spill(&ones);
    uint64_t out = 0;
    for (unsigned b = 0; b < 64; b++)
        if (2 * ones.ones[b] > (uint64_t)feats) out |= (uint64_t)1 << b;
    *features = feats;
    return out;
}

/* simhash(data, w) -> (fingerprint, shingles): data a bytes-like (UTF-8 text). */
static PyObject *simhash(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    int w;
    if (!PyArg_ParseTuple(args, "y*i", &view, &w)) return NULL;
    if (w < 1 || w > MAX_SHINGLE) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "shingle must be 1 to %d words, not %d", MAX_SHINGLE, w);
        return NULL;
    }
    Py_ssize_t feats, fresh, total;
    uint64_t fp;
    if (view.len > (1 << 16)) {  /* a long text: other threads run meanwhile */
        Py_BEGIN_ALLOW_THREADS
        fp = fingerprint((const uint8_t *)view.buf, view.len, (unsigned)w, &feats, NULL, 1,
                         &fresh, &total);
        Py_END_ALLOW_THREADS
    } else {
        fp = fingerprint((const uint8_t *)view.buf, view.len, (unsigned)w, &feats, NULL, 1,
                         &fresh, &total);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Kn)", (unsigned long long)fp, feats);
}

static PyObject *shingles_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"limit", NULL};
    Py_ssize_t limit = (Py_ssize_t)1 << 22;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|n", kwlist, &limit)) return NULL;
    if (limit < 0) {
        PyErr_SetString(PyExc_ValueError, "limit must be >= 0");
        return NULL;
    }
    Shingles *s = (Shingles *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    s->slots = PyMem_Calloc(64, sizeof(uint32_t));  /* most hosts have few pages */
    if (!s->slots) { Py_DECREF(s); return PyErr_NoMemory(); }
    s->mask = 63;
    s->used = 0;
    s->limit = (size_t)limit;
    return (PyObject *)s;
}

static void shingles_dealloc(Shingles *s) {
    PyMem_Free(s->slots);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* Shingles.print(data, w, wset) -> (fingerprint, shingles, new, counted): simhash's
   (data: a str, or a bytes-like of its UTF-8)
   over w-word shingles, and of the text's wset-word shingles how many the set did not
   hold (now added) and how many there were. */
static PyObject *shingles_print(Shingles *self, PyObject *args) {
    PyObject *data, *encoded = NULL;
    int w, wset;
    if (!PyArg_ParseTuple(args, "Oii", &data, &w, &wset)) return NULL;
    if (w < 1 || w > MAX_SHINGLE || wset < 1 || wset > MAX_SHINGLE) {
        PyErr_Format(PyExc_ValueError, "shingle must be 1 to %d words, not %d and %d",
                     MAX_SHINGLE, w, wset);
        return NULL;
    }
    const char *p;
    Py_ssize_t n;
    Py_buffer view = {0};
    if (PyUnicode_Check(data)) {
        /* a str's UTF-8 (ASCII text's own bytes, no copy); one with a lone surrogate
           as Python's encode("utf-8", "surrogatepass") writes it */
        p = PyUnicode_AsUTF8AndSize(data, &n);
        if (!p) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
            PyErr_Clear();
            encoded = PyUnicode_AsEncodedString(data, "utf-8", "surrogatepass");
            if (!encoded) return NULL;
            p = PyBytes_AS_STRING(encoded);
            n = PyBytes_GET_SIZE(encoded);
        }
    } else {
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
        p = view.buf;
        n = view.len;
    }
    Py_ssize_t feats, fresh, total;
    /* the GIL is held: the table is this object's, and another thread could use it */
    uint64_t fp = fingerprint((const uint8_t *)p, n, (unsigned)w, &feats, self,
                              (unsigned)wset, &fresh, &total);
    if (view.obj) PyBuffer_Release(&view);
    Py_XDECREF(encoded);
    if (feats < 0) return PyErr_NoMemory();
    return Py_BuildValue("(Knnn)", (unsigned long long)fp, feats, fresh, total);
}

static Py_ssize_t shingles_len(Shingles *self) { return (Py_ssize_t)self->used; }

static PyObject *shingles_bytes(Shingles *self, void *Py_UNUSED(c)) {
    return PyLong_FromSize_t((self->mask + 1) * sizeof(uint32_t));
}

static PyMethodDef shingles_methods[] = {
    {"print", (PyCFunction)shingles_print, METH_VARARGS,
     "print(data, w, wset) -> (fingerprint, shingles, new, counted): of a str or its UTF-8 "
     "bytes, the SimHash over w-word "
     "shingles; of the wset-word ones, those new to the set (added) and all"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef shingles_getset[] = {
    {"nbytes", (getter)shingles_bytes, NULL, "bytes of the table", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods shingles_seq = {.sq_length = (lenfunc)shingles_len};

static PyTypeObject ShinglesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dedup.native._simhash.Shingles",
    .tp_basicsize = sizeof(Shingles),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Shingles(limit=2**22): a host's shingle set; print() fingerprints a page "
              "and counts its new shingles",
    .tp_new = shingles_new,
    .tp_dealloc = (destructor)shingles_dealloc,
    .tp_methods = shingles_methods,
    .tp_getset = shingles_getset,
    .tp_as_sequence = &shingles_seq,
};

/* NearTable(k): one group's first holders of 64-bit fingerprints, found within k
   bits (dedup/learn/nearindex.py says why blocks, and is the Python twin: the same
   blocks, the same answers). A fingerprint is filed at position 0, 1, 2, ...; each
   of its k+1 blocks maps, in that block's hash table, to the newest position with
   that block value, and `chain` links each position to the previous one with the
   same value of the block. find_or_add reads the k+1 chains, answers the smallest
   position within k bits, or files the fingerprint when there is none. */
#define NEAR_MAX_BLOCKS 16
typedef struct { uint64_t value; int64_t head; } near_slot;  /* head -1: empty */
typedef struct {
    PyObject_HEAD
    int k, blocks;
    unsigned shift[NEAR_MAX_BLOCKS];
    uint64_t mask[NEAR_MAX_BLOCKS];
    uint64_t *prints;
    int64_t *chain;        /* [pos * blocks + b]: previous position with block b's value */
    Py_ssize_t n, cap;
    near_slot *slots[NEAR_MAX_BLOCKS];
    size_t slot_mask;  /* every block's table has the same size */
} NearTable;

static inline size_t near_hash(uint64_t v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    v ^= v >> 33;
    return (size_t)v;
}

static near_slot *near_find_slot(near_slot *t, size_t mask, uint64_t value) {
    size_t j = near_hash(value) & mask;
    while (t[j].head >= 0 && t[j].value != value) j = (j + 1) & mask;
    return &t[j];
}

static int near_grow_tables(NearTable *s) {
    size_t n = (s->slot_mask + 1) * 2;
    for (int b = 0; b < s->blocks; b++) {
        near_slot *t = PyMem_Malloc(n * sizeof *t);
        if (!t) return -1;
        for (size_t i = 0; i < n; i++) t[i].head = -1;
        for (size_t i = 0; i <= s->slot_mask; i++) {
            if (s->slots[b][i].head < 0) continue;
            *near_find_slot(t, n - 1, s->slots[b][i].value) = s->slots[b][i];
        }
        PyMem_Free(s->slots[b]);
        s->slots[b] = t;
    }
    s->slot_mask = n - 1;
    return 0;
}

static PyObject *near_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"k", NULL};
    int k;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "i", kwlist, &k)) return NULL;
    if (k < 0 || k >= NEAR_MAX_BLOCKS) {
        PyErr_Format(PyExc_ValueError, "near-duplicate distance must be 0 to %d bits, not %d",
                     NEAR_MAX_BLOCKS - 1, k);
        return NULL;
    }
    NearTable *s = (NearTable *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    s->k = k;
    s->blocks = k + 1;
    for (int b = 0; b < s->blocks; b++) {  /* block b: bits [64b/B, 64(b+1)/B) */
        unsigned lo = (unsigned)(64 * b / s->blocks), hi = (unsigned)(64 * (b + 1) / s->blocks);
        s->shift[b] = lo;
        s->mask[b] = hi - lo >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << (hi - lo)) - 1);
    }
    s->slot_mask = 15;
    for (int b = 0; b < s->blocks; b++) {
        s->slots[b] = PyMem_Malloc(16 * sizeof(near_slot));
        if (!s->slots[b]) { Py_DECREF(s); return PyErr_NoMemory(); }
        for (int i = 0; i < 16; i++) s->slots[b][i].head = -1;
    }
    return (PyObject *)s;
}

static void near_dealloc(NearTable *s) {
    for (int b = 0; b < NEAR_MAX_BLOCKS; b++) PyMem_Free(s->slots[b]);
    PyMem_Free(s->prints);
    PyMem_Free(s->chain);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

/* Room for one more position (the arrays and the block tables, which hold at most
   one value per position: kept at most half full by the count of positions), made
   before a lookup that may file: a failure then leaves the table as it was. */
static int near_reserve(NearTable *s) {
    if (s->n == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 64;
        uint64_t *prints = PyMem_Realloc(s->prints, (size_t)cap * sizeof *prints);
        if (!prints) return -1;
        s->prints = prints;
        int64_t *chain = PyMem_Realloc(s->chain, (size_t)cap * (size_t)s->blocks * sizeof *chain);
        if (!chain) return -1;
        s->chain = chain;
        s->cap = cap;
    }
    if ((size_t)(s->n + 1) * 2 > s->slot_mask + 1 && near_grow_tables(s) < 0) return -1;
    return 0;
}

/* The smallest position within `bits` bits of fp (-1: none, or bits < 0: not looked
   for); with `add` and none, fp is filed at the next position (near_reserve first). */
static Py_ssize_t near_lookup(NearTable *s, uint64_t fp, int bits, int add) {
    near_slot *hit[NEAR_MAX_BLOCKS];
    int64_t best = -1;
    for (int b = 0; b < s->blocks; b++) {
        near_slot *slot = hit[b] = near_find_slot(s->slots[b], s->slot_mask,
                                                  (fp >> s->shift[b]) & s->mask[b]);
        for (int64_t p = bits < 0 ? -1 : slot->head; p >= 0; p = s->chain[p * s->blocks + b]) {
            if ((best < 0 || p < best) && __builtin_popcountll(s->prints[p] ^ fp) <= bits)
                best = p;
        }
    }
    if (best >= 0 || !add) return (Py_ssize_t)best;
    Py_ssize_t pos = s->n++;
    s->prints[pos] = fp;
    for (int b = 0; b < s->blocks; b++) {
        near_slot *slot = hit[b];
        if (slot->head < 0) slot->value = (fp >> s->shift[b]) & s->mask[b];
        s->chain[pos * s->blocks + b] = slot->head;
        slot->head = pos;
    }
    return -1;
}

static int near_arg(PyObject *arg, uint64_t *fp) {
    *fp = PyLong_AsUnsignedLongLong(arg);
    return *fp == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *near_find_or_add(NearTable *self, PyObject *arg) {
    uint64_t fp;
    if (near_arg(arg, &fp) < 0) return NULL;
    if (near_reserve(self) < 0) return PyErr_NoMemory();
    return PyLong_FromSsize_t(near_lookup(self, fp, self->k, 1));
}

static PyObject *near_find(NearTable *self, PyObject *arg) {
    uint64_t fp;
    if (near_arg(arg, &fp) < 0) return NULL;
    return PyLong_FromSsize_t(near_lookup(self, fp, self->k, 0));
}

static PyObject *near_add(NearTable *self, PyObject *arg) {
    /* fp filed after every earlier one, near one or not (the caller's to decide) */
    uint64_t fp;
    if (near_arg(arg, &fp) < 0) return NULL;
    if (near_reserve(self) < 0) return PyErr_NoMemory();
    near_lookup(self, fp, -1, 1);
    return PyLong_FromSsize_t(self->n - 1);
}

static Py_ssize_t near_len(NearTable *self) { return self->n; }

static PyMethodDef near_methods[] = {
    {"find_or_add", (PyCFunction)near_find_or_add, METH_O,
     "find_or_add(fp) -> int: the first position within k bits of fp, or -1 when there "
     "is none (fp is then filed at the next position)"},
    {"find", (PyCFunction)near_find, METH_O,
     "find(fp) -> int: the first position within k bits of fp, or -1"},
    {"add", (PyCFunction)near_add, METH_O, "add(fp) -> int: fp filed at the next position"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods near_seq = {.sq_length = (lenfunc)near_len};

static PyTypeObject NearTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dedup.native._simhash.NearTable",
    .tp_basicsize = sizeof(NearTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "NearTable(k): one group's first holders of 64-bit fingerprints, by "
              "position, found within k bits",
    .tp_new = near_new,
    .tp_dealloc = (destructor)near_dealloc,
    .tp_methods = near_methods,
    .tp_as_sequence = &near_seq,
};

static PyMethodDef methods[] = {
    {"simhash", simhash, METH_VARARGS,
     "simhash(data, w) -> (fingerprint, shingles): the 64-bit SimHash of w-word shingles"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dedup.native._simhash",
    "SimHash of a page's text, compiled (see dedup/learn/simhash.py)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__simhash(void) {
    fill_word_of();
    if (PyType_Ready(&ShinglesType) < 0 || PyType_Ready(&NearTableType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&ShinglesType);
    if (PyModule_AddObject(m, "Shingles", (PyObject *)&ShinglesType) < 0) {
        Py_DECREF(&ShinglesType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&NearTableType);
    if (PyModule_AddObject(m, "NearTable", (PyObject *)&NearTableType) < 0) {
        Py_DECREF(&NearTableType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
