/* The exact seen-test's index lookups, compiled: a lookup in one part of the fingerprint index (its probe filter,
directory and bucket search, from RAM or with one pread per key) or in all its
parts at once for a page's few keys (IndexParts), and the
index's in-RAM buffer as a hash table (dedup/index/fptable.py, which has no Python
twin: without this module the index buffers in dedup/index/fpbuffer.py).

Why C: each was a Python loop per link or per key (a tuple unpack and two set
lookups; a pread, a bytes.find and an int.from_bytes) or some thirty numpy
calls per index part and group of pages, whose fixed cost outweighed the work:
at 10M URLs they were a third of UrlSeen's time beyond canonicalization. The
results are exactly those of the Python code they replace
(dedup/index/sortedkeys.py), which runs when this module did not build; the tests
compare the two. (The seen-test's own pass is SeenCore, dedup/native/_seencore.h.)
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "_buffers.h"

/* Append index i to the list out (the answers of IndexParts.held). */
static int append_index(PyObject *out, Py_ssize_t i) {
    PyObject *at = PyLong_FromSsize_t(i);
    int rc = at ? PyList_Append(out, at) : -1;
    Py_XDECREF(at);
    return rc;
}

#define RECORD 24  /* bytes of one run record: hi, lo, seq (uint64, little-endian) */

/* A run's three-probe filter (see dedup/index/sortedkeys.py, filter_positions): key i's
   bits are the two 32-bit halves of lo[i] and the low half of hi[i], each scaled
   to [0, m) for a filter of m = 8 * len(bloom) bits (m <= 2**32). */
static inline uint64_t filter_bit(uint64_t x, uint64_t m) { return ((x & 0xFFFFFFFFu) * m) >> 32; }

static inline int filter_has(const uint8_t *b, uint64_t m, uint64_t hi, uint64_t lo) {
    uint64_t x = filter_bit(lo >> 32, m), y = filter_bit(lo, m), z = filter_bit(hi, m);
    return (b[x >> 3] >> (x & 7)) & (b[y >> 3] >> (y & 7)) & (b[z >> 3] >> (z & 7)) & 1;
}

/* filter_set(bloom, hi, lo): set the three bits of every key. */
/* Read `size` bytes at `at` whole: 0, or -1 with *err its errno (0: a short read, the
   file changed under us). Called without the GIL. */
static int read_whole(int fd, uint8_t *buf, int64_t size, int64_t at, int *err) {
    int64_t got = 0;
    while (got < size) {
        ssize_t k = pread(fd, buf + got, (size_t)(size - got), at + got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) { *err = k < 0 ? errno : 0; return -1; }
        got += k;
    }
    return 0;
}

/* Whether a bucket (`size` bytes of records sorted by (hi, lo)) holds (hi, lo): its seq
   word into *raw if so. */
static int bucket_find(const uint8_t *buf, int64_t size, uint64_t hi, uint64_t lo,
                       uint64_t *raw) {
    for (int64_t p = 0; p < size; p += RECORD) {
        uint64_t rh, rl;
        memcpy(&rh, buf + p, 8); memcpy(&rl, buf + p + 8, 8);
        if (rh == hi && rl == lo) {
            memcpy(raw, buf + p + 16, 8);
            return 1;
        }
        if (rh > hi) break;
    }
    return 0;
}

static PyObject *filter_set(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *bo, *ho, *lo_;
    Py_buffer bl = {0}, h = {0}, l = {0};
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "OOO", &bo, &ho, &lo_)) return NULL;
    if (get_items(bo, &bl, "filter_set: the filter", &U8, 1) < 0
            || get_items(ho, &h, "filter_set: hi", &U64, 0) < 0
            || get_items(lo_, &l, "filter_set: lo", &U64, 0) < 0)
        goto done;
    uint64_t m = (uint64_t)bl.len * 8;
    if (h.len % 8 || l.len != h.len || !m || m > ((uint64_t)1 << 32)) {
        PyErr_SetString(PyExc_ValueError, "need n uint64 hi and lo, a filter of 1 to 2**29 bytes");
        goto done;
    }
    uint8_t *b = bl.buf;
    const uint64_t *hi = h.buf, *lo = l.buf;
    for (Py_ssize_t i = 0; i < h.len / 8; i++) {
        uint64_t x = filter_bit(lo[i] >> 32, m), y = filter_bit(lo[i], m), z = filter_bit(hi[i], m);
        b[x >> 3] |= (uint8_t)(1u << (x & 7));
        b[y >> 3] |= (uint8_t)(1u << (y & 7));
        b[z >> 3] |= (uint8_t)(1u << (z & 7));
    }
    ret = Py_None; Py_INCREF(ret);
