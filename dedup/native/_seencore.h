/* SeenCore: the seen-test core, compiled (dedup/store/seencore.py says what it is;
PySeenCore there is the same interface and the same answers in Python).

It owns its hot state: the cache of recent keys (buckets of four 16-byte
fingerprints, one 64-byte line each, most recently used first), the pending keys
(a table answering "seen", and the batches to write, by depth), its view of the
Bloom filter's buffers (view()), the counters and the flush rule (by count and by
age: core_due). It reaches the rest of the store only through the callables it
was constructed with: fast_page(base) (the canonicalizer's (rules, page) for a
base, or None), resolve(links, base) (the canonicalizer's answer for the links
this path does not resolve), probe(fps) (the Bloom filter's maybe-seen indexes,
used while no view is given), lookup(fps) (the index: indexes of the keys it
holds) and write(batches) (a due batch written: bits, then the ledger). It reads
and writes no Python object's attribute.

Included by _canon.c, whose resolver (resolve_text, read_page, page_contexts) it
uses for a page's links. Every Python call it makes may run any code (a garbage
collector's finalizer included): the state a pass keeps across one is its own,
and a call into the core during one (other than view()) is refused. */
#ifndef BLOOMCRAWL_SEENCORE_H
#define BLOOMCRAWL_SEENCORE_H
#include <sys/mman.h>

#define CORE_WAYS 4
#define CORE_FIRST_BUCKETS 1024
#define CORE_FIRST_PEND 2048      /* pending table slots at first (32 KB) */
#define CORE_KEPT_PEND (1 << 16)  /* kept (zeroed) after a flush up to this many slots */
#define CORE_AHEAD 8
#define CORE_AHEAD_TEXT (2 * RAW_CAP)

enum { CORE_KEEP = 0, CORE_PEND = 1, CORE_HOLD = 2 };
enum { C_LINKS, C_NEW, C_REPEATS, C_REJECTED, C_DEFNEW, C_MAYBE, C_HITS, C_QUERIES, C_FALSE,
       C_COMPILED, C_N };
static const char *const CORE_COUNT_NAMES[C_N] = {
    "links", "new", "repeats", "rejected", "bloom_definitely_new", "bloom_maybe",
    "confirm_cache_hits", "ledger_queries", "false_positives", "compiled"};

typedef struct { uint64_t row_words, m, k, salt; const uint64_t *words; } core_layer;
typedef struct { long long depth; char *buf; Py_ssize_t len, cap; } core_batch;
enum { MISS_NEW = 0, MISS_MAYBE = 1, MISS_FOUND = 2 };
/* a miss of a pass: its fingerprint, its index in the call's links or pairs, its key
   str (page()'s answer; NULL for pairs()) and what the filter and the index said */
typedef struct { uint64_t hi, lo; Py_ssize_t at; PyObject *key; int said; } core_miss;
typedef struct { uint64_t hi, lo; const char *k; Py_ssize_t kn; int how; } core_ahead;

typedef struct {
    PyObject_HEAD
    uint32_t seed;
    uint64_t *cache;                  /* nb buckets of CORE_WAYS (hi, lo) slots */
    void *cache_map;                  /* its mapping (core_table_alloc), or NULL */
    size_t cache_len;
    Py_ssize_t nb, nb_max, cached;
    uint64_t *ptab, pmask;            /* the pending keys' table, at most half full */
    Py_ssize_t pheld, pn;             /* keys in it; pending keys to write */
    double since, seconds, coarse_res;
    Py_ssize_t keys_limit;
    core_batch *batches;              /* by ascending depth */
    Py_ssize_t nbatch, cbatch;
    char *hbuf;                       /* HOLD keys (the caller writes their rows) */
    Py_ssize_t hlen, hcap;
    PyObject *layers;                 /* view(): the layers' tuple, held */
    Py_buffer words[MAXLAYERS], nl;
    core_layer L[MAXLAYERS];
    Py_ssize_t nlay, rows;
    PyObject *fast_page, *resolve, *probe, *lookup, *write;
    PyObject *base, *rules, *page;    /* the last base and its (rules, page), held */
    PyObject *krules;                 /* rules fast_page gave for an http(s) page */
    page_t pg;
    const rules_t *rp;
    int base_fast;                    /* the last base's links are resolved here */
    scratch_t *sc;
    uint64_t *met, mmask, pass;       /* a pass's keys met: (hi, lo, pass) slots */
    core_miss *miss;
    Py_ssize_t nmiss, mcap;
    char *ahead;
    long long counts[C_N];
    int busy;
} SeenCore;

/* -- the clock: time.monotonic(), and the coarse clock that spares it ------------- */

static double core_seconds_of(const struct timespec *ts) {
    return (double)((int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec) / 1e9;
}

static double core_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return core_seconds_of(&ts);
}

/* Not yet `seconds` since `since` by the coarse clock (never ahead of the fine one,
   at most its resolution behind): the fine one is asked only when this says maybe. */
static int core_surely_before(double since, double seconds, double res) {
    struct timespec ts;
    if (res <= 0 || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) < 0) return 0;
    return core_seconds_of(&ts) + 2 * res - since < seconds;
}

/* -- the cache of recent keys -------------------------------------------------------- */

static inline uint64_t *core_bucket(const SeenCore *o, uint64_t lo) {
    return o->cache + 2 * CORE_WAYS * (((lo >> 32) * (uint64_t)o->nb) >> 32);
}

/* Held? A hit moves the key to its bucket's front. (0, 0) is never asked. */
static inline int core_hit(SeenCore *o, uint64_t hi, uint64_t lo) {
    if (!o->nb) return 0;
    uint64_t *b = core_bucket(o, lo);
    for (int j = 0; j < CORE_WAYS; j++)
        if (b[2 * j] == hi && b[2 * j + 1] == lo) {
            if (j) {
                memmove(b + 2, b, 16 * (size_t)j);
                b[0] = hi;
                b[1] = lo;
            }
            return 1;
        }
    return 0;
}

/* A zeroed table of `size` bytes. From 4 MB on it is its own mapping, aligned to
   2 MB and asked for transparent huge pages: a lookup is a random line of a table
   far larger than the TLB covers in 4 KB pages, and a page walk for each one cost
   about as much as the line itself. *map and *len: what core_table_free unmaps
   (NULL: the table is PyMem's). */
