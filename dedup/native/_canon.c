/* The canonicalizer's common case, compiled: a page's links to (fetch_url, key).

Why C: dedup.url.canonical resolves a link through ada's Python binding and then
a few regex and string passes (dedup/url/urlform.py), ~5 us a link, half of
what a link costs the crawl. The WHATWG work for an ordinary http(s) href is a
few hundred nanoseconds in one pass over its bytes.

What is handled here is a deliberately small part of the WHATWG URL standard,
the part real pages are made of: an ASCII link, absolute http(s) ("scheme://"),
scheme-relative ("//host"), origin-relative ("/x"), path-relative ("x", "../x"),
query-only ("?q"), fragment-only and empty, against an http(s) page whose
contexts dedup.url.urlform.page_contexts computed with ada; a host of ASCII
letters, digits, '-', '_' and non-empty dot-separated labels, not ending in a
number (IPv4) unless it is four decimal numbers of 0..255 ("127.0.0.1", which
WHATWG writes as it is), and without "xn-" (IDNA); a port of 1 to 5 digits
without a leading zero.
Links with any other scheme are rejected here (None), as the Python path
rejects them: whatever WHATWG makes of them, it is not http(s).

Everything else is "not handled" and goes to the Python path: non-ASCII text,
control characters, tabs and newlines, backslashes, userinfo, IPv6 hosts,
other IPv4 forms (hex, octal, fewer parts), IDNA, empty labels, odd ports, "%2e"
(a dot the standard decodes in path segments), "http:x" (relative to an http page), "///x", a str subclass or any
non-str item, links or page contexts longer than MAX_TEXT, and results that
do not fit the buffers. Being unsure is always correct, only slower.

The result is byte for byte dedup.url.urlform's: the WHATWG href (path and query
percent-encode sets, dot segments, lowercase scheme and host, default port
dropped), then `finish` (fragment dropped, escapes normalized: hex uppercased,
unreserved characters decoded, a stray '%' written "%25"; longer than
max_length: rejected), then `dedup_key` (empty parameters and tracking
parameters dropped, names compared lowercased, the rest stably sorted by name).
tests/dedup/test_canonical_diff.py compares the two on millions of links.

SeenCore (dedup/native/_seencore.h, included below) goes one step further for
UrlSeen (dedup/store/seen.py): the seen-test core, which resolves a page's links here,
fingerprints each key as text and looks it up in its own cache and pending keys in
the same pass, so a repeat, most links of a page, costs no Python object at all.

Every write goes through a bounds-checked buffer (overflow: not handled), every
read is below a length taken from the str, and the links are read from a tuple
of our own that holds each of them (an allocation may run a finalizer, which may
change the caller's list: not this tuple, nor the immutable strs in it).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "_buffers.h"
#include "_murmur.h"
#include "_probe.h"

#define MAX_TEXT 4096      /* longer links or contexts: the Python path */
#define RAW_CAP 32768       /* >= MAX_TEXT (context) + 3 * MAX_TEXT (encoded link) + slack */
#define MAX_PARAMS 256      /* more query parameters: the Python path */

/* -- character classes ----------------------------------------------------------------- */

enum {
    C_BAD = 1,       /* control, DEL, backslash: the Python path */
    C_SCHEME = 2,    /* after the first letter of a scheme */
    C_HOST = 4,      /* host characters besides '.' */
    C_PATH_ENC = 8,  /* percent-encoded in an http(s) path */
    C_QUERY_ENC = 16,/* percent-encoded in an http(s) query */
    C_HEX = 32,
    C_UNRESERVED = 64,
    C_ALPHA = 128,
    C_STOP = 256,    /* where link_span looks closer: C_BAD, '#', '%' */
    C_SEG_END = 512, /* '/' and '?': where a path segment ends */
    C_HOST_PLAIN = 1024, /* C_HOST but 'x' and 'X' (the start of "xn-", IDNA) */
    C_UPPER = 2048,
    C_PCT = 4096,    /* '%' */
};

static uint16_t cls[256];