done:
    if (bl.obj) PyBuffer_Release(&bl);
    if (h.obj) PyBuffer_Release(&h);
    if (l.obj) PyBuffer_Release(&l);
    return ret;
}

/* sorted_find(start, shift, bloom, fd, off, cols, hi, lo, todo, raw, readahead) -> reads

   One part of the fingerprint index (a run file or the buffer's sorted columns;
   see dedup/index/sortedkeys.py) asked about every key i with todo[i] set: the probe
   filter (`bloom`, a uint8 buffer, or None), then the key's directory bucket
   (`start`: int32 or int64 bucket starts, bucket j = hi >> shift), searched
   - from the run file `fd` (>= 0) with one pread of the bucket at `off` +
     24 * start[j] (not through the run's map), or
   - in RAM (fd < 0), in `cols`: a tuple of contiguous uint64 hi, lo, seq columns.
   Where found: raw[i] = the record's seq, todo[i] = 0. `readahead`: every file
   bucket is first asked for (POSIX_FADV_WILLNEED). The GIL is released while
   the loops touch only the buffers (held, so no array can be freed or resized)
   and their own memory; each bucket's bounds are checked against the row count
   before any read. */
static PyObject *sorted_find(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *so, *bo, *co, *ho, *lo_, *to, *ro;
    int shift, fd, readahead;
    long long off;
    Py_buffer st = {0}, bl = {0}, h = {0}, l = {0}, t = {0}, r = {0};
    Py_buffer col[3] = {{0}, {0}, {0}};
    Py_ssize_t reads = -1;
    int64_t (*spans)[2] = NULL;
    uint8_t *buf = NULL;
    if (!PyArg_ParseTuple(args, "OiOiLOOOOOp", &so, &shift, &bo, &fd, &off, &co, &ho, &lo_,
                          &to, &ro, &readahead))
        return NULL;
    if (get_items(so, &st, "sorted_find: the directory", &INT32_OR_64, 0) < 0
            || (bo != Py_None && get_items(bo, &bl, "sorted_find: the filter", &U8, 0) < 0)
            || get_items(ho, &h, "sorted_find: hi", &U64, 0) < 0
            || get_items(lo_, &l, "sorted_find: lo", &U64, 0) < 0
            || get_items(to, &t, "sorted_find: todo", &FLAGS, 1) < 0
            || get_items(ro, &r, "sorted_find: raw", &U64, 1) < 0)
        goto done;
    Py_ssize_t n = h.len / 8, nb = 0, count = 0;
    int wide = st.itemsize == 8;
    if (h.len % 8 || l.len != h.len || t.len != n || r.len != h.len
            || st.len / st.itemsize < 2 || shift < 1 || shift > 63 || off < 0) {
        PyErr_SetString(PyExc_ValueError, "sorted_find: bad arguments");
        goto done;
    }
    nb = st.len / st.itemsize - 1;  /* buckets */
    int64_t rows = wide ? ((const int64_t *)st.buf)[nb] : ((const int32_t *)st.buf)[nb];
    /* every bucket's bytes, offset and end then fit in an int64 */
    if (rows < 0 || rows > (INT64_MAX - off) / RECORD) {
        PyErr_SetString(PyExc_ValueError, "sorted_find: the directory's row count is out of range");
        goto done;
    }
    if (fd < 0) {
        if (!PyTuple_Check(co) || PyTuple_GET_SIZE(co) != 3) {
            PyErr_SetString(PyExc_ValueError, "sorted_find: cols must be (hi, lo, seq)");
            goto done;
        }
        for (int c = 0; c < 3; c++)
            if (get_items(PyTuple_GET_ITEM(co, c), &col[c], "sorted_find: a column", &U64, 0) < 0)
                goto done;
        for (int c = 0; c < 3; c++)
            if (col[c].len != 8 * rows) {
                PyErr_SetString(PyExc_ValueError, "sorted_find: columns and directory differ");
                goto done;
            }
    }
    const uint64_t *hi = h.buf, *lo = l.buf;
    const uint8_t *bloom = bl.obj ? bl.buf : NULL;
    uint64_t m = (uint64_t)bl.len * 8;
    if (bloom && (!m || m > ((uint64_t)1 << 32))) {
        PyErr_SetString(PyExc_ValueError, "sorted_find: a filter of 1 to 2**29 bytes");
        goto done;
    }
    uint8_t *todo = t.buf;
    uint64_t *raw = r.buf;
    spans = PyMem_RawMalloc((n ? n : 1) * sizeof *spans);
    if (!spans) { PyErr_NoMemory(); goto done; }
    int64_t most = 0;
    Py_ssize_t bad = 0, failed = -1;
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    /* pass 1: filter and directory, all in RAM */
    for (Py_ssize_t i = 0; i < n; i++) {
        spans[i][0] = spans[i][1] = 0;
        if (!todo[i]) continue;
        if (bloom && !filter_has(bloom, m, hi[i], lo[i])) continue;
        uint64_t j = hi[i] >> shift;
        if ((Py_ssize_t)j >= nb) { bad = 1; break; }
        int64_t a = wide ? ((const int64_t *)st.buf)[j] : ((const int32_t *)st.buf)[j];
        int64_t b = wide ? ((const int64_t *)st.buf)[j + 1] : ((const int32_t *)st.buf)[j + 1];
        if (a < 0 || b < a || b > rows) { bad = 1; break; }
        spans[i][0] = a; spans[i][1] = b;
        if ((b - a) * RECORD > most) most = (b - a) * RECORD;
    }
    if (!bad && fd >= 0) {
#ifdef POSIX_FADV_WILLNEED
        if (readahead && n > 1)
            for (Py_ssize_t i = 0; i < n; i++)
                if (spans[i][1] > spans[i][0])
                    posix_fadvise(fd, off + spans[i][0] * RECORD,
                                  (spans[i][1] - spans[i][0]) * RECORD, POSIX_FADV_WILLNEED);
#endif
        buf = malloc(most ? (size_t)most : 1);
        if (!buf) bad = 2;
        for (Py_ssize_t i = 0; i < n && !bad && failed < 0; i++) {
            int64_t size = (spans[i][1] - spans[i][0]) * RECORD;
            if (!size) continue;
            int64_t at = off + spans[i][0] * RECORD;
            if (read_whole(fd, buf, size, at, &err) < 0) { failed = i; break; }
            count++;
            if (bucket_find(buf, size, hi[i], lo[i], &raw[i])) todo[i] = 0;
        }
    } else if (!bad) {
        const uint64_t *H = col[0].buf, *L = col[1].buf, *S = col[2].buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            int64_t a = spans[i][0], b = spans[i][1];
            while (a < b) {  /* first record >= (hi, lo) */
                int64_t mid = a + (b - a) / 2;
                if (H[mid] < hi[i] || (H[mid] == hi[i] && L[mid] < lo[i])) a = mid + 1;
                else b = mid;
            }
            if (a < spans[i][1] && H[a] == hi[i] && L[a] == lo[i]) {
                raw[i] = S[a];
                todo[i] = 0;
            }
        }
    }
    Py_END_ALLOW_THREADS
    free(buf);
    if (bad == 1) {
        PyErr_SetString(PyExc_ValueError, "sorted_find: directory out of range");
        goto done;
    }
    if (bad == 2) { PyErr_NoMemory(); goto done; }
    if (failed >= 0) {
        if (err) { errno = err; PyErr_SetFromErrno(PyExc_OSError); }
        else PyErr_Format(PyExc_ValueError,
                          "run file (fd %d): short read: changed under us", fd);
        goto done;
    }
    reads = count;