#define CORE_HUGE ((size_t)2 << 20)
static void *core_table_alloc(size_t size, void **map, size_t *len) {
    *map = NULL;
    *len = 0;
#if defined(MAP_ANONYMOUS) && defined(MADV_HUGEPAGE)
    if (size >= 2 * CORE_HUGE) {
        size_t want = size + CORE_HUGE;
        char *m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m != MAP_FAILED) {
            char *at = (char *)(((uintptr_t)m + CORE_HUGE - 1) & ~(uintptr_t)(CORE_HUGE - 1));
            madvise(at, size, MADV_HUGEPAGE);  /* a hint: without it, small pages */
            *map = m;
            *len = want;
            return at;
        }
    }
#endif
    return PyMem_Calloc(size, 1);
}

static void core_table_free(void *t, void *map, size_t len) {
    if (map) munmap(map, len);
    else PyMem_Free(t);
}

static int core_cache_alloc(SeenCore *o, Py_ssize_t nb) {
    void *map = NULL;
    size_t len = 0;
    uint64_t *t = nb ? core_table_alloc((size_t)nb * CORE_WAYS * 16, &map, &len) : NULL;
    if (nb && !t) { PyErr_NoMemory(); return -1; }
    core_table_free(o->cache, o->cache_map, o->cache_len);
    o->cache = t;
    o->cache_map = map;
    o->cache_len = len;
    o->nb = nb;
    o->cached = 0;
    return 0;
}

/* Twice the buckets (at most nb_max): each bucket's keys, in order, to the new ones. */
static int core_grow(SeenCore *o) {
    Py_ssize_t nb = o->nb, nn = 2 * nb < o->nb_max ? 2 * nb : o->nb_max;
    uint64_t *old = o->cache;
    void *old_map = o->cache_map;
    size_t old_len = o->cache_len;
    o->cache = NULL;
    o->cache_map = NULL;
    o->nb = 0;
    if (core_cache_alloc(o, nn) < 0) {
        o->cache = old;
        o->cache_map = old_map;
        o->cache_len = old_len;
        o->nb = nb;
        return -1;
    }
    Py_ssize_t held = 0;
    for (Py_ssize_t i = 0; i < nb * CORE_WAYS; i++) {
        uint64_t hi = old[2 * i], lo = old[2 * i + 1];
        if (!(hi | lo)) continue;
        uint64_t *b = core_bucket(o, lo);
        for (int j = 0; j < CORE_WAYS; j++)
            if (!(b[2 * j] | b[2 * j + 1])) {  /* a split has room; the last step may not */
                b[2 * j] = hi;
                b[2 * j + 1] = lo;
                held++;
                break;
            }
    }
    o->cached = held;
    core_table_free(old, old_map, old_len);
    return 0;
}

/* Hold (hi, lo) at its bucket's front; the bucket's last key makes room. */
static int core_learn1(SeenCore *o, uint64_t hi, uint64_t lo) {
    if (!o->nb || !(hi | lo)) return 0;
    uint64_t *b = core_bucket(o, lo);
    int j = 0;
    while (j < CORE_WAYS && !(b[2 * j] == hi && b[2 * j + 1] == lo)) j++;
    if (j == CORE_WAYS) {
        j = CORE_WAYS - 1;
        if (!(b[2 * j] | b[2 * j + 1])) o->cached++;
    }
    memmove(b + 2, b, 16 * (size_t)j);
    b[0] = hi;
    b[1] = lo;
    if (o->cached > o->nb * CORE_WAYS * 3 / 4 && o->nb < o->nb_max) return core_grow(o);
    return 0;
}

static int core_learn(SeenCore *o, const char *fps, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i + 16 <= n; i += 16) {
        uint64_t f[2];
        memcpy(f, fps + i, 16);
        if (core_learn1(o, f[0], f[1]) < 0) return -1;
    }
    return 0;
}

/* -- the pending keys ---------------------------------------------------------------- */

static inline uint64_t *core_pslot(const SeenCore *o, uint64_t hi, uint64_t lo) {
    for (uint64_t j = hi & o->pmask;; j = (j + 1) & o->pmask) {
        uint64_t *s = o->ptab + 2 * j;
        if ((s[0] == hi && s[1] == lo) || !(s[0] | s[1])) return s;
    }
}

static inline int core_pending_has(const SeenCore *o, uint64_t hi, uint64_t lo) {
    const uint64_t *s = core_pslot(o, hi, lo);
    return (s[0] | s[1]) != 0;
}

static int core_ptab_alloc(SeenCore *o, uint64_t slots) {
    uint64_t *t = PyMem_Calloc((size_t)slots, 16);
    if (!t) { PyErr_NoMemory(); return -1; }
    uint64_t *old = o->ptab, omask = o->pmask;
    o->ptab = t;
    o->pmask = slots - 1;
    o->pheld = 0;
    if (old) {
        for (uint64_t i = 0; i <= omask; i++)
            if (old[2 * i] | old[2 * i + 1]) {
                uint64_t *s = core_pslot(o, old[2 * i], old[2 * i + 1]);
                s[0] = old[2 * i];
                s[1] = old[2 * i + 1];
                o->pheld++;
            }
        PyMem_Free(old);
    }
    return 0;
}

/* Room for `n` more keys, the table staying at most half full. */
static int core_pending_room(SeenCore *o, Py_ssize_t n) {
    uint64_t slots = o->pmask + 1;
    while (2 * (uint64_t)(o->pheld + n) >= slots) slots *= 2;
    return slots == o->pmask + 1 ? 0 : core_ptab_alloc(o, slots);
}

static int core_buf_add(char **buf, Py_ssize_t *len, Py_ssize_t *cap, const void *p,
                        Py_ssize_t n) {
    if (*len + n > *cap) {
        Py_ssize_t c = *cap ? *cap : 1024;
        while (c < *len + n) c *= 2;
        char *b = PyMem_Realloc(*buf, (size_t)c);
        if (!b) { PyErr_NoMemory(); return -1; }
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, p, (size_t)n);
    *len += n;
    return 0;
}