static void init_classes(void) {
    for (int c = 0; c < 256; c++) {
        unsigned k = 0;
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int num = c >= '0' && c <= '9';
        if (c < 0x20 || c >= 0x7F || c == '\\') k |= C_BAD;
        if (alpha) k |= C_ALPHA;
        if (alpha || num || c == '+' || c == '-' || c == '.') k |= C_SCHEME;
        if (alpha || num || c == '-' || c == '_') k |= C_HOST;
        if (c == ' ' || c == '"' || c == '<' || c == '>' || c == '^' || c == '`' || c == '{'
                || c == '}')
            k |= C_PATH_ENC;
        if (c == ' ' || c == '"' || c == '\'' || c == '<' || c == '>') k |= C_QUERY_ENC;
        if (num || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')) k |= C_HEX;
        if (alpha || num || c == '-' || c == '.' || c == '_' || c == '~') k |= C_UNRESERVED;
        if ((k & C_BAD) || c == '#' || c == '%') k |= C_STOP;
        if (c == '/' || c == '?') k |= C_SEG_END;
        if ((k & C_HOST) && (c | 0x20) != 'x') k |= C_HOST_PLAIN;
        if (c >= 'A' && c <= 'Z') k |= C_UPPER;
        if (c == '%') k |= C_PCT;
        cls[c] = (uint16_t)k;
    }
}

static const char HEXU[] = "0123456789ABCDEF";

static int hexval(unsigned char c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

static unsigned char lower(unsigned char c) {
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c | 0x20) : c;
}

/* -- a bounds-checked output buffer ---------------------------------------------------- */

typedef struct { char *p; Py_ssize_t n, cap; int over; } buf_t;

static inline void put(buf_t *b, char c) {
    if (b->n < b->cap) b->p[b->n++] = c; else b->over = 1;
}

static inline void put_n(buf_t *b, const char *s, Py_ssize_t n) {
    if (n <= b->cap - b->n) { memcpy(b->p + b->n, s, (size_t)n); b->n += n; } else b->over = 1;
}

static inline void put_escaped(buf_t *b, unsigned char c) {
    put(b, '%'); put(b, HEXU[c >> 4]); put(b, HEXU[c & 15]);
}

/* -- compiled rules (a capsule) -------------------------------------------------------- */

typedef struct { const char *s; Py_ssize_t n; } name_t;

typedef struct {
    Py_ssize_t max_length;
    int sort_query;
    Py_ssize_t n_exact, n_prefix;
    name_t *exact, *prefix;   /* point into `store` */
    char *store;
    /* what param_dropped asks first, so that most names meet no comparison: */
    unsigned char first[256]; /* 1: some name (exact or prefix) begins with this character */
    int empty;                /* an empty name (a "*" prefix) */
    uint64_t exact_len;       /* bit n: an exact name of n characters (bit 63: 63 or more) */
} rules_t;

static const char RULES_NAME[] = "dedup.native._canon.rules";

static void rules_free(PyObject *capsule) {
    rules_t *r = PyCapsule_GetPointer(capsule, RULES_NAME);
    if (!r) { PyErr_Clear(); return; }
    PyMem_Free(r->exact); PyMem_Free(r->prefix); PyMem_Free(r->store); PyMem_Free(r);
}

/* The ASCII names of a tuple of str, copied into `store` from `*at`. A non-ASCII name
   is left out: it can never equal a lowercased ASCII parameter name, nor prefix one. */
static Py_ssize_t copy_names(PyObject *names, name_t *dst, char *store, Py_ssize_t *at) {
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *o = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_IS_ASCII(o)) continue;
        Py_ssize_t n = PyUnicode_GET_LENGTH(o);
        memcpy(store + *at, PyUnicode_1BYTE_DATA(o), (size_t)n);
        dst[k].s = store + *at; dst[k].n = n;
        *at += n; k++;
    }
    return k;
}

static int check_names(PyObject *names, const char *what, Py_ssize_t *total) {
    if (!PyTuple_CheckExact(names)) {
        PyErr_Format(PyExc_TypeError, "%s must be a tuple of str", what);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *o = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_CheckExact(o)) {
            PyErr_Format(PyExc_TypeError, "%s must be a tuple of str", what);
            return -1;
        }
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(o) < 0) return -1;
#endif
        if (PyUnicode_GET_LENGTH(o) > PY_SSIZE_T_MAX / 4 - *total) {
            PyErr_NoMemory();
            return -1;
        }
        *total += PyUnicode_GET_LENGTH(o);
    }
    return 0;
}