done:
    PyMem_RawFree(spans);
    for (int c = 0; c < 3; c++) if (col[c].obj) PyBuffer_Release(&col[c]);
    if (st.obj) PyBuffer_Release(&st);
    if (bl.obj) PyBuffer_Release(&bl);
    if (h.obj) PyBuffer_Release(&h);
    if (l.obj) PyBuffer_Release(&l);
    if (t.obj) PyBuffer_Release(&t);
    if (r.obj) PyBuffer_Release(&r);
    return reads < 0 ? NULL : PyLong_FromSsize_t(reads);
}

/* The fingerprint index's buffer as one open-addressing table (dedup/index/fptable.py):
   `slots` holds cap records (hi, lo, raw seq) as 3 * cap uint64, `tags` one byte
   per slot, 0 where empty, else 0x80 | 7 bits of the key's hash. A probe walks
   the tags (a byte a slot, so a miss rarely touches a record) from the key's
   home slot to the first empty one, and at most once round the table (a full
   one, which a caller's wrong count could make, raises instead of spinning);
   cap is a power of two. */
#define SEQ_BITS 0x7FFFFFFFFFFFFFFFull  /* a raw seq without its tombstone bit */

typedef struct { Py_buffer s, g; uint64_t *slot; uint8_t *tag; uint64_t mask; int bits; } table;