/* The batch of `depth`, made (in depth order) if there is none. */
static core_batch *core_batch_of(SeenCore *o, long long depth) {
    Py_ssize_t i = 0;
    while (i < o->nbatch && o->batches[i].depth < depth) i++;
    if (i < o->nbatch && o->batches[i].depth == depth) return &o->batches[i];
    if (o->nbatch == o->cbatch) {
        Py_ssize_t c = o->cbatch ? 2 * o->cbatch : 4;
        core_batch *b = PyMem_Realloc(o->batches, (size_t)c * sizeof(core_batch));
        if (!b) { PyErr_NoMemory(); return NULL; }
        o->batches = b;
        o->cbatch = c;
    }
    memmove(&o->batches[i + 1], &o->batches[i], (size_t)(o->nbatch - i) * sizeof(core_batch));
    o->batches[i] = (core_batch){depth, NULL, 0, 0};
    o->nbatch++;
    return &o->batches[i];
}

/* Every pending key dropped (written, or taken by the caller). */
static int core_drop(SeenCore *o) {
    for (Py_ssize_t i = 0; i < o->nbatch; i++) PyMem_Free(o->batches[i].buf);
    o->nbatch = 0;
    o->hlen = 0;
    o->pn = 0;
    if (o->pheld) {
        if (o->pmask + 1 > CORE_KEPT_PEND) {
            PyMem_Free(o->ptab);
            o->ptab = NULL;
            return core_ptab_alloc(o, CORE_FIRST_PEND);
        }
        memset(o->ptab, 0, 16 * (size_t)(o->pmask + 1));
        o->pheld = 0;
    }
    return 0;
}

/* The batches as a list of (depth, bytes), shallowest first, and the HOLD keys. */
static PyObject *core_batches(const SeenCore *o, PyObject **held) {
    PyObject *out = PyList_New(o->nbatch);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < o->nbatch; i++) {
        PyObject *t = Py_BuildValue("Ly#", o->batches[i].depth, o->batches[i].buf,
                                    o->batches[i].len);
        if (!t) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, i, t);
    }
    if (held && !(*held = PyBytes_FromStringAndSize(o->hbuf, o->hlen))) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* The flush rule, in one place: pending keys to write, pending_keys of them or the
   oldest waiting pending_seconds. */
static int core_due(const SeenCore *o) {
    if (!o->pn) return 0;
    if (o->pn >= o->keys_limit) return 1;
    if (core_surely_before(o->since, o->seconds, o->coarse_res)) return 0;
    return core_now() - o->since >= o->seconds;
}

/* Write the pending keys: dropped here, then write(batches), then held by the cache. */
static int core_flush(SeenCore *o) {
    if (!o->pn) return 0;
    PyObject *held = NULL, *batches = core_batches(o, &held);
    if (!batches) return -1;
    int rc = -1;
    if (core_drop(o) < 0) goto done;
    PyObject *r = PyObject_CallOneArg(o->write, batches);
    if (!r) goto done;
    Py_DECREF(r);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batches); i++) {
        PyObject *fps = PyTuple_GET_ITEM(PyList_GET_ITEM(batches, i), 1);
        if (core_learn(o, PyBytes_AS_STRING(fps), PyBytes_GET_SIZE(fps)) < 0) goto done;
    }
    rc = core_learn(o, PyBytes_AS_STRING(held), PyBytes_GET_SIZE(held));
done:
    Py_DECREF(batches);
    Py_DECREF(held);
    return rc;
}

static int core_tick(SeenCore *o) {
    return core_due(o) ? core_flush(o) : 0;
}

/* -- the Bloom filter's view ------------------------------------------------------- */

static void core_release_view(SeenCore *o) {
    for (Py_ssize_t j = 0; j < o->nlay; j++)
        if (o->words[j].obj) PyBuffer_Release(&o->words[j]);
    if (o->nl.obj) PyBuffer_Release(&o->nl);
    o->nlay = 0;
    Py_CLEAR(o->layers);
}

/* May the filter hold (hi, lo)? A row's layer count is read at each call: the filter
   adds layers to a row in place. */
static int core_maybe(const SeenCore *o, uint64_t hi, uint64_t lo, int *maybe) {
    uint64_t row = probe_row(hi, (uint64_t)o->rows);
    Py_ssize_t depth = ((const Py_ssize_t *)o->nl.buf)[row];
    if (depth < 0 || depth > o->nlay) {
        PyErr_SetString(PyExc_ValueError, "SeenCore: a row has more layers than the view");
        return -1;
    }
    *maybe = 0;
    for (Py_ssize_t j = 0; j < depth && !*maybe; j++) {
        const core_layer *y = &o->L[j];
        *maybe = layer_row_has(y->words + row * y->row_words, y->m, y->k, y->salt, hi, lo);
    }
    return 0;
}

/* -- a pass ----------------------------------------------------------------------------- */

static void core_pass_clear(SeenCore *o) {
    for (Py_ssize_t j = 0; j < o->nmiss; j++) Py_CLEAR(o->miss[j].key);
    o->nmiss = 0;
}

/* A new pass over n keys: its table of keys met at most half full. */
static int core_pass_start(SeenCore *o, Py_ssize_t n) {
    core_pass_clear(o);
    uint64_t want = 64;
    while (want < 2 * (uint64_t)n + 2) want *= 2;
    if (!o->met || o->mmask + 1 < want) {
        uint64_t *s = PyMem_Calloc((size_t)want, 3 * sizeof(uint64_t));
        if (!s) { PyErr_NoMemory(); return -1; }
        PyMem_Free(o->met);
        o->met = s;
        o->mmask = want - 1;
        o->pass = 0;
    }
    if (!o->ahead && !(o->ahead = PyMem_Malloc(CORE_AHEAD_TEXT))) {
        PyErr_NoMemory();
        return -1;
    }
    o->pass++;
    return 0;
}

/* Met earlier in this pass? Marks it met. */
static int core_met(SeenCore *o, uint64_t hi, uint64_t lo) {
    for (uint64_t j = hi & o->mmask;; j = (j + 1) & o->mmask) {
        uint64_t *s = o->met + 3 * j;
        if (s[2] != o->pass) {
            s[0] = hi;
            s[1] = lo;
            s[2] = o->pass;
            return 0;
        }
        if (s[0] == hi && s[1] == lo) return 1;
    }
}

/* One key of a pass: a hit (cache, then the pending keys), met earlier (nothing), or a
   miss kept with `key` (a reference taken over; NULL: made from k[0..kn) if k, else
   none). -1 with an error set. */