/* compile_rules(max_length, sort_query, exact, prefixes) -> capsule */
static PyObject *compile_rules(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_ssize_t max_length; int sort_query; PyObject *exact, *prefixes;
    if (!PyArg_ParseTuple(args, "npOO", &max_length, &sort_query, &exact, &prefixes))
        return NULL;
    if (max_length < 1) {
        PyErr_SetString(PyExc_ValueError, "max_length must be positive");
        return NULL;
    }
    Py_ssize_t total = 0;
    if (check_names(exact, "exact", &total) < 0 || check_names(prefixes, "prefixes", &total) < 0)
        return NULL;
    rules_t *r = PyMem_Calloc(1, sizeof(rules_t));
    if (!r) return PyErr_NoMemory();
    r->max_length = max_length;
    r->sort_query = sort_query;
    r->exact = PyMem_Calloc((size_t)PyTuple_GET_SIZE(exact) + 1, sizeof(name_t));
    r->prefix = PyMem_Calloc((size_t)PyTuple_GET_SIZE(prefixes) + 1, sizeof(name_t));
    r->store = PyMem_Malloc((size_t)total + 1);
    if (!r->exact || !r->prefix || !r->store) {
        PyMem_Free(r->exact); PyMem_Free(r->prefix); PyMem_Free(r->store); PyMem_Free(r);
        return PyErr_NoMemory();
    }
    Py_ssize_t at = 0;
    r->n_exact = copy_names(exact, r->exact, r->store, &at);
    r->n_prefix = copy_names(prefixes, r->prefix, r->store, &at);
    for (Py_ssize_t i = 0; i < r->n_exact + r->n_prefix; i++) {
        const name_t *e = i < r->n_exact ? &r->exact[i] : &r->prefix[i - r->n_exact];
        if (e->n) r->first[(unsigned char)e->s[0]] = 1; else r->empty = 1;
        if (i < r->n_exact) r->exact_len |= 1ULL << (e->n < 63 ? e->n : 63);
    }
    PyObject *capsule = PyCapsule_New(r, RULES_NAME, rules_free);
    if (!capsule) {
        PyMem_Free(r->exact); PyMem_Free(r->prefix); PyMem_Free(r->store); PyMem_Free(r);
    }
    return capsule;
}

/* -- one link ---------------------------------------------------------------------------- */

/* The page a batch of links is resolved against: the strings of
   dedup.url.urlform.PageContexts (ASCII: serialized by ada, checked anyway). */
typedef struct {
    int present;
    int https;
    int pct;  /* a '%' in a context */
    const char *origin, *dir, *path, *base;
    Py_ssize_t origin_n, dir_n, path_n, base_n;
} page_t;

enum { NOT_HANDLED = 0, HANDLED = 1, REJECTED = 2 };

/* Append the link's path t[p..m) (up to '?') as WHATWG path segments to `raw`,
   whose path starts at `floor`. Returns where the query's '?' is (m if none).
   `any`: link_span's (a segment is copied whole when the link has no character
   to encode). */
static Py_ssize_t append_path(buf_t *raw, Py_ssize_t floor, const unsigned char *t,
                              Py_ssize_t p, Py_ssize_t m, unsigned any) {
    for (;;) {
        Py_ssize_t q = p;
        while (q < m && !(cls[t[q]] & C_SEG_END)) q++;
        int last = q == m || t[q] == '?';
        Py_ssize_t n = q - p;
        if (n == 2 && t[p] == '.' && t[p + 1] == '.') {
            Py_ssize_t w = raw->n;
            if (w > floor) {
                while (w > floor && raw->p[w - 1] != '/') w--;
                raw->n = w > floor ? w - 1 : floor;
            }
            if (last) put(raw, '/');
        } else if (n == 1 && t[p] == '.') {
            if (last) put(raw, '/');
        } else {
            put(raw, '/');
            if (!(any & C_PATH_ENC)) {
                put_n(raw, (const char *)t + p, n);
            } else {
                for (Py_ssize_t i = p; i < q; i++) {
                    unsigned char c = t[i];
                    if (cls[c] & C_PATH_ENC) put_escaped(raw, c); else put(raw, (char)c);
                }
            }
        }
        if (last) return q;
        p = q + 1;
    }
}

static void append_query(buf_t *raw, const unsigned char *t, Py_ssize_t p, Py_ssize_t m,
                         unsigned any) {
    if (!(any & C_QUERY_ENC)) {
        put_n(raw, (const char *)t + p, m - p);
        return;
    }
    for (Py_ssize_t i = p; i < m; i++) {
        unsigned char c = t[i];
        if (cls[c] & C_QUERY_ENC) put_escaped(raw, c); else put(raw, (char)c);
    }
}

/* 1 if t[a..e) is an IPv4 address as WHATWG serializes it: four dot-separated
   decimal numbers of 0..255 without leading zeros ("127.0.0.1"). Its serialization
   is then the text itself; every other numeric host (hex, octal, fewer parts, a
   trailing dot) is left to the Python path. */
static int dotted_quad(const unsigned char *t, Py_ssize_t a, Py_ssize_t e) {
    int parts = 0;
    Py_ssize_t i = a;
    while (i < e) {
        Py_ssize_t d = i;
        int v = 0;
        while (i < e && t[i] >= '0' && t[i] <= '9' && i - d < 3) v = v * 10 + (t[i++] - '0');
        Py_ssize_t n = i - d;
        if (n == 0 || v > 255 || (n > 1 && t[d] == '0')) return 0;
        if (++parts > 4) return 0;
        if (i == e) break;
        if (t[i] != '.' || i + 1 == e) return 0;
        i++;
    }
    return parts == 4;
}