static void table_release(table *tb) {
    if (tb->s.obj) PyBuffer_Release(&tb->s);
    if (tb->g.obj) PyBuffer_Release(&tb->g);
}

static int table_open(table *tb, PyObject *so, PyObject *go, int writable) {
    if (get_items(so, &tb->s, "table: slots", &U64, writable) < 0
            || get_items(go, &tb->g, "table: tags", &U8, writable) < 0)
        return -1;
    Py_ssize_t cap = tb->g.len;
    if (cap < 2 || (cap & (cap - 1)) || tb->s.len / 24 != cap || tb->s.len % 24) {
        PyErr_SetString(PyExc_ValueError, "table: need 2**k tags and 3 * 2**k uint64 slots");
        return -1;
    }
    tb->slot = tb->s.buf;
    tb->tag = tb->g.buf;
    tb->mask = (uint64_t)cap - 1;
    tb->bits = 0;
    while (((uint64_t)1 << tb->bits) < (uint64_t)cap) tb->bits++;
    return 0;
}

/* The key's home slot (the top bits of a multiplicative hash: keys may be
   small or skewed, not only fingerprints) and its tag (the low 7 bits). */
static inline uint64_t table_home(const table *tb, uint64_t hi, uint64_t lo, uint8_t *tag) {
    uint64_t h = (hi ^ (lo << 32 | lo >> 32)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    *tag = (uint8_t)(0x80 | (h & 0x7F));
    return h >> (64 - tb->bits);
}

#define TABLE_FULL UINT64_MAX

/* The slot of key (hi, lo), or of the empty slot where it would go; TABLE_FULL
   if the table is full without it. */
static inline uint64_t table_slot(const table *tb, uint64_t hi, uint64_t lo, uint8_t *tag) {
    uint64_t j = table_home(tb, hi, lo, tag);
    for (uint64_t left = tb->mask + 1; left; left--, j = (j + 1) & tb->mask) {
        uint8_t g = tb->tag[j];
        if (!g || (g == *tag && tb->slot[3 * j] == hi && tb->slot[3 * j + 1] == lo)) return j;
    }
    return TABLE_FULL;
}

/* Open the hi, lo, raw columns (raw written if `raw_out`): n uint64 each. */
static int u64_columns(Py_buffer *b, PyObject *const *o, const char *fn, int raw_out) {
    static const char *names[3] = {"hi", "lo", "raw"};
    char what[48];
    for (int i = 0; i < 3; i++) {
        PyOS_snprintf(what, sizeof what, "%s: %s", fn, names[i]);
        if (get_items(o[i], &b[i], what, &U64, i == 2 && raw_out) < 0) return -1;
    }
    if (b[1].len != b[0].len || b[2].len != b[0].len) {
        PyErr_SetString(PyExc_ValueError, "table: columns of n uint64 each");
        return -1;
    }
    return 0;
}

/* The keys a table holds, counted (only to report a table fuller than its count). */
static Py_ssize_t table_held(const table *tb) {
    Py_ssize_t held = 0;
    for (uint64_t j = 0; j <= tb->mask; j++) held += tb->tag[j] != 0;
    return held;
}

/* table_put(slots, tags, held, hi, lo, raw) -> added

   Keep each record (hi[i], lo[i], raw[i]) in the table, which holds `held`
   keys: a key already there keeps the newer record (the higher seq without the
   tombstone bit; on a tie the later one, as a newest-wins merge). Returns how
   many keys were new to it. Refused unless held + n leaves a slot empty, so
   with a true `held` no error follows the first write. A table found full all
   the same holds more keys than `held`: that raises, with the table's count
   (the records put before stay; the caller's count was wrong before the call). */
static PyObject *table_put(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *so, *go, *ho, *lo_, *ro;
    Py_ssize_t held;
    table tb = {0};
    Py_buffer col[3] = {{0}, {0}, {0}};
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "OOnOOO", &so, &go, &held, &ho, &lo_, &ro)) return NULL;
    PyObject *cols[3] = {ho, lo_, ro};
    if (table_open(&tb, so, go, 1) < 0 || u64_columns(col, cols, "table_put", 0) < 0) goto done;
    Py_ssize_t n = col[0].len / 8, added = 0;
    if (held < 0 || (uint64_t)held + (uint64_t)n > tb.mask) {
        PyErr_SetString(PyExc_ValueError, "table_put: the table would fill up");
        goto done;
    }
    const uint64_t *hi = col[0].buf, *lo = col[1].buf, *raw = col[2].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t tag;
        uint64_t j = table_slot(&tb, hi[i], lo[i], &tag);
        if (j == TABLE_FULL) {
            PyErr_Format(PyExc_ValueError, "table_put: the table is full: it holds %zd keys, "
                         "not %zd", table_held(&tb), held + added);
            goto done;
        }
        uint64_t *rec = tb.slot + 3 * j;
        if (!tb.tag[j]) {
            tb.tag[j] = tag;
            rec[0] = hi[i];
            rec[1] = lo[i];
            rec[2] = raw[i];
            added++;
        } else if ((raw[i] & SEQ_BITS) >= (rec[2] & SEQ_BITS)) {
            rec[2] = raw[i];
        }
    }
    ret = PyLong_FromSsize_t(added);