static int core_key(SeenCore *o, uint64_t hi, uint64_t lo, Py_ssize_t at, PyObject *key,
                    const char *k, Py_ssize_t kn, Py_ssize_t *hits) {
    if (hi | lo) {
        if (core_hit(o, hi, lo)) { (*hits)++; Py_XDECREF(key); return 0; }
        if (core_met(o, hi, lo)) { Py_XDECREF(key); return 0; }
        if (core_pending_has(o, hi, lo)) { (*hits)++; Py_XDECREF(key); return 0; }
    }
    if (!key && k && !(key = ascii_str(k, kn))) return -1;
    if (o->nmiss == o->mcap) {
        Py_ssize_t cap = o->mcap ? 2 * o->mcap : 64;
        core_miss *m = PyMem_Realloc(o->miss, (size_t)cap * sizeof(core_miss));
        if (!m) { Py_XDECREF(key); PyErr_NoMemory(); return -1; }
        o->miss = m;
        o->mcap = cap;
    }
    o->miss[o->nmiss++] = (core_miss){hi, lo, at, key, MISS_NEW};
    return 0;
}

/* A list answered by a callable: ascending indexes below n. -1 with an error. */
static int core_indexes(PyObject *got, Py_ssize_t n, const char *who) {
    if (!PyList_CheckExact(got)) {
        PyErr_Format(PyExc_TypeError, "SeenCore: %s must answer a list", who);
        return -1;
    }
    Py_ssize_t last = -1;
    for (Py_ssize_t f = 0; f < PyList_GET_SIZE(got); f++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(got, f));
        if (i == -1 && PyErr_Occurred()) return -1;
        if (i <= last || i >= n) {
            PyErr_Format(PyExc_ValueError, "SeenCore: %s must answer ascending indexes of "
                         "the keys asked", who);
            return -1;
        }
        last = i;
    }
    return 0;
}

/* The fingerprints of the misses said `said` (all if -1), as bytes. */
static PyObject *core_fps_of(const SeenCore *o, int said, Py_ssize_t n) {
    PyObject *b = PyBytes_FromStringAndSize(NULL, 16 * n);
    if (!b) return NULL;
    char *w = PyBytes_AS_STRING(b);
    for (Py_ssize_t j = 0; j < o->nmiss; j++)
        if (said < 0 || o->miss[j].said == said) {
            uint64_t f[2] = {o->miss[j].hi, o->miss[j].lo};
            memcpy(w, f, 16);
            w += 16;
        }
    return b;
}

/* The pass is done: the Bloom probe of its misses, the index asked for the maybe-seen
   ones (found ones held by the cache), the counts, the new ones pending (mode).
   0, or -1 with an error and nothing counted or pended. */
static int core_settle(SeenCore *o, Py_ssize_t n, Py_ssize_t hits, Py_ssize_t rejected,
                       Py_ssize_t compiled, long long depth, int mode, Py_ssize_t *nnew) {
    Py_ssize_t nmaybe = 0, nfound = 0;
    if (o->nmiss && o->layers) {
        for (Py_ssize_t j = 0; j < o->nmiss; j++) {
            if (j + 4 < o->nmiss) {
                uint64_t h = o->miss[j + 4].hi;
                const core_layer *y = &o->L[0];
                __builtin_prefetch(y->words + probe_row(h, (uint64_t)o->rows) * y->row_words
                                   + ((h + y->salt) % y->m) / 64);
            }
            int maybe;
            if (core_maybe(o, o->miss[j].hi, o->miss[j].lo, &maybe) < 0) return -1;
            if (maybe) { o->miss[j].said = MISS_MAYBE; nmaybe++; }
        }
    } else if (o->nmiss) {
        PyObject *fps = core_fps_of(o, -1, o->nmiss);
        if (!fps) return -1;
        PyObject *got = PyObject_CallOneArg(o->probe, fps);
        Py_DECREF(fps);
        if (!got) return -1;
        if (core_indexes(got, o->nmiss, "probe") < 0) { Py_DECREF(got); return -1; }
        nmaybe = PyList_GET_SIZE(got);
        for (Py_ssize_t f = 0; f < nmaybe; f++)
            o->miss[PyLong_AsSsize_t(PyList_GET_ITEM(got, f))].said = MISS_MAYBE;
        Py_DECREF(got);
    }
    if (nmaybe) {
        PyObject *fps = core_fps_of(o, MISS_MAYBE, nmaybe);
        if (!fps) return -1;
        PyObject *got = PyObject_CallOneArg(o->lookup, fps);
        Py_DECREF(fps);
        if (!got) return -1;
        if (core_indexes(got, nmaybe, "lookup") < 0) { Py_DECREF(got); return -1; }
        nfound = PyList_GET_SIZE(got);
        Py_ssize_t j = 0, seen = 0;  /* the miss at j is maybe-seen key `seen - 1` */
        for (Py_ssize_t f = 0; f < nfound; f++) {
            Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(got, f));
            for (;; j++)
                if (o->miss[j].said == MISS_MAYBE && seen++ == i) break;
            o->miss[j++].said = MISS_FOUND;
        }
        Py_DECREF(got);
        for (Py_ssize_t q = 0; q < o->nmiss; q++)
            if (o->miss[q].said == MISS_FOUND
                    && core_learn1(o, o->miss[q].hi, o->miss[q].lo) < 0)
                return -1;
    }
    Py_ssize_t new = o->nmiss - nfound;
    if (new && mode != CORE_KEEP) {  /* room first: pended all or none */
        if (core_pending_room(o, new) < 0) return -1;
        core_batch *b = NULL;
        if (mode == CORE_PEND && !(b = core_batch_of(o, depth))) return -1;
        char **buf = b ? &b->buf : &o->hbuf;
        Py_ssize_t *len = b ? &b->len : &o->hlen, *cap = b ? &b->cap : &o->hcap;
        Py_ssize_t want = *len + 16 * new;
        if (want > *cap) {
            Py_ssize_t c = *cap ? *cap : 1024;
            while (c < want) c *= 2;
            char *nb = PyMem_Realloc(*buf, (size_t)c);
            if (!nb) { PyErr_NoMemory(); return -1; }
            *buf = nb;
            *cap = c;
        }
        if (!o->pn) o->since = core_now();
        o->pn += new;
        for (Py_ssize_t q = 0; q < o->nmiss; q++) {
            core_miss *m = &o->miss[q];
            if (m->said == MISS_FOUND) continue;
            uint64_t f[2] = {m->hi, m->lo};
            core_buf_add(buf, len, cap, f, 16);  /* room made above: cannot fail */
            if (m->hi | m->lo) {
                uint64_t *s = core_pslot(o, m->hi, m->lo);
                if (!(s[0] | s[1])) {
                    s[0] = m->hi;
                    s[1] = m->lo;
                    o->pheld++;
                }
            }
        }
    }
    long long *c = o->counts;
    Py_ssize_t links = n - rejected;
    c[C_LINKS] += links;
    c[C_REJECTED] += rejected;
    c[C_HITS] += hits;
    c[C_MAYBE] += nmaybe;
    c[C_DEFNEW] += o->nmiss - nmaybe;
    if (nmaybe) {
        c[C_QUERIES] += 1;
        c[C_FALSE] += nmaybe - nfound;
    }
    c[C_NEW] += new;
    c[C_REPEATS] += links - new;
    c[C_COMPILED] += compiled;
    *nnew = new;
    return 0;
}