/* "host[:port]" of the authority at t[a..m) (up to the first '/' or '?') appended
   lowercased, the default port of the scheme dropped: where the authority ends, or
   -1 if not handled. One pass over the host finds its end and checks it. */
static Py_ssize_t append_authority(buf_t *raw, const unsigned char *t, Py_ssize_t a,
                                   Py_ssize_t m, int https) {
    Py_ssize_t h = a;
    Py_ssize_t label = a;   /* start of the current label */
    unsigned seen = 0;
    for (; h < m; h++) {
        unsigned char c = t[h];
        unsigned k = cls[c];
        seen |= k;
        if (k & C_HOST_PLAIN) continue;
        if (c == '.') {
            if (h == label) return -1;         /* empty label */
            label = h + 1;
        } else if (k & C_HOST) {               /* 'x' */
            if (h + 2 < m && (t[h + 1] | 0x20) == 'n' && t[h + 2] == '-') return -1;  /* IDNA */
        } else if (c == ':' || (k & C_SEG_END)) {
            break;
        } else {
            return -1;
        }
    }
    if (h == label) return -1;                 /* empty host, trailing dot */
    if (t[label] >= '0' && t[label] <= '9' && !dotted_quad(t, a, h))
        return -1;                             /* ends in a number: IPv4, not "a.b.c.d" */
    Py_ssize_t at = raw->n;
    put_n(raw, (const char *)t + a, h - a);
    if ((seen & C_UPPER) && !raw->over)
        for (Py_ssize_t i = at; i < raw->n; i++) raw->p[i] = (char)lower((unsigned char)raw->p[i]);
    if (h == m || t[h] != ':') return h;
    Py_ssize_t d = h + 1, e = d;              /* ':' port: decimal digits only */
    while (e < m && t[e] >= '0' && t[e] <= '9') e++;
    Py_ssize_t n = e - d;
    if ((e < m && !(cls[t[e]] & C_SEG_END)) || n < 1 || n > 5 || (t[d] == '0' && n > 1))
        return -1;
    long port = 0;
    for (Py_ssize_t i = d; i < e; i++) port = port * 10 + (t[i] - '0');
    if (port > 65535) return -1;
    if (port != (https ? 443 : 80)) {
        put(raw, ':');
        put_n(raw, (const char *)t + d, n);
    }
    return e;
}

/* The WHATWG href (without fragment) of link t[0..m) into `raw`; `any` as link_span's. */
static int whatwg_href(buf_t *raw, const unsigned char *t, Py_ssize_t m, const page_t *pg,
                       unsigned any) {
    Py_ssize_t floor, p, query;
    if (m == 0) {                               /* "" or "#..." : the page itself */
        if (!pg->present) return NOT_HANDLED;
        put_n(raw, pg->base, pg->base_n);
        return HANDLED;
    }
    Py_ssize_t k = 0;
    if (cls[t[0]] & C_ALPHA) {
        k = 1;
        while (k < m && (cls[t[k]] & C_SCHEME)) k++;
        if (k == m || t[k] != ':') k = 0;
    }
    int https;
    Py_ssize_t a;                               /* authority start */
    if (k) {
        https = k == 5 && (t[4] | 0x20) == 's';
        if (!((k == 4 || https) && (t[0] | 0x20) == 'h' && (t[1] | 0x20) == 't'
              && (t[2] | 0x20) == 't' && (t[3] | 0x20) == 'p'))
            return REJECTED;                    /* another scheme: never http(s) */
        /* only "scheme://host": "http:x" and "http:/x" depend on the page's scheme */
        if (k + 3 > m || t[k + 1] != '/' || t[k + 2] != '/') return NOT_HANDLED;
        a = k + 3;
        put_n(raw, https ? "https://" : "http://", https ? 8 : 7);
    } else if (!pg->present) {
        return NOT_HANDLED;
    } else if (t[0] == '/' && m > 1 && t[1] == '/') {
        https = pg->https;
        a = 2;
        put_n(raw, https ? "https://" : "http://", https ? 8 : 7);
    } else if (t[0] == '/') {
        put_n(raw, pg->origin, pg->origin_n);
        floor = pg->origin_n;
        p = 1;
        goto path;
    } else if (t[0] == '?') {
        put_n(raw, pg->path, pg->path_n);
        query = 0;
        goto query;
    } else {
        /* the page's directory without its last '/': its path minus the last segment */
        put_n(raw, pg->dir, pg->dir_n - 1);
        floor = pg->origin_n;
        p = 0;
        goto path;
    }
    /* an authority */
    {
        Py_ssize_t e = append_authority(raw, t, a, m, https);
        if (e < 0) return NOT_HANDLED;
        floor = raw->n;
        if (e < m && t[e] == '/') {
            p = e + 1;
        } else {                                /* no path: "/" */
            put(raw, '/');
            query = e;
            goto query;
        }
    }
path:
    query = append_path(raw, floor, t, p, m, any);
query:
    if (query < m) {
        put(raw, '?');
        append_query(raw, t, query + 1, m, any);
    }
    return HANDLED;
}