done:
    table_release(&tb);
    for (int k = 0; k < 3; k++)
        if (col[k].obj) PyBuffer_Release(&col[k]);
    return ret;
}

/* table_find(slots, tags, hi, lo, todo, raw) -> found

   For every key i with todo[i] set (uint8 or bool) that the table holds:
   raw[i] = its raw seq, todo[i] = 0. (A probe round a full table is a miss.) */
static PyObject *table_find(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *so, *go, *ho, *lo_, *to, *ro;
    table tb = {0};
    Py_buffer col[3] = {{0}, {0}, {0}}, t = {0};
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "OOOOOO", &so, &go, &ho, &lo_, &to, &ro)) return NULL;
    PyObject *cols[3] = {ho, lo_, ro};
    if (table_open(&tb, so, go, 0) < 0 || u64_columns(col, cols, "table_find", 1) < 0
            || get_items(to, &t, "table_find: todo", &FLAGS, 1) < 0)
        goto done;
    Py_ssize_t n = col[0].len / 8, found = 0;
    if (t.len != n) {
        PyErr_SetString(PyExc_ValueError, "table_find: todo needs one byte a key");
        goto done;
    }
    const uint64_t *hi = col[0].buf, *lo = col[1].buf;
    uint64_t *raw = col[2].buf;
    uint8_t *todo = t.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!todo[i]) continue;
        uint8_t tag;
        uint64_t j = table_slot(&tb, hi[i], lo[i], &tag);
        if (j != TABLE_FULL && tb.tag[j]) {
            raw[i] = tb.slot[3 * j + 2];
            todo[i] = 0;
            found++;
        }
    }
    ret = PyLong_FromSsize_t(found);
done:
    table_release(&tb);
    for (int k = 0; k < 3; k++)
        if (col[k].obj) PyBuffer_Release(&col[k]);
    if (t.obj) PyBuffer_Release(&t);
    return ret;
}

/* IndexParts(parts): the fingerprint index's parts, newest first, kept open for
   the seen-test's call per page or per URL, which asks about a few keys
   (dedup/index/fpindex.py, held_among). Asking each part in turn from Python
   (table_find, then sorted_find per run) opened six buffers and took a dozen
   Python steps a part: ~4.5 us for one key, most of a "maybe seen" add. Here
   the parts' buffers are opened once, and one call asks them all.

   `parts`: a tuple, newest first, of ("table", slots, tags) (the buffer's hash
   table, as table_find) and ("run", start, shift, bloom or None, fd, off) (a run
   file, as sorted_find with fd >= 0). The run files' descriptors are duplicated,
   so a closed run's number taken by another file is never read; the index drops
   this object whenever its parts change (a flush, a merge, a grown table). */
typedef struct {
    int is_table, shift, fd, wide;
    int waiting;     /* its reads were seen waiting on the disk (see ip_find_run) */
    unsigned calls;  /* its calls that read: one in WAIT_SAMPLE is timed */
    table tb;
    Py_buffer st, bl;
    Py_ssize_t nb;
    int64_t rows, off;
    uint64_t m;
} ip_part;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    ip_part *p;
} IndexParts;