/* (rules, page) for `base`, kept while the same object is passed. Once fast_page has
   given rules for an http(s) page, an http(s) page URL that page_contexts cuts here
   is its page with those rules (fast_page's own steps: the same cut, the same rules),
   without fast_page's Python steps; any other base is fast_page's. */
static int core_base(SeenCore *o, PyObject *base) {
    if (base == o->base && o->base) return 0;
    PyObject *rules = NULL, *page = NULL;
    if (o->krules && PyUnicode_CheckExact(base)) {
        page = page_contexts(NULL, base);
        if (!page) return -1;
        if (PyTuple_CheckExact(page) && PyTuple_GET_SIZE(page) == 6
                && PyTuple_GET_ITEM(page, 1) != Py_None)
            rules = Py_NewRef(o->krules);
        else
            Py_CLEAR(page);
    }
    if (!rules) {
        PyObject *fast = PyObject_CallOneArg(o->fast_page, base);
        if (!fast) return -1;
        if (PyTuple_CheckExact(fast) && PyTuple_GET_SIZE(fast) == 2
                && PyCapsule_IsValid(PyTuple_GET_ITEM(fast, 0), RULES_NAME)) {
            rules = Py_NewRef(PyTuple_GET_ITEM(fast, 0));
            page = Py_NewRef(PyTuple_GET_ITEM(fast, 1));
            if (page != Py_None) Py_XSETREF(o->krules, Py_NewRef(rules));
        }
        Py_DECREF(fast);
    }
    Py_XSETREF(o->base, Py_NewRef(base));
    Py_XSETREF(o->page, page);
    Py_XSETREF(o->rules, rules);
    o->rp = rules ? PyCapsule_GetPointer(rules, RULES_NAME) : NULL;  /* checked valid */
    o->base_fast = rules ? read_page(o->page, &o->pg) : 0;
    return 0;
}

/* A key given as a str (resolve's answer, or a pair's): fingerprinted and looked up. */
static int core_str_key(SeenCore *o, PyObject *key, Py_ssize_t at, int keep,
                        Py_ssize_t *hits) {
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "pairs must be (value, str key) or None");
        return -1;
    }
    Py_ssize_t kn;
    const char *k = PyUnicode_AsUTF8AndSize(key, &kn);
    if (!k) return -1;
    uint64_t fp[2];
    murmur3_x64_128((const uint8_t *)k, kn, o->seed, fp);
    if (keep) Py_INCREF(key);
    return core_key(o, fp[0], fp[1], at, keep ? key : NULL, NULL, 0, hits);
}

/* resolve(links, base) for links not resolved here: a list of (fetch, key) or None. */
static PyObject *core_resolve(SeenCore *o, PyObject *links, PyObject *base) {
    PyObject *got = PyObject_CallFunctionObjArgs(o->resolve, links, base, NULL);
    if (got && (!PyList_CheckExact(got) || PyList_GET_SIZE(got) != PyTuple_GET_SIZE(links))) {
        PyErr_SetString(PyExc_TypeError, "SeenCore: resolve must answer a list, an item "
                        "a link");
        Py_CLEAR(got);
    }
    return got;
}

/* One resolved item (a (fetch, key) tuple or None) of link `at`. */
static int core_resolved(SeenCore *o, PyObject *item, Py_ssize_t at, Py_ssize_t *hits,
                         Py_ssize_t *rejected) {
    if (item == Py_None) { (*rejected)++; return 0; }
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
        PyErr_SetString(PyExc_TypeError, "pairs must be (value, str key) or None");
        return -1;
    }
    return core_str_key(o, PyTuple_GET_ITEM(item, 1), at, 1, hits);
}

/* The pass of a page's links (a tuple) against `base`: hits counted, misses kept. */
static int core_links(SeenCore *o, PyObject *links, PyObject *base, Py_ssize_t *hits,
                      Py_ssize_t *rejected, Py_ssize_t *compiled) {
    Py_ssize_t n = PyTuple_GET_SIZE(links);
    if (core_base(o, base) < 0) return -1;
    if (!o->base_fast) {  /* the canonicalizer's Python path: all at once */
        PyObject *got = core_resolve(o, links, base);
        if (!got) return -1;
        int rc = 0;
        for (Py_ssize_t i = 0; i < n && rc == 0; i++)
            rc = core_resolved(o, PyList_GET_ITEM(got, i), i, hits, rejected);
        Py_DECREF(got);
        return rc;
    }
    /* resolve and fingerprint up to CORE_AHEAD links before looking the first up, the
       memory of each one's bucket and pending slot asked for as they go: their cache
       misses overlap instead of being waited for one after the other */
    core_ahead a[CORE_AHEAD];
    Py_ssize_t i = 0;
    while (i < n) {
        Py_ssize_t got = 0, used = 0, from = i;
        for (; i < n && got < CORE_AHEAD; i++) {
            const char *f = NULL, *k = NULL;
            Py_ssize_t fn = 0, kn = 0;
            int how = resolve_text(PyTuple_GET_ITEM(links, i), &o->pg, o->rp, o->sc,
                                   &f, &fn, &k, &kn);
            core_ahead *e = &a[got];
            e->how = how;
            if (how == HANDLED) {
                if (kn > CORE_AHEAD_TEXT - used) break;  /* resolved again next turn */
                memcpy(o->ahead + used, k, (size_t)kn);
                e->k = o->ahead + used;
                e->kn = kn;
                used += kn;
                uint64_t fp[2];
                murmur3_x64_128((const uint8_t *)k, kn, o->seed, fp);
                e->hi = fp[0];
                e->lo = fp[1];
                if (o->nb) __builtin_prefetch(core_bucket(o, fp[1]));
                __builtin_prefetch(o->ptab + 2 * (fp[0] & o->pmask));
            }
            got++;
            if (how == NOT_HANDLED) { i++; break; }
        }
        for (Py_ssize_t q = 0; q < got; q++) {
            core_ahead *e = &a[q];
            Py_ssize_t at = from + q;
            if (e->how == NOT_HANDLED) {
                PyObject *one = PyTuple_Pack(1, PyTuple_GET_ITEM(links, at));
                if (!one) return -1;
                PyObject *r = core_resolve(o, one, base);
                Py_DECREF(one);
                if (!r) return -1;
                int rc = core_resolved(o, PyList_GET_ITEM(r, 0), at, hits, rejected);
                Py_DECREF(r);
                if (rc < 0) return -1;
                continue;
            }
            (*compiled)++;
            if (e->how == REJECTED) { (*rejected)++; continue; }
            if (core_key(o, e->hi, e->lo, at, NULL, e->k, e->kn, hits) < 0) return -1;
        }
    }
    return 0;
}