/* `finish`'s escapes: hex uppercased, unreserved decoded, a stray '%' as "%25". */
static void normalize_escapes(buf_t *out, const char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (;;) {  /* the text up to the next '%' as it is, then the escape */
        const char *pct = memchr(s + i, '%', (size_t)(n - i));
        Py_ssize_t j = pct ? pct - s : n;
        put_n(out, s + i, j - i);
        if (j == n) return;
        i = j;
        if (i + 2 < n && (cls[(unsigned char)s[i + 1]] & C_HEX)
                && (cls[(unsigned char)s[i + 2]] & C_HEX)) {
            unsigned char v = (unsigned char)(hexval((unsigned char)s[i + 1]) * 16
                                              + hexval((unsigned char)s[i + 2]));
            if (cls[v] & C_UNRESERVED) put(out, (char)v); else put_escaped(out, v);
            i += 3;
        } else {
            put_n(out, "%25", 3);
            i += 1;
        }
    }
}

typedef struct { Py_ssize_t at, n, name_n; } param_t;

static int param_dropped(const rules_t *r, const char *s, Py_ssize_t n) {
    if (!r->empty && (n == 0 || !r->first[lower((unsigned char)s[0])])) return 0;
    for (Py_ssize_t i = 0; i < r->n_exact && (r->exact_len >> (n < 63 ? n : 63) & 1); i++) {
        const name_t *e = &r->exact[i];
        if (e->n != n) continue;
        Py_ssize_t j = 0;
        while (j < n && lower((unsigned char)s[j]) == (unsigned char)e->s[j]) j++;
        if (j == n) return 1;
    }
    for (Py_ssize_t i = 0; i < r->n_prefix; i++) {
        const name_t *e = &r->prefix[i];
        if (e->n > n) continue;
        Py_ssize_t j = 0;
        while (j < e->n && lower((unsigned char)s[j]) == (unsigned char)e->s[j]) j++;
        if (j == e->n) return 1;
    }
    return 0;
}

/* Python's str order of two ASCII names. */
static int name_less(const char *s, const param_t *x, const param_t *y) {
    Py_ssize_t n = x->name_n < y->name_n ? x->name_n : y->name_n;
    int c = memcmp(s + x->at, s + y->at, (size_t)n);
    return c < 0 || (c == 0 && x->name_n < y->name_n);
}

static PyObject *ascii_str(const char *s, Py_ssize_t n) {
    PyObject *o = PyUnicode_New(n, 127);
    if (o) memcpy(PyUnicode_1BYTE_DATA(o), s, (size_t)n);
    return o;
}

/* The key of the fetch form s[0..n) (`dedup_key`): *key points at s itself (no
   query, *key_n == n), at s's text before the '?' (no parameter left), or at `tmp`.
   0 when not handled (more than MAX_PARAMS parameters kept). */
static int key_of(const char *s, Py_ssize_t n, const rules_t *r, buf_t *tmp,
                  const char **key, Py_ssize_t *key_n) {
    const char *mark = memchr(s, '?', (size_t)n);
    Py_ssize_t q = mark ? mark - s : n;
    *key = s;
    *key_n = q;
    if (q == n) return 1;
    param_t params[MAX_PARAMS];
    Py_ssize_t count = 0;
    Py_ssize_t p = q + 1;
    while (p <= n) {
        Py_ssize_t e = p;
        while (e < n && s[e] != '&') e++;
        if (e > p) {
            Py_ssize_t name_n = 0;
            while (p + name_n < e && s[p + name_n] != '=') name_n++;
            if (!param_dropped(r, s + p, name_n)) {
                if (count == MAX_PARAMS) return 0;
                params[count].at = p; params[count].n = e - p;
                params[count].name_n = name_n;
                count++;
            }
        }
        p = e + 1;
    }
    if (count == 0) return 1;
    if (r->sort_query) {                /* insertion sort: stable */
        for (Py_ssize_t i = 1; i < count; i++) {
            param_t x = params[i];
            Py_ssize_t j = i;
            while (j > 0 && name_less(s, &x, &params[j - 1])) {
                params[j] = params[j - 1];
                j--;
            }
            params[j] = x;
        }
    }
    tmp->n = 0; tmp->over = 0;
    put_n(tmp, s, q + 1);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i) put(tmp, '&');
        put_n(tmp, s + params[i].at, params[i].n);
    }
    if (tmp->over) return 0;            /* cannot be: the key is shorter */
    *key = tmp->p;
    *key_n = tmp->n;
    return 1;
}