static void ip_dealloc(IndexParts *o) {
    for (Py_ssize_t k = 0; k < o->n; k++) {
        ip_part *q = &o->p[k];
        table_release(&q->tb);
        if (q->st.obj) PyBuffer_Release(&q->st);
        if (q->bl.obj) PyBuffer_Release(&q->bl);
        if (q->fd >= 0) close(q->fd);
    }
    PyMem_Free(o->p);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

static int ip_open_run(ip_part *q, PyObject *spec) {
    PyObject *so, *bo;
    const char *kind;
    int fd;
    long long off;
    if (!PyArg_ParseTuple(spec, "sOiOiL", &kind, &so, &q->shift, &bo, &fd, &off))
        return -1;
    if (get_items(so, &q->st, "IndexParts: a directory", &INT32_OR_64, 0) < 0
            || (bo != Py_None && get_items(bo, &q->bl, "IndexParts: a filter", &U8, 0) < 0))
        return -1;
    q->wide = q->st.itemsize == 8;
    q->nb = q->st.len / q->st.itemsize - 1;
    q->m = (uint64_t)q->bl.len * 8;
    if (q->nb < 1 || q->shift < 1 || q->shift > 63 || off < 0 || fd < 0
            || (q->bl.obj && (!q->m || q->m > ((uint64_t)1 << 32)))) {
        PyErr_SetString(PyExc_ValueError, "IndexParts: bad run arguments");
        return -1;
    }
    q->rows = q->wide ? ((const int64_t *)q->st.buf)[q->nb] : ((const int32_t *)q->st.buf)[q->nb];
    if (q->rows < 0 || q->rows > (INT64_MAX - off) / RECORD) {
        PyErr_SetString(PyExc_ValueError, "IndexParts: the directory's row count is out of range");
        return -1;
    }
    q->off = off;
    q->waiting = 1;  /* until its reads are seen to come from the page cache */
    q->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (q->fd < 0) { PyErr_SetFromErrno(PyExc_OSError); return -1; }
    return 0;
}

static PyObject *ip_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *parts;
    static char *kw[] = {"parts", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kw, &PyTuple_Type, &parts)) return NULL;
    IndexParts *o = (IndexParts *)type->tp_alloc(type, 0);
    if (!o) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    o->p = PyMem_Calloc(n ? (size_t)n : 1, sizeof(ip_part));
    if (!o->p) { Py_DECREF(o); return PyErr_NoMemory(); }
    for (Py_ssize_t k = 0; k < n; k++) {
        ip_part *q = &o->p[k];
        q->fd = -1;
        o->n = k + 1;  /* what dealloc releases */
        PyObject *spec = PyTuple_GET_ITEM(parts, k);
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1
                || !PyUnicode_Check(PyTuple_GET_ITEM(spec, 0))) {
            PyErr_SetString(PyExc_TypeError, "IndexParts: each part is a (kind, ...) tuple");
            goto fail;
        }
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(spec, 0), "table") == 0) {
            if (PyTuple_GET_SIZE(spec) != 3) {
                PyErr_SetString(PyExc_ValueError, "IndexParts: (\"table\", slots, tags)");
                goto fail;
            }
            q->is_table = 1;
            if (table_open(&q->tb, PyTuple_GET_ITEM(spec, 1), PyTuple_GET_ITEM(spec, 2), 0) < 0)
                goto fail;
        } else if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(spec, 0), "run") != 0) {
            PyErr_SetString(PyExc_ValueError, "IndexParts: a part is a \"table\" or a \"run\"");
            goto fail;
        } else if (ip_open_run(q, spec) < 0) {
            goto fail;
        }
    }
    return (PyObject *)o;
fail:
    Py_DECREF(o);
    return NULL;
}