static int core_enter(SeenCore *o) {
    if (o->busy) {
        PyErr_SetString(PyExc_RuntimeError, "SeenCore: called during one of its calls");
        return -1;
    }
    o->busy = 1;
    return 0;
}

static int core_depth(PyObject *d, long long *depth) {
    if (!PyLong_CheckExact(d)) {
        PyErr_Format(PyExc_TypeError, "depth must be an int, not %s", Py_TYPE(d)->tp_name);
        return -1;
    }
    *depth = PyLong_AsLongLong(d);
    return *depth == -1 && PyErr_Occurred() ? -1 : 0;
}

/* page(links, base, depth) -> the new keys, in first-seen order, pending now */
static PyObject *core_page(SeenCore *o, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "SeenCore.page takes (links, base, depth)");
        return NULL;
    }
    PyObject *links = args[0];
    long long depth;
    if (!PyTuple_CheckExact(links)) {
        PyErr_SetString(PyExc_TypeError, "SeenCore.page: links must be a tuple");
        return NULL;
    }
    if (core_depth(args[2], &depth) < 0 || core_enter(o) < 0) return NULL;
    Py_INCREF(links);  /* read across Python calls: held */
    Py_ssize_t n = PyTuple_GET_SIZE(links), hits = 0, rejected = 0, compiled = 0, nnew = 0;
    PyObject *out = NULL;
    if (core_pass_start(o, n) < 0
            || core_links(o, links, args[1], &hits, &rejected, &compiled) < 0
            || core_settle(o, n, hits, rejected, compiled, depth, CORE_PEND, &nnew) < 0)
        goto done;
    if (!(out = PyList_New(nnew))) goto done;
    for (Py_ssize_t j = 0, w = 0; j < o->nmiss; j++)
        if (o->miss[j].said != MISS_FOUND)
            PyList_SET_ITEM(out, w++, Py_NewRef(o->miss[j].key));
done:
    core_pass_clear(o);
    o->busy = 0;
    Py_DECREF(links);
    if (out && core_tick(o) < 0) Py_CLEAR(out);
    return out;
}

static PyObject *S_base_url, *S_depth;

/* add(url, base_url=None, *, depth=0) -> bool: the page of one link */
static PyObject *core_add(SeenCore *o, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
    PyObject *base = Py_None, *d = NULL;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "add(url, base_url=None, *, depth=0)");
        return NULL;
    }
    if (nargs == 2) base = args[1];
    if (kwnames) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            if (!d && PyUnicode_Compare(name, S_depth) == 0) d = args[nargs + i];
            else if (nargs == 1 && PyUnicode_Compare(name, S_base_url) == 0)
                base = args[nargs + i];
            else {
                PyErr_Format(PyExc_TypeError, "add() got an unexpected keyword argument %R",
                             name);
                return NULL;
            }
        }
    }
    long long depth = 0;
    if (d && core_depth(d, &depth) < 0) return NULL;
    PyObject *links = PyTuple_Pack(1, args[0]);
    if (!links) return NULL;
    if (core_enter(o) < 0) { Py_DECREF(links); return NULL; }
    Py_ssize_t hits = 0, rejected = 0, compiled = 0, nnew = 0;
    PyObject *out = NULL;
    if (core_pass_start(o, 1) == 0
            && core_links(o, links, base, &hits, &rejected, &compiled) == 0
            && core_settle(o, 1, hits, rejected, compiled, depth, CORE_PEND, &nnew) == 0)
        out = PyBool_FromLong(nnew > 0);
    core_pass_clear(o);
    o->busy = 0;
    Py_DECREF(links);
    if (out && core_tick(o) < 0) Py_CLEAR(out);
    return out;
}

/* pairs(pairs, depth, mode) -> (indexes of the new keys, their fingerprints) */
static PyObject *core_pairs(SeenCore *o, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "SeenCore.pairs takes (pairs, depth, mode)");
        return NULL;
    }
    long long depth;
    long mode = PyLong_AsLong(args[2]);
    if (mode == -1 && PyErr_Occurred()) return NULL;
    if (mode != CORE_KEEP && mode != CORE_PEND && mode != CORE_HOLD) {
        PyErr_Format(PyExc_ValueError, "mode must be KEEP, PEND or HOLD, not %ld", mode);
        return NULL;
    }
    if (core_depth(args[1], &depth) < 0) return NULL;
    PyObject *pairs = PySequence_Tuple(args[0]);  /* our own: read across Python calls */
    if (!pairs) return NULL;
    if (core_enter(o) < 0) { Py_DECREF(pairs); return NULL; }
    Py_ssize_t n = PyTuple_GET_SIZE(pairs), hits = 0, rejected = 0, nnew = 0;
    PyObject *out = NULL, *idx = NULL, *fps = NULL;
    if (core_pass_start(o, n) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyTuple_GET_ITEM(pairs, i);
        if (p == Py_None) { rejected++; continue; }
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2) {
            PyErr_SetString(PyExc_TypeError, "pairs must be (value, str key) or None");
            goto done;
        }
        if (core_str_key(o, PyTuple_GET_ITEM(p, 1), i, 0, &hits) < 0) goto done;
    }
    if (core_settle(o, n, hits, rejected, 0, depth, (int)mode, &nnew) < 0) goto done;
    if (!(idx = PyList_New(nnew)) || !(fps = PyBytes_FromStringAndSize(NULL, 16 * nnew)))
        goto done;
    char *w = PyBytes_AS_STRING(fps);
    for (Py_ssize_t j = 0, q = 0; j < o->nmiss; j++)
        if (o->miss[j].said != MISS_FOUND) {
            PyObject *v = PyLong_FromSsize_t(o->miss[j].at);
            if (!v) goto done;
            PyList_SET_ITEM(idx, q++, v);
            uint64_t f[2] = {o->miss[j].hi, o->miss[j].lo};
            memcpy(w, f, 16);
            w += 16;
        }
    out = PyTuple_Pack(2, idx, fps);