typedef struct { char raw[RAW_CAP], fetch[RAW_CAP], key[RAW_CAP]; } scratch_t;

#define C_ENC (C_PATH_ENC | C_QUERY_ENC)

#if defined(__SSE2__)
static inline __m128i eq8(__m128i v, char c) { return _mm_cmpeq_epi8(v, _mm_set1_epi8(c)); }

/* Of the 16 characters at s: 0 if one is a C_STOP character (link_span looks at it
   closer), else 1, *enc set to C_ENC if one is to be percent-encoded. */
static inline int plain16(const unsigned char *s, unsigned *enc) {
    __m128i v = _mm_loadu_si128((const __m128i *)s);
    __m128i stop = _mm_or_si128(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),  /* and >= 0x80 */
                                _mm_or_si128(eq8(v, 0x7F), eq8(v, '\\')));
    stop = _mm_or_si128(stop, _mm_or_si128(eq8(v, '#'), eq8(v, '%')));
    if (_mm_movemask_epi8(stop)) return 0;
    __m128i e = _mm_or_si128(_mm_or_si128(eq8(v, ' '), eq8(v, '"')),
                             _mm_or_si128(eq8(v, '\''), eq8(v, '<')));
    e = _mm_or_si128(e, _mm_or_si128(_mm_or_si128(eq8(v, '>'), eq8(v, '^')),
                                     _mm_or_si128(eq8(v, '`'), eq8(v, '{'))));
    e = _mm_or_si128(e, eq8(v, '}'));
    if (_mm_movemask_epi8(e)) *enc = C_ENC;
    return 1;
}
#endif

/* The part of the ASCII str `link` (not longer than MAX_TEXT) WHATWG parses, s[i..end):
   spaces around it and the fragment left out; 0 where this path does not handle it
   (control characters, a backslash, "%2e": a dot in a path segment). *any has
   C_PATH_ENC or C_QUERY_ENC where the link may hold a character of that set (a
   space around it counts), so that whatwg_href copies its text whole when not,
   and C_PCT where it holds a '%' (a C_STOP character: never in a plain16 block). */
static int link_span(PyObject *link, const unsigned char **text, Py_ssize_t *start,
                     Py_ssize_t *stop, unsigned *any) {
    if (!PyUnicode_IS_ASCII(link)) return 0;
    Py_ssize_t len = PyUnicode_GET_LENGTH(link);
    if (len > MAX_TEXT) return 0;
    const unsigned char *s = PyUnicode_1BYTE_DATA(link);
    Py_ssize_t i = 0;
    while (i < len && s[i] == ' ') i++;
    Py_ssize_t end = i;
    unsigned seen = 0;
#if defined(__SSE2__)
    /* 16 characters at a time, the last 16 of the link last (again in part), while none
       is one to look at closer: from the first such block on, one at a time below */
    while (end + 16 <= len && plain16(s + end, &seen)) end += 16;
    if (end < len && end + 16 > len && len - i >= 16 && plain16(s + len - 16, &seen))
        end = len;
#endif
    for (; end < len; end++) {
        unsigned char c = s[end];
        unsigned k = cls[c];
        if (k & C_STOP) {
            if (c == '#') break;
            if (k & C_BAD) return 0;
            if (end + 2 < len && s[end + 1] == '2' && (s[end + 2] | 0x20) == 'e')
                return 0;                       /* '%' */
        }
        seen |= k;
    }
    if (end == len)
        while (end > i && s[end - 1] == ' ') end--;
    *text = s;
    *start = i;
    *stop = end;
    *any = seen & (C_ENC | C_PCT);
    return 1;
}

/* One link's fetch form and key, as text in `sc` (the key may be the fetch form
   or its start): HANDLED, REJECTED or NOT_HANDLED. No Python object is made: a
   link the confirm cache holds (most of them) needs none. */
static int resolve_text(PyObject *link, const page_t *pg, const rules_t *r, scratch_t *sc,
                        const char **fetch_s, Py_ssize_t *fetch_n,
                        const char **key_s, Py_ssize_t *key_n) {
    if (!PyUnicode_CheckExact(link)) return NOT_HANDLED;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(link) < 0) { PyErr_Clear(); return NOT_HANDLED; }