static double ip_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* While a run's reads come from the page cache, one call in WAIT_SAMPLE is timed
   (the clock pair cost ~3% of a cached read's CPU); while they wait, every call. */
#define WAIT_SAMPLE 16

/* One run asked about the keys still todo, as sorted_find from a file: filter,
   directory, one pread of the key's bucket. The GIL is released around the reads
   (and they are read ahead) only while they are seen waiting on the disk (more
   than sortedkeys._WAITING_READ a read): a read from the page cache takes ~0.5 us
   of CPU, and releasing the GIL and taking it back cost ~0.1 us of it, for
   nothing another thread could do meanwhile. A run gone cold holds the GIL
   through at most WAIT_SAMPLE calls' reads before it is seen. 0, or -1 with an
   error set. */
static int ip_find_run(ip_part *q, Py_ssize_t n, const uint64_t *hi, const uint64_t *lo,
                       uint8_t *todo, uint64_t *raw, int64_t (*spans)[2]) {
    const uint8_t *bloom = q->bl.obj ? q->bl.buf : NULL;
    Py_ssize_t reads = 0;
    int64_t most = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        spans[i][0] = spans[i][1] = 0;
        if (!todo[i]) continue;
        if (bloom && !filter_has(bloom, q->m, hi[i], lo[i])) continue;
        uint64_t j = hi[i] >> q->shift;
        if ((Py_ssize_t)j >= q->nb) goto bad;
        int64_t a = q->wide ? ((const int64_t *)q->st.buf)[j] : ((const int32_t *)q->st.buf)[j];
        int64_t b = q->wide ? ((const int64_t *)q->st.buf)[j + 1]
                            : ((const int32_t *)q->st.buf)[j + 1];
        if (a < 0 || b < a || b > q->rows) goto bad;
        if (a == b) continue;
        spans[i][0] = a; spans[i][1] = b;
        reads++;
        if ((b - a) * RECORD > most) most = (b - a) * RECORD;
    }
    if (!reads) return 0;
    uint8_t stack[64 * RECORD], *buf = stack;
    if (most > (int64_t)sizeof stack && !(buf = malloc((size_t)most))) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t failed = -1;
    int err = 0, timed = q->waiting || q->calls++ % WAIT_SAMPLE == 0;
    double began = timed ? ip_now() : 0;
    PyThreadState *released = q->waiting ? PyEval_SaveThread() : NULL;
#ifdef POSIX_FADV_WILLNEED
    if (q->waiting && reads > 1)
        for (Py_ssize_t i = 0; i < n; i++)
            if (spans[i][1] > spans[i][0])
                posix_fadvise(q->fd, q->off + spans[i][0] * RECORD,
                              (spans[i][1] - spans[i][0]) * RECORD, POSIX_FADV_WILLNEED);
#endif
    for (Py_ssize_t i = 0; i < n && failed < 0; i++) {
        int64_t size = (spans[i][1] - spans[i][0]) * RECORD;
        if (!size) continue;
        int64_t at = q->off + spans[i][0] * RECORD;
        if (read_whole(q->fd, buf, size, at, &err) < 0) { failed = i; break; }
        if (bucket_find(buf, size, hi[i], lo[i], &raw[i])) todo[i] = 0;
    }
    if (released) PyEval_RestoreThread(released);
    if (buf != stack) free(buf);
    if (failed >= 0) {
        if (err) { errno = err; PyErr_SetFromErrno(PyExc_OSError); }
        else PyErr_Format(PyExc_ValueError, "run file (fd %d): short read: changed under us", q->fd);
        return -1;
    }
    if (timed)
        q->waiting = ip_now() - began > (double)reads * 5e-6;  /* as sortedkeys._WAITING_READ */
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "IndexParts: directory out of range");
    return -1;
}

/* Ask the parts, newest first, about the n keys (hi, lo) with todo[i] set: a key
   found has todo[i] cleared and its raw seq in raw[i]. 0, or -1 with an error set. */
static int ip_ask(IndexParts *o, Py_ssize_t n, const uint64_t *hi, const uint64_t *lo,
                  uint8_t *todo, uint64_t *raw, int64_t (*spans)[2]) {
    Py_ssize_t left = n;
    for (Py_ssize_t k = 0; k < o->n && left; k++) {
        ip_part *q = &o->p[k];
        if (q->is_table) {
            for (Py_ssize_t i = 0; i < n; i++) {
                if (!todo[i]) continue;
                uint8_t tag;
                uint64_t j = table_slot(&q->tb, hi[i], lo[i], &tag);
                if (j != TABLE_FULL && q->tb.tag[j]) {
                    raw[i] = q->tb.slot[3 * j + 2];
                    todo[i] = 0;
                }
            }
        } else if (ip_find_run(q, n, hi, lo, todo, raw, spans) < 0) {
            return -1;
        }
        left = 0;
        for (Py_ssize_t i = 0; i < n; i++) left += todo[i];
    }
    return 0;
}

/* held(fps) -> list of int: the indexes i, ascending, of the 16-byte fingerprints of
   `fps` (hi || lo, little-endian) that the index holds: a key's first record, in
   the parts newest first, exists and is no tombstone (the seq's top bit). */