done:
    Py_XDECREF(idx);
    Py_XDECREF(fps);
    core_pass_clear(o);
    o->busy = 0;
    Py_DECREF(pairs);
    if (out && mode == CORE_PEND && core_tick(o) < 0) Py_CLEAR(out);
    return out;
}

static PyObject *core_tick_py(SeenCore *o, PyObject *Py_UNUSED(a)) {
    if (core_enter(o) < 0) return NULL;
    o->busy = 0;
    if (core_tick(o) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *core_due_py(SeenCore *o, PyObject *Py_UNUSED(a)) {
    return PyBool_FromLong(core_due(o));
}

static PyObject *core_flush_py(SeenCore *o, PyObject *Py_UNUSED(a)) {
    if (core_enter(o) < 0) return NULL;
    o->busy = 0;
    if (core_flush(o) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *core_take_py(SeenCore *o, PyObject *Py_UNUSED(a)) {
    if (core_enter(o) < 0) return NULL;
    o->busy = 0;
    PyObject *out = core_batches(o, NULL);
    if (out && core_drop(o) < 0) Py_CLEAR(out);
    return out;
}

static PyObject *core_learn_py(SeenCore *o, PyObject *fps) {
    Py_buffer b;
    if (PyObject_GetBuffer(fps, &b, PyBUF_SIMPLE) < 0) return NULL;
    int rc = core_enter(o);
    if (rc == 0) {
        rc = core_learn(o, b.buf, b.len - b.len % 16);
        o->busy = 0;
    }
    PyBuffer_Release(&b);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *core_forget_py(SeenCore *o, PyObject *Py_UNUSED(a)) {
    if (core_enter(o) < 0) return NULL;
    int rc = core_cache_alloc(o, o->nb_max < CORE_FIRST_BUCKETS ? o->nb_max
                                                                : CORE_FIRST_BUCKETS);
    o->busy = 0;
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

/* view(rows, layers, nlayers): the Bloom filter's buffers (layers a tuple of (words,
   row_words, m, k, salt), nlayers one intp a row), kept until the next view();
   view(0, None, None): none, probe() answers. */
static PyObject *core_view(SeenCore *o, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "SeenCore.view takes (rows, layers, nlayers)");
        return NULL;
    }
    Py_ssize_t rows = PyLong_AsSsize_t(args[0]);
    if (rows == -1 && PyErr_Occurred()) return NULL;
    PyObject *layers = args[1];
    if (layers == o->layers && args[2] == o->nl.obj && rows == o->rows) Py_RETURN_NONE;
    core_release_view(o);
    if (layers == Py_None) Py_RETURN_NONE;
    if (!PyTuple_Check(layers) || PyTuple_GET_SIZE(layers) < 1
            || PyTuple_GET_SIZE(layers) > MAXLAYERS || rows < 1 || rows > 65536) {
        PyErr_SetString(PyExc_ValueError, "SeenCore.view: 1 to 64 layers, rows 1..65536");
        return NULL;
    }
    if (get_items(args[2], &o->nl, "SeenCore: nlayers", &INTP, 0) < 0) return NULL;
    if (o->nl.len != rows * (Py_ssize_t)sizeof(Py_ssize_t)) {
        PyErr_SetString(PyExc_ValueError, "SeenCore: nlayers must be one intp per row");
        goto fail;
    }
    for (; o->nlay < PyTuple_GET_SIZE(layers); o->nlay++) {
        core_layer *y = &o->L[o->nlay];
        PyObject *w;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(layers, o->nlay), "OKKKK;a layer is (words, "
                              "row_words, m, k, salt)", &w, &y->row_words, &y->m, &y->k,
                              &y->salt)
                || get_items(w, &o->words[o->nlay], "SeenCore: words", &U64, 0) < 0)
            goto fail;
        y->words = o->words[o->nlay].buf;
        if (!layer_geometry_ok((uint64_t)o->words[o->nlay].len / 8, y->row_words, y->m, y->k,
                               (uint64_t)rows)) {
            PyErr_SetString(PyExc_ValueError, "SeenCore: bad layer geometry");
            o->nlay++;  /* its words are held: released below */
            goto fail;
        }
    }
    o->rows = rows;
    o->layers = Py_NewRef(layers);
    Py_RETURN_NONE;
fail:
    core_release_view(o);
    return NULL;
}

static PyObject *core_counts(SeenCore *o, PyObject *Py_UNUSED(a)) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (int i = 0; i < C_N; i++) {
        PyObject *v = PyLong_FromLongLong(o->counts[i]);
        if (!v || PyDict_SetItemString(d, CORE_COUNT_NAMES[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *core_get_pending(SeenCore *o, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(o->pn);
}

static PyObject *core_get_cached(SeenCore *o, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(o->cached);
}

static PyObject *core_get_buckets(SeenCore *o, void *Py_UNUSED(c)) {
    return PyLong_FromSsize_t(o->nb);
}

static int core_traverse(SeenCore *o, visitproc visit, void *arg) {
    Py_VISIT(o->fast_page);
    Py_VISIT(o->resolve);
    Py_VISIT(o->probe);
    Py_VISIT(o->lookup);
    Py_VISIT(o->write);
    Py_VISIT(o->base);
    Py_VISIT(o->rules);
    Py_VISIT(o->page);
    Py_VISIT(o->krules);
    Py_VISIT(o->layers);
    for (Py_ssize_t j = 0; j < o->nmiss; j++) Py_VISIT(o->miss[j].key);
    return 0;
}

static int core_clear(SeenCore *o) {
    Py_CLEAR(o->fast_page);
    Py_CLEAR(o->resolve);
    Py_CLEAR(o->probe);
    Py_CLEAR(o->lookup);
    Py_CLEAR(o->write);
    Py_CLEAR(o->base);
    Py_CLEAR(o->rules);
    Py_CLEAR(o->page);
    Py_CLEAR(o->krules);
    o->rp = NULL;
    o->base_fast = 0;
    core_release_view(o);
    core_pass_clear(o);
    return 0;
}

static void core_dealloc(SeenCore *o) {
    PyObject_GC_UnTrack(o);
    core_clear(o);
    for (Py_ssize_t i = 0; i < o->nbatch; i++) PyMem_Free(o->batches[i].buf);
    PyMem_Free(o->batches);
    PyMem_Free(o->hbuf);
    core_table_free(o->cache, o->cache_map, o->cache_len);
    PyMem_Free(o->ptab);
    PyMem_Free(o->met);
    PyMem_Free(o->miss);
    PyMem_Free(o->ahead);
    PyMem_Free(o->sc);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static PyObject *core_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"seed", "cache_bytes", "pending_keys", "pending_seconds",
                         "fast_page", "resolve", "probe", "lookup", "write", NULL};
    long long seed, cache_bytes = -1, keys = -1;
    double seconds = -1;
    PyObject *c[5] = {NULL, NULL, NULL, NULL, NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|$LLdOOOOO", kw, &seed, &cache_bytes,
                                     &keys, &seconds, &c[0], &c[1], &c[2], &c[3], &c[4]))
        return NULL;
    for (int i = 0; i < 5; i++)
        if (!c[i] || !PyCallable_Check(c[i])) {
            PyErr_Format(PyExc_TypeError, "SeenCore: %s must be given, a callable", kw[4 + i]);
            return NULL;
        }
    if (seed < 0 || seed > 0xFFFFFFFFLL || cache_bytes < 0 || keys < 1 || !(seconds >= 0)) {
        PyErr_SetString(PyExc_ValueError, "SeenCore: seed in [0, 2**32), cache_bytes >= 0, "
                        "pending_keys >= 1, pending_seconds >= 0");
        return NULL;
    }
    SeenCore *o = (SeenCore *)type->tp_alloc(type, 0);
    if (!o) return NULL;
    o->seed = (uint32_t)seed;
    long long nb_max = cache_bytes / (16 * CORE_WAYS);
    if (!nb_max && cache_bytes > 0) nb_max = 1;
    if (nb_max > ((long long)1 << 31)) nb_max = (long long)1 << 31;
    o->nb_max = (Py_ssize_t)nb_max;
    o->keys_limit = (Py_ssize_t)keys;
    o->seconds = seconds;
    struct timespec res;
    o->coarse_res = clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0
        ? core_seconds_of(&res) : 0;
    o->fast_page = Py_NewRef(c[0]);
    o->resolve = Py_NewRef(c[1]);
    o->probe = Py_NewRef(c[2]);
    o->lookup = Py_NewRef(c[3]);
    o->write = Py_NewRef(c[4]);
    if (!(o->sc = PyMem_Malloc(sizeof(scratch_t)))
            || core_cache_alloc(o, o->nb_max < CORE_FIRST_BUCKETS ? o->nb_max
                                                                  : CORE_FIRST_BUCKETS) < 0
            || core_ptab_alloc(o, CORE_FIRST_PEND) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

static PyMethodDef core_methods[] = {
    {"add", (PyCFunction)(void (*)(void))core_add, METH_FASTCALL | METH_KEYWORDS,
     "add(url, base_url=None, *, depth=0) -> bool: new (and pending now)"},
    {"page", (PyCFunction)(void (*)(void))core_page, METH_FASTCALL,
     "page(links, base, depth) -> the new keys in first-seen order, pending now"},
    {"pairs", (PyCFunction)(void (*)(void))core_pairs, METH_FASTCALL,
     "pairs(pairs, depth, mode) -> (indexes of the new keys, their fingerprints)"},
    {"due", (PyCFunction)core_due_py, METH_NOARGS, "due() -> bool: the flush rule"},
    {"tick", (PyCFunction)core_tick_py, METH_NOARGS, "tick() -> None: flush if due"},
    {"flush", (PyCFunction)core_flush_py, METH_NOARGS,
     "flush() -> None: write(batches) of the pending keys, then cache them"},
    {"take_pending", (PyCFunction)core_take_py, METH_NOARGS,
     "take_pending() -> [(depth, fingerprints)]: the pending batches, dropped"},
    {"learn", (PyCFunction)core_learn_py, METH_O, "learn(fps) -> None: cache these keys"},
    {"forget_all", (PyCFunction)core_forget_py, METH_NOARGS,
     "forget_all() -> None: drop every cached key"},
    {"view", (PyCFunction)(void (*)(void))core_view, METH_FASTCALL,
     "view(rows, layers, nlayers) -> None: the Bloom filter's buffers"},
    {"counts", (PyCFunction)core_counts, METH_NOARGS, "counts() -> dict of the counters"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef core_getset[] = {
    {"pending", (getter)core_get_pending, NULL, "pending keys (to write)", NULL},
    {"cached", (getter)core_get_cached, NULL, "keys the cache holds", NULL},
    {"cache_buckets", (getter)core_get_buckets, NULL, "the cache's buckets now", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SeenCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dedup.native._canon.SeenCore",
    .tp_basicsize = sizeof(SeenCore),
    .tp_dealloc = (destructor)core_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_free = PyObject_GC_Del,
    .tp_doc = "SeenCore(seed, *, cache_bytes, pending_keys, pending_seconds, fast_page, "
              "resolve, probe, lookup, write): the seen-test core (dedup/store/seencore.py)",
    .tp_methods = core_methods,
    .tp_getset = core_getset,
    .tp_new = core_new,
};

static int core_ready(PyObject *m) {
    if (!(S_base_url = PyUnicode_InternFromString("base_url"))
            || !(S_depth = PyUnicode_InternFromString("depth")))
        return -1;
    if (PyType_Ready(&SeenCoreType) < 0) return -1;
    Py_INCREF(&SeenCoreType);
    if (PyModule_AddObject(m, "SeenCore", (PyObject *)&SeenCoreType) < 0) {
        Py_DECREF(&SeenCoreType);
        return -1;
    }
    return 0;
}

#endif