#endif
    const unsigned char *s;
    Py_ssize_t i, end;
    unsigned any;
    if (!link_span(link, &s, &i, &end, &any)) return NOT_HANDLED;
    buf_t raw = {sc->raw, 0, RAW_CAP, 0};
    int how = whatwg_href(&raw, s + i, end - i, pg, any);
    if (how == NOT_HANDLED || raw.over) return NOT_HANDLED;
    if (how == REJECTED) return REJECTED;
    /* `finish`'s escapes leave the href as it is unless the link or the page has a '%':
       whatwg_href's own escapes are already as `finish` writes them */
    buf_t fetch = raw;
    if ((any & C_PCT) || pg->pct) {
        fetch = (buf_t){sc->fetch, 0, RAW_CAP, 0};
        normalize_escapes(&fetch, raw.p, raw.n);
        if (fetch.over) return NOT_HANDLED;
    }
    if (fetch.n > r->max_length) return REJECTED;
    buf_t key = {sc->key, 0, RAW_CAP, 0};
    if (!key_of(fetch.p, fetch.n, r, &key, key_s, key_n)) return NOT_HANDLED;
    *fetch_s = fetch.p;
    *fetch_n = fetch.n;
    return HANDLED;
}

/* (fetch, key) as a new tuple of two ASCII strs (one str twice when they are equal). */
static PyObject *pair_of(const char *f, Py_ssize_t fn, const char *k, Py_ssize_t kn) {
    PyObject *fetch = ascii_str(f, fn);
    if (!fetch) return NULL;
    PyObject *key;
    if (k == f && kn == fn) {
        key = fetch;
        Py_INCREF(key);
    } else if (!(key = ascii_str(k, kn))) {
        Py_DECREF(fetch);
        return NULL;
    }
    PyObject *pair = PyTuple_New(2);
    if (!pair) { Py_DECREF(fetch); Py_DECREF(key); return NULL; }
    PyTuple_SET_ITEM(pair, 0, fetch);
    PyTuple_SET_ITEM(pair, 1, key);
    return pair;
}

/* The result of one link: a new reference to (fetch, key) or None (rejected), NULL
   with *handled = 0 when not handled, NULL with an error set on failure. */
static PyObject *resolve_one(PyObject *link, const page_t *pg, const rules_t *r,
                             scratch_t *sc, int *handled) {
    const char *f = NULL, *k = NULL;
    Py_ssize_t fn = 0, kn = 0;
    int how = resolve_text(link, pg, r, sc, &f, &fn, &k, &kn);
    *handled = how != NOT_HANDLED;
    if (how == NOT_HANDLED) return NULL;
    if (how == REJECTED) Py_RETURN_NONE;
    return pair_of(f, fn, k, kn);
}

static int context(PyObject *page, Py_ssize_t i, const char **s, Py_ssize_t *n) {
    PyObject *o = PyTuple_GET_ITEM(page, i);
    if (!PyUnicode_CheckExact(o)) return 0;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(o) < 0) { PyErr_Clear(); return 0; }
#endif
    if (!PyUnicode_IS_ASCII(o) || PyUnicode_GET_LENGTH(o) > MAX_TEXT) return 0;
    *s = (const char *)PyUnicode_1BYTE_DATA(o);
    *n = PyUnicode_GET_LENGTH(o);
    return 1;
}

/* Fill `pg` from a dedup.url.urlform.PageContexts (scheme, scheme_ctx, origin_ctx,
   dir_ctx, base_ctx, path_ctx) or None; 0 if no link of the page can be handled here. */
static int read_page(PyObject *page, page_t *pg) {
    memset(pg, 0, sizeof(*pg));
    if (page == Py_None) return 1;
    if (!PyTuple_Check(page) || PyTuple_GET_SIZE(page) != 6) return 0;
    const char *scheme; Py_ssize_t scheme_n;
    if (!context(page, 0, &scheme, &scheme_n) || !context(page, 2, &pg->origin, &pg->origin_n)
            || !context(page, 3, &pg->dir, &pg->dir_n)
            || !context(page, 4, &pg->base, &pg->base_n)
            || !context(page, 5, &pg->path, &pg->path_n))
        return 0;
    if (scheme_n == 4 && memcmp(scheme, "http", 4) == 0) pg->https = 0;
    else if (scheme_n == 5 && memcmp(scheme, "https", 5) == 0) pg->https = 1;
    else return 0;
    /* the shape page_contexts gives: origin "scheme://authority", dir and path
       below it, dir ending in '/' */
    Py_ssize_t sn = scheme_n + 3;
    if (pg->origin_n <= sn || memcmp(pg->origin, scheme, (size_t)scheme_n) != 0
            || memcmp(pg->origin + scheme_n, "://", 3) != 0
            || pg->dir_n <= pg->origin_n || pg->dir[pg->dir_n - 1] != '/'
            || memcmp(pg->dir, pg->origin, (size_t)pg->origin_n) != 0
            || pg->dir[pg->origin_n] != '/')
        return 0;
    pg->present = 1;
    pg->pct = memchr(pg->dir, '%', (size_t)pg->dir_n)  /* dir begins with origin */
              || memchr(pg->path, '%', (size_t)pg->path_n)
              || memchr(pg->base, '%', (size_t)pg->base_n);
    return 1;
}