#define IP_STACK 64

static PyObject *ip_held(IndexParts *o, PyObject *arg) {
    Py_buffer f = {0};
    PyObject *out = NULL;
    if (PyObject_GetBuffer(arg, &f, PyBUF_SIMPLE) < 0) return NULL;
    if (f.len % 16) {
        PyErr_SetString(PyExc_ValueError, "held: fingerprints are 16 bytes each");
        PyBuffer_Release(&f);
        return NULL;
    }
    Py_ssize_t n = f.len / 16;
    uint64_t s_hi[IP_STACK], s_lo[IP_STACK], s_raw[IP_STACK];
    uint8_t s_todo[IP_STACK];
    int64_t s_spans[IP_STACK][2];
    uint64_t *hi = s_hi, *lo = s_lo, *raw = s_raw;
    uint8_t *todo = s_todo;
    int64_t (*spans)[2] = s_spans;
    void *heap = NULL;
    if (n > IP_STACK) {
        heap = PyMem_Malloc((size_t)n * (3 * sizeof(uint64_t) + 1 + sizeof *spans));
        if (!heap) { PyErr_NoMemory(); goto done; }
        hi = heap; lo = hi + n; raw = lo + n;
        spans = (int64_t (*)[2])(raw + n);
        todo = (uint8_t *)(spans + n);
    }
    const unsigned char *b = f.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(&hi[i], b + 16 * i, 8);
        memcpy(&lo[i], b + 16 * i + 8, 8);
#if !PY_LITTLE_ENDIAN
        hi[i] = __builtin_bswap64(hi[i]); lo[i] = __builtin_bswap64(lo[i]);
#endif
        todo[i] = 1;
        raw[i] = 0;
    }
    if (ip_ask(o, n, hi, lo, todo, raw, spans) < 0) goto done;
    out = PyList_New(0);
    if (!out) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (todo[i] || raw[i] & ~SEQ_BITS) continue;  /* not held, or forgotten */
        if (append_index(out, i) < 0) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    PyMem_Free(heap);
    PyBuffer_Release(&f);
    return out;
}

/* waiting() -> list of bool: for each run part, newest first, whether its reads were
   last seen waiting on the disk (so read ahead, with the GIL released; see ip_find_run). */
static PyObject *ip_waiting(IndexParts *o, PyObject *Py_UNUSED(arg)) {
    PyObject *out = PyList_New(0);
    for (Py_ssize_t k = 0; out && k < o->n; k++)
        if (!o->p[k].is_table && PyList_Append(out, o->p[k].waiting ? Py_True : Py_False) < 0)
            Py_CLEAR(out);
    return out;
}

static PyMethodDef ip_methods[] = {
    {"held", (PyCFunction)ip_held, METH_O,
     "held(fps) -> indexes of the 16-byte fingerprints the parts hold (not forgotten)"},
    {"waiting", (PyCFunction)ip_waiting, METH_NOARGS,
     "waiting() -> per run, newest first: its reads were last seen waiting on the disk"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IndexPartsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dedup.native._lookup.IndexParts",
    .tp_basicsize = sizeof(IndexParts),
    .tp_dealloc = (destructor)ip_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "IndexParts(parts): the index's parts, newest first, kept open for a few "
              "keys' lookups",
    .tp_methods = ip_methods,
    .tp_new = ip_new,
};

static PyMethodDef methods[] = {
    {"sorted_find", sorted_find, METH_VARARGS,
     "sorted_find(start, shift, bloom, fd, off, cols, hi, lo, todo, raw, readahead) -> reads"},
    {"filter_set", filter_set, METH_VARARGS,
     "filter_set(bloom, hi, lo): set the three filter bits of every key"},
    {"table_put", table_put, METH_VARARGS,
     "table_put(slots, tags, held, hi, lo, raw) -> added"},
    {"table_find", table_find, METH_VARARGS,
     "table_find(slots, tags, hi, lo, todo, raw) -> found"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dedup.native._lookup",
    "The exact seen-test's index lookups, compiled (see dedup/index/sortedkeys.py, "
    "dedup/index/fptable.py)",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lookup(void) {
    if (PyType_Ready(&IndexPartsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&IndexPartsType);
    if (PyModule_AddObject(m, "IndexParts", (PyObject *)&IndexPartsType) < 0) {
        Py_DECREF(&IndexPartsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