/* page_contexts(base) -> (scheme, scheme_ctx, origin_ctx, dir_ctx, base_ctx, path_ctx)
   or None: dedup.url.urlform.page_contexts of an absolute http(s) page URL this path
   handles (the same WHATWG href, then cut the same way), None for any other (ada's
   Python path parses it). A page's contexts were ~7 us of Python and ada a page,
   paid by every page's call. */
static PyObject *page_contexts(PyObject *Py_UNUSED(self), PyObject *base) {
    if (!PyUnicode_CheckExact(base)) Py_RETURN_NONE;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(base) < 0) return NULL;
#endif
    const unsigned char *s;
    Py_ssize_t i, end;
    unsigned any;
    if (!link_span(base, &s, &i, &end, &any) || end == i) Py_RETURN_NONE;
    char *store = PyMem_Malloc(RAW_CAP);
    if (!store) return PyErr_NoMemory();
    buf_t raw = {store, 0, RAW_CAP, 0};
    page_t none;
    memset(&none, 0, sizeof(none));
    PyObject *ret = NULL;
    if (whatwg_href(&raw, s + i, end - i, &none, any) != HANDLED || raw.over) {
        ret = Py_None;
        Py_INCREF(ret);
        goto done;
    }
    const char *h = raw.p;
    Py_ssize_t n = raw.n, sn = h[4] == 's' ? 5 : 4, path_start = sn + 3;
    while (path_start < n && h[path_start] != '/') path_start++;
    if (path_start == n) {  /* not the shape whatwg_href gives: ada's path decides */
        ret = Py_None;
        Py_INCREF(ret);
        goto done;
    }
    Py_ssize_t path_end = path_start;
    while (path_end < n && h[path_end] != '?') path_end++;
    Py_ssize_t dir_end = path_end;
    while (h[dir_end - 1] != '/') dir_end--;  /* the path starts with '/' */
    ret = Py_BuildValue("(s#s#s#s#s#s#)", h, sn, h, sn + 1, h, path_start, h, dir_end, h, n,
                        h, path_end);
done:
    PyMem_Free(store);
    return ret;
}

/* resolve_links(links, rules, page) -> (results, pending) */
static PyObject *resolve_links(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *links, *capsule, *page;
    if (!PyArg_ParseTuple(args, "OOO", &links, &capsule, &page)) return NULL;
    rules_t *r = PyCapsule_GetPointer(capsule, RULES_NAME);
    if (!r) return NULL;
    /* a tuple of our own: nothing can change the links while they are read */
    PyObject *seq = PySequence_Tuple(links);
    if (!seq) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    PyObject *pending = PyList_New(0);
    scratch_t *sc = PyMem_Malloc(sizeof(scratch_t));
    if (!out || !pending || !sc) {
        if (!sc) PyErr_NoMemory();
        goto fail;
    }
    page_t pg;
    int usable = read_page(page, &pg);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *link = PyTuple_GET_ITEM(seq, i);
        int handled = 0;
        PyObject *res = usable ? resolve_one(link, &pg, r, sc, &handled) : NULL;
        if (!handled) {
            if (PyErr_Occurred()) goto fail;
            PyObject *index = PyLong_FromSsize_t(i);
            if (!index) goto fail;
            int rc = PyList_Append(pending, index);
            Py_DECREF(index);
            if (rc < 0) goto fail;
            Py_INCREF(link);
            res = link;
        } else if (!res) {
            goto fail;
        }
        PyList_SET_ITEM(out, i, res);
    }
    PyMem_Free(sc);
    Py_DECREF(seq);
    PyObject *result = PyTuple_Pack(2, out, pending);
    Py_DECREF(out);
    Py_DECREF(pending);
    return result;
fail:
    PyMem_Free(sc);
    Py_DECREF(seq);
    Py_XDECREF(out);
    Py_XDECREF(pending);
    return NULL;
}

#include "_seencore.h"

static PyMethodDef methods[] = {
    {"compile_rules", compile_rules, METH_VARARGS,
     "compile_rules(max_length, sort_query, exact, prefixes) -> rules for resolve_links"},
    {"page_contexts", page_contexts, METH_O,
     "page_contexts(base) -> the contexts of an http(s) page URL, or None: not handled here"},
    {"resolve_links", resolve_links, METH_VARARGS,
     "resolve_links(links, rules, page) -> (results, pending): (fetch_url, key) or None\n"
     "per link; at the indexes in pending, the link itself, not handled here"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dedup.native._canon",
    "The canonicalizer's common case, compiled (see dedup/url/canonical.py)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__canon(void) {
    init_classes();
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (core_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
