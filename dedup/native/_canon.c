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

confirm_links and OneLink go one step further for UrlSeen (dedup/store/seen.py):
the key is fingerprinted as text and looked up in the confirm cache's tables and the
pending keys' (dedup/native/_fpset.h) in the same pass, so a repeat, most links of a
page, costs no Python object at all; OneLink (a call a URL) also asks the Bloom filter
(dedup/native/_probe.h) and makes a key it has never held pending; its page() does
a page's whole seen-test in one call (the index asked once, from here, for the keys
the filter may hold), and its add() is UrlSeen.add whole, bound on the instance
(see "add()" below).

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
#include <structmember.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "_fpset.h"
#include "_held.h"
#include "_misses.h"
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

/* Append key k[0..kn) and value f[0..fn) (one str when equal) to the lists `keys`
   and `values`, its fingerprint to the bytearray `fps`: all three or none (-1
   with an error set, the three as they were). */
static int append_miss(PyObject *keys, PyObject *values, PyObject *fps, const char *f,
                       Py_ssize_t fn, const char *k, Py_ssize_t kn, const uint64_t fp[2]) {
    PyObject *pair = pair_of(f, fn, k, kn);
    if (!pair) return -1;
    int rc = append_new(keys, values, fps, pair, fp);
    Py_DECREF(pair);
    return rc;
}

/* confirm_links(links, start, rules, page, seed, young, held, old, half, batch, bheld,
                 keys, values, fps, pend) -> (stop, hits, held, bheld, rejected, compiled, todo)

   resolve_links and the confirm cache's pass (confirm_split, dedup/native/_lookup.c)
   in one: for each link of the tuple `links` from `start`, its key is computed
   here as text and fingerprinted; held in `young` or `old` (moved to `young`),
   a hit; else, unless `batch` holds it (let through earlier in this pass): held in
   `pend` (a table of the same kind, read only, or None: UrlSeen's pending
   admissions), a hit, and it goes to `batch`; else the key, its fetch URL and fingerprint
   are appended to `keys`, `values` and `fps` and it goes to `batch`. The strs
   are made only for those: a hit, most links of a page, makes no object.
   Rejected links are counted (`rejected`), `compiled` counts the links resolved
   here. Stops, as confirm_split, right after an addition that brings `young` to
   `half` or `batch` to half its slots (todo 0), and before a link this path does
   not handle (todo 1; todo = the links left when `page` is not one it can
   take): the caller resolves links[stop:stop + todo] its own way, passes them
   to confirm_split, and calls again from stop + todo. So the keys come out in
   the same order, with the same values, as resolve_links then confirm_split.
   Errors after some links were done are returned, not raised (confirm_split's
   rule): the next call, from stop, raises them. */
static PyObject *confirm_links(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *links, *capsule, *page, *yo, *oo, *bo, *keys, *values, *fps, *po, *ret = NULL;
    Py_ssize_t start, held, half, bheld, hits = 0, rejected = 0, compiled = 0, todo = 0, i;
    long long seed;
    fpset young = {.s = NULL}, old = {.s = NULL}, batch = {.s = NULL}, pend = {.s = NULL};
    scratch_t *sc = NULL;
    if (!PyArg_ParseTuple(args, "O!nOOLOnOnOnO!O!O!O", &PyTuple_Type, &links, &start,
                          &capsule, &page, &seed, &yo, &held, &oo, &half, &bo, &bheld,
                          &PyList_Type, &keys, &PyList_Type, &values, &PyByteArray_Type, &fps,
                          &po))
        return NULL;
    rules_t *r = PyCapsule_GetPointer(capsule, RULES_NAME);
    if (!r) return NULL;
    if (keys == values) {
        PyErr_SetString(PyExc_ValueError, "confirm_links: keys and values must be two lists");
        return NULL;
    }
    if (confirm_open(seed, &young, yo, &old, oo, held, half, &batch, bo, bheld, &pend, po) < 0)
        goto done;
    Py_ssize_t bhalf = (Py_ssize_t)(batch.mask + 1) / 2;
    Py_ssize_t n = PyTuple_GET_SIZE(links), begin;
    i = begin = start < 0 ? 0 : start;
    page_t pg;
    if (!read_page(page, &pg)) {
        todo = n > i ? n - i : 0;
        goto stop;
    }
    sc = PyMem_Malloc(sizeof(scratch_t));
    if (!sc) { PyErr_NoMemory(); goto done; }
    for (; i < n; i++) {
        const char *f = NULL, *k = NULL;
        Py_ssize_t fn = 0, kn = 0;
        int how = resolve_text(PyTuple_GET_ITEM(links, i), &pg, r, sc, &f, &fn, &k, &kn);
        if (how == NOT_HANDLED) { todo = 1; goto stop; }
        compiled++;
        if (how == REJECTED) { rejected++; continue; }
        uint64_t fp[2];
        murmur3_x64_128((const uint8_t *)k, kn, (uint32_t)seed, fp);
        uint64_t hi = fp[0], lo = fp[1], *b = NULL;
        if (hi | lo) {  /* (0, 0) cannot be held: let through each time */
            uint64_t *y = fpset_slot(&young, hi, lo);
            if (y && (y[0] | y[1])) { hits++; continue; }
            const uint64_t *o = fpset_slot(&old, hi, lo);
            if (o && (o[0] | o[1])) {
                if (!y) { fpset_full("young"); goto fail; }
                hits++;
                y[0] = hi;
                y[1] = lo;
                if (++held >= half) { i++; goto stop; }
                continue;
            }
            b = fpset_slot(&batch, hi, lo);
            if (!b) { fpset_full("batch"); goto fail; }
            if (b[0] | b[1]) continue;  /* let through earlier in this pass */
            if (pend.s) {
                /* a hit the first time in the pass, nothing after: as the key's
                   miss, dropped by the caller's pending check, counted before */
                const uint64_t *p = fpset_slot(&pend, hi, lo);
                if (p && (p[0] | p[1])) {
                    hits++;
                    b[0] = hi;
                    b[1] = lo;
                    if (++bheld >= bhalf) { i++; goto stop; }
                    continue;
                }
            }
        }
        if (append_miss(keys, values, fps, f, fn, k, kn, fp) < 0) goto fail;
        if (b) {
            b[0] = hi;
            b[1] = lo;
            if (++bheld >= bhalf) { i++; goto stop; }
        }
    }
stop:
    ret = Py_BuildValue("nnnnnnn", i, hits, held, bheld, rejected, compiled, todo);
    goto done;
fail:
    if (i > begin) {  /* the links before i are done: return them (see above) */
        PyErr_Clear();
        todo = 0;
        goto stop;
    }
done:
    PyMem_Free(sc);
    fpset_release(&young);
    fpset_release(&old);
    fpset_release(&batch);
    fpset_release(&pend);
    return ret;
}

/* OneLink(seed): confirm_links for one link with no pass of its own, for a call a
   URL (UrlSeen.add), where a tuple of results and the pass's tables cost more than
   the work. What one call used to pay most for, asking numpy for three or four
   buffers (~0.3 us each), is paid once here: the object keeps each table's buffer
   (and the page's and the Bloom layers') from one call to the next, and asks again
   only when the caller passes another object, as it does after the confirm cache's
   generations swap or grow, the pending keys are written or grow, or the filter
   gains a layer. A kept buffer holds its array, which numpy then cannot resize in
   place, and the array cannot be freed and its address reused while it is kept.
   release() lets go of them all (UrlSeen.close). */
typedef struct {
    uint64_t row_words, m, k, salt;
    const uint64_t *words;
} one_layer;

/* An attribute add() reads or writes at each call, found once (bind()): a __slots__
   member (at its offset in the object), an entry of the instance's __dict__ (no
   class attribute of that name), or else asked by getattr, as Python would. */
typedef struct { PyObject *name; Py_ssize_t offset; PyObject *dict; } attr_t;

typedef struct {
    PyObject_HEAD
    uint32_t seed;
    fpset young, old, pend;       /* b.obj: the array whose buffer is kept, or NULL */
    PyObject *rules, *page;       /* the last ones passed, held */
    page_t pg;
    int page_ok;
    PyObject *layers;             /* the Bloom layers' tuple last passed, held */
    Py_buffer words[MAXLAYERS], nl;
    one_layer L[MAXLAYERS];
    Py_ssize_t nlay, rows;
    scratch_t *sc;
    struct page_state *ps;        /* page()'s pass, made at its first call */
    /* add(): bound to a UrlSeen's parts by bind(), NULL before and after unbind() */
    PyObject *seen, *cache, *pendk, *canon, *held_among, *slow, *counters;
    PyObject *base, *apage, *arules;  /* add's last base, its page and rules (held) */
    const rules_t *arp;               /* arules' pointer (a capsule's name is a strcmp) */
    page_t apg;
    int base_ok;                      /* add can resolve links against `base` */
    PyObject *bloom, *stack;          /* the filter last read and its layer stack */
    PyObject *krules;                 /* the rules of the last base fast_page took */
    /* the index's lookup asked directly (add_held): the ledger, the index class whose
       kept probe answers as its held_among, the index last read (held), NULL if not */
    PyObject *ledger, *index_type, *index;
    const held_api *held;
    PyObject *zero;                   /* the default depth */
    Py_ssize_t half, keys_limit;      /* the cache's generation; UrlSeen's pending_keys */
    double seconds;                   /* UrlSeen's pending_seconds */
    double coarse_res;                /* CLOCK_MONOTONIC_COARSE's resolution, 0 if none */
    long long counts[10];             /* add's counts not yet folded (fold()) */
    int dirty;
    attr_t a_young, a_old, a_held_c, a_table, a_held, a_pending_n, a_since, a_fps, a_bloom;
    attr_t a_rows, a_layers, a_nlayers;  /* of `stack` */
    attr_t a_index, a_merge, a_probe;    /* of `ledger`, of `index` */
} OneLink;

static void page_free(struct page_state *ps);

static void one_release_layers(OneLink *o) {
    for (Py_ssize_t j = 0; j < o->nlay; j++)
        if (o->words[j].obj) PyBuffer_Release(&o->words[j]);
    if (o->nl.obj) PyBuffer_Release(&o->nl);
    o->nlay = 0;
    Py_CLEAR(o->layers);
}

static void one_release(OneLink *o) {
    fpset_release(&o->young);
    fpset_release(&o->old);
    fpset_release(&o->pend);
    o->young.s = o->old.s = o->pend.s = NULL;
    Py_CLEAR(o->rules);
    Py_CLEAR(o->page);
    one_release_layers(o);
}

static void one_unbind(OneLink *o);

static void one_dealloc(OneLink *o) {
    PyObject_GC_UnTrack(o);
    one_unbind(o);
    one_release(o);
    page_free(o->ps);
    Py_CLEAR(o->zero);
    PyMem_Free(o->sc);
    Py_TYPE(o)->tp_free((PyObject *)o);
}

/* Every attribute slot add() keeps (each may hold a dict): one list for one_unbind,
   which clears them, and one_traverse, which visits them. */
#define ONE_ATTRS(o) {&(o)->a_young, &(o)->a_old, &(o)->a_held_c, &(o)->a_table, \
                      &(o)->a_held, &(o)->a_pending_n, &(o)->a_since, &(o)->a_fps, \
                      &(o)->a_bloom, &(o)->a_rows, &(o)->a_layers, &(o)->a_nlayers, \
                      &(o)->a_index, &(o)->a_merge, &(o)->a_probe}

/* A bound object and its UrlSeen refer to each other (seen.add is its bound method). */
static int one_traverse(OneLink *o, visitproc visit, void *arg) {
    Py_VISIT(o->seen);
    Py_VISIT(o->cache);
    Py_VISIT(o->pendk);
    Py_VISIT(o->canon);
    Py_VISIT(o->held_among);
    Py_VISIT(o->slow);
    Py_VISIT(o->counters);
    Py_VISIT(o->base);
    Py_VISIT(o->apage);
    Py_VISIT(o->bloom);
    Py_VISIT(o->stack);
    Py_VISIT(o->krules);
    Py_VISIT(o->ledger);
    Py_VISIT(o->index_type);
    Py_VISIT(o->index);
    attr_t *at[] = ONE_ATTRS(o);
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) Py_VISIT(at[i]->dict);
    return 0;
}

static int one_clear(OneLink *o) {
    one_unbind(o);
    return 0;
}

static PyObject *one_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    long long seed;
    static char *kw[] = {"seed", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "L", kw, &seed)) return NULL;
    if (seed < 0 || seed > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_ValueError, "seed is out of range");
        return NULL;
    }
    OneLink *o = (OneLink *)type->tp_alloc(type, 0);
    if (!o) return NULL;
    o->seed = (uint32_t)seed;
    o->sc = PyMem_Malloc(sizeof(scratch_t));
    if (!o->sc) { Py_DECREF(o); return PyErr_NoMemory(); }
    return (PyObject *)o;
}

/* Keep `t` open on `obj` (an fpset), opening it again if it is another object. */
static int one_table(fpset *t, PyObject *obj, const char *what, int writable, int *changed) {
    if (t->b.obj == obj) return 0;
    fpset_release(t);
    t->s = NULL;
    *changed = 1;
    if (fpset_open(t, obj, what, writable) < 0) {
        t->b.obj = NULL;
        return -1;
    }
    return 0;
}

/* The Bloom layers (a tuple of (words, row_words, m, k, salt), as stack_maybe takes
   them) and the layers of each of `rows` rows (intp), kept while the same objects
   are passed. */
static int one_bloom(OneLink *o, PyObject *rows_o, PyObject *layers, PyObject *nlayers) {
    Py_ssize_t rows = PyLong_AsSsize_t(rows_o);
    if (rows == -1 && PyErr_Occurred()) return -1;
    if (layers == o->layers && nlayers == o->nl.obj && rows == o->rows) return 0;
    one_release_layers(o);
    if (!PyTuple_Check(layers) || PyTuple_GET_SIZE(layers) < 1
            || PyTuple_GET_SIZE(layers) > MAXLAYERS || rows < 1 || rows > 65536) {
        PyErr_SetString(PyExc_ValueError, "OneLink: 1 to 64 layers, rows 1..65536");
        return -1;
    }
    if (get_items(nlayers, &o->nl, "OneLink: nlayers", &INTP, 0) < 0) return -1;
    if (o->nl.len != rows * (Py_ssize_t)sizeof(Py_ssize_t)) {
        PyErr_SetString(PyExc_ValueError, "OneLink: nlayers must be one intp per row");
        goto fail;
    }
    for (; o->nlay < PyTuple_GET_SIZE(layers); o->nlay++) {
        one_layer *y = &o->L[o->nlay];
        PyObject *w;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(layers, o->nlay), "OKKKK;a layer is (words, "
                              "row_words, m, k, salt)", &w, &y->row_words, &y->m, &y->k,
                              &y->salt)
                || get_items(w, &o->words[o->nlay], "OneLink: words", &U64, 0) < 0)
            goto fail;
        y->words = o->words[o->nlay].buf;
        if (!layer_geometry_ok((uint64_t)o->words[o->nlay].len / 8, y->row_words, y->m, y->k,
                               (uint64_t)rows)) {
            PyErr_SetString(PyExc_ValueError, "OneLink: bad layer geometry");
            o->nlay++;  /* its words are held: released below */
            goto fail;
        }
    }
    o->rows = rows;
    Py_INCREF(layers);
    o->layers = layers;
    return 0;
fail:
    one_release_layers(o);
    return -1;
}

/* May the Bloom layers hold (hi, lo)? A row's layer count is read at each call: the
   filter adds layers to a row in place. */
static int one_maybe(const OneLink *o, uint64_t hi, uint64_t lo, int *maybe) {
    uint64_t row = probe_row(hi, (uint64_t)o->rows);
    Py_ssize_t depth = ((const Py_ssize_t *)o->nl.buf)[row];
    if (depth < 0 || depth > o->nlay) {
        PyErr_SetString(PyExc_ValueError, "OneLink: a row has more layers than given");
        return -1;
    }
    *maybe = 0;
    for (Py_ssize_t j = 0; j < depth && !*maybe; j++) {
        const one_layer *y = &o->L[j];
        *maybe = layer_row_has(y->words + row * y->row_words, y->m, y->k, y->salt, hi, lo);
    }
    return 0;
}

/* The confirm cache's `young` (holding `held` of at most `half` keys) and `old`
   tables and the pending keys' `pend` (or None) kept open, as one_table, and
   checked: no two share memory (asked again only when one changed) and
   held <= half <= 3/4 of the slots. one() and page() both start with it. */
static int one_tables(OneLink *o, PyObject *young, Py_ssize_t held, PyObject *old,
                      Py_ssize_t half, PyObject *po) {
    int changed = 0;
    if (one_table(&o->young, young, "young", 1, &changed) < 0
            || one_table(&o->old, old, "old", 0, &changed) < 0)
        return -1;
    if (po == Py_None) {
        fpset_release(&o->pend);
        o->pend.s = NULL;
    } else if (one_table(&o->pend, po, "pending", 1, &changed) < 0) {
        return -1;
    }
    if (changed && (fpset_overlap(&o->young, &o->old)
                    || (o->pend.s && (fpset_overlap(&o->pend, &o->young)
                                      || fpset_overlap(&o->pend, &o->old))))) {
        PyErr_SetString(PyExc_ValueError, "confirm cache: the young, old and pending tables "
                        "must not share memory");
        fpset_release(&o->young);  /* asked again next call: refused again */
        o->young.s = NULL;
        return -1;
    }
    if (half < 0 || held < 0 || held > half || 4 * (uint64_t)half > 3 * (o->young.mask + 1)) {
        PyErr_SetString(PyExc_ValueError, "confirm cache: held <= half <= 3/4 of the slots");
        return -1;
    }
    return 0;
}

/* one(link, rules, page, young, held, old, half, pend, pend_held, batch, rows, layers,
       nlayers) -> result

   The link resolved against `page` (as confirm_links) and fingerprinted; held in
   `young` or `old` (moved to `young`) or in `pend` (the pending keys' table, or
   None): a hit, the int >= 0 count of `young` after it (the caller swaps or grows
   at `half`, as after confirm_split). -1: the link is rejected; -2: it is not
   handled here (the caller takes resolve_many and confirm_split). A miss: with
   `batch` a bytearray and `layers` (the Bloom filter of `rows` rows, as stack_maybe
   takes them), a miss the filter says is new is appended to `batch` and added to
   `pend` (which holds `pend_held` keys, fewer than half its slots), both or
   neither, and the answer is True: the caller counts one more pending key. Any
   other miss is the tuple (fetch, key, fingerprint), for the caller's own steps. */
static PyObject *one_call(OneLink *o, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "OneLink.one takes 13 arguments");
        return NULL;
    }
    PyObject *link = args[0], *po = args[7], *batch = args[9], *layers = args[11];
    Py_ssize_t held = PyLong_AsSsize_t(args[4]), half = PyLong_AsSsize_t(args[6]);
    Py_ssize_t pend_held = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred()) return NULL;
    if (args[1] != o->rules) {
        rules_t *r = PyCapsule_GetPointer(args[1], RULES_NAME);
        if (!r) return NULL;
        Py_INCREF(args[1]);
        Py_XSETREF(o->rules, args[1]);
    }
    if (args[2] != o->page) {
        Py_INCREF(args[2]);
        Py_XSETREF(o->page, args[2]);
        o->page_ok = read_page(args[2], &o->pg);
    }
    if (one_tables(o, args[3], held, args[5], half, po) < 0) return NULL;
    int insert = batch != Py_None && layers != Py_None && o->pend.s;
    if (insert) {
        if (!PyByteArray_CheckExact(batch)) {
            PyErr_SetString(PyExc_TypeError, "OneLink: batch must be a bytearray or None");
            return NULL;
        }
        if (pend_held < 0 || pend_held >= (Py_ssize_t)(o->pend.mask + 1) / 2) {
            PyErr_SetString(PyExc_ValueError, "OneLink: the pending table is half full");
            return NULL;
        }
        if (one_bloom(o, args[10], layers, args[12]) < 0) return NULL;
    }
    if (!o->page_ok) return PyLong_FromLong(-2);
    const char *f = NULL, *k = NULL;
    Py_ssize_t fn = 0, kn = 0;
    int how = resolve_text(link, &o->pg, PyCapsule_GetPointer(o->rules, RULES_NAME), o->sc,
                           &f, &fn, &k, &kn);
    if (how != HANDLED) return PyLong_FromLong(how == REJECTED ? -1 : -2);
    uint64_t fp[2];
    murmur3_x64_128((const uint8_t *)k, kn, o->seed, fp);
    uint64_t hi = fp[0], lo = fp[1];
    if (hi | lo) {  /* (0, 0) cannot be held: a miss each time, for the caller's steps */
        uint64_t *y = fpset_slot(&o->young, hi, lo);
        if (y && (y[0] | y[1])) return PyLong_FromSsize_t(held);
        const uint64_t *old = fpset_slot(&o->old, hi, lo);
        if (old && (old[0] | old[1])) {
            if (!y) { fpset_full("young"); return NULL; }
            y[0] = hi;
            y[1] = lo;
            return PyLong_FromSsize_t(held + 1);
        }
        if (o->pend.s) {
            uint64_t *p = fpset_slot(&o->pend, hi, lo);
            if (p && (p[0] | p[1])) return PyLong_FromSsize_t(held);
            int maybe = 1;
            if (insert && one_maybe(o, hi, lo, &maybe) < 0) return NULL;
            if (!maybe) {
                if (!p) { fpset_full("pending"); return NULL; }
                Py_ssize_t len = PyByteArray_GET_SIZE(batch);
                if (PyByteArray_Resize(batch, len + 16) < 0) return NULL;  /* neither */
                memcpy(PyByteArray_AS_STRING(batch) + len, fp, 16);
                p[0] = hi;
                p[1] = lo;
                Py_RETURN_TRUE;
            }
        }
    }
    /* the scratch is read before any allocation that may run the garbage collector,
       and so a finalizer that might call this object again: pair_of copies it into
       two strs first */
    PyObject *pair = pair_of(f, fn, k, kn);
    if (!pair) return NULL;
    PyObject *ret = NULL, *digest = PyBytes_FromStringAndSize((const char *)fp, 16);
    if (digest) {
        ret = PyTuple_Pack(3, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1), digest);
        Py_DECREF(digest);
    }
    Py_DECREF(pair);
    return ret;
}

/* -- a page a call: page() ---------------------------------------------------------- */

/* A miss of the page's pass: its fingerprint, its key (a reference held), and what the
   filter and the index said of it. */
enum { MISS_NEW = 0, MISS_MAYBE = 1, MISS_FOUND = 2 };
typedef struct { uint64_t hi, lo; PyObject *key; int said; } page_miss;

/* page()'s pass, kept between the calls of one page and reused by the next page: its
   own table of the keys met (hi, lo and the pass's number, three words a slot: a
   slot of an earlier pass is empty, so nothing is cleared between pages) and its misses. */
struct page_state {
    uint64_t *slots, mask, pass;
    page_miss *miss;
    Py_ssize_t nmiss, cap, hits, rejected, compiled;
    int busy;
    char *ahead;  /* AHEAD_TEXT bytes: the keys of the links resolved ahead (page_ahead) */
};

/* The pass resolves and fingerprints up to AHEAD links before it looks the first of
   them up, and asks for each one's slots in the young, old and pending tables (each
   far larger than the CPU's caches) as it goes: their cache misses overlap instead of
   being waited for one after the other. Resolving has no effect but its text, so
   links resolved ahead of a stop are simply resolved again by the next call. */
#define AHEAD 8
#define AHEAD_TEXT (2 * RAW_CAP)
typedef struct { uint64_t hi, lo; const char *k; Py_ssize_t kn; int how; } ahead_t;

/* Resolve links[i..] (up to AHEAD, and up to the first one not handled here, included)
   into `a`, their keys' text copied to ps->ahead: how many. */
static Py_ssize_t page_ahead(const OneLink *o, struct page_state *ps, PyObject *links,
                             Py_ssize_t i, Py_ssize_t n, int usable, const page_t *pg,
                             const rules_t *r, ahead_t *a) {
    Py_ssize_t got = 0, used = 0;
    for (; i < n && got < AHEAD; i++) {
        const char *f = NULL, *k = NULL;
        Py_ssize_t fn = 0, kn = 0;
        int how = usable ? resolve_text(PyTuple_GET_ITEM(links, i), pg, r, o->sc,
                                        &f, &fn, &k, &kn) : NOT_HANDLED;
        ahead_t *e = &a[got];
        e->how = how;
        if (how != HANDLED) {
            got++;
            if (how == NOT_HANDLED) break;
            continue;
        }
        if (kn > AHEAD_TEXT - used) break;  /* resolved again at the next turn */
        memcpy(ps->ahead + used, k, (size_t)kn);
        e->k = ps->ahead + used;
        e->kn = kn;
        used += kn;
        uint64_t fp[2];
        murmur3_x64_128((const uint8_t *)k, kn, o->seed, fp);
        e->hi = fp[0];
        e->lo = fp[1];
        __builtin_prefetch(o->young.s + 2 * (fp[0] & o->young.mask));
        __builtin_prefetch(o->old.s + 2 * (fp[0] & o->old.mask));
        __builtin_prefetch(o->pend.s + 2 * (fp[0] & o->pend.mask));
        got++;
    }
    return got;
}

static void page_clear(struct page_state *ps) {
    for (Py_ssize_t j = 0; j < ps->nmiss; j++) Py_CLEAR(ps->miss[j].key);
    ps->nmiss = ps->hits = ps->rejected = ps->compiled = 0;
}

static void page_free(struct page_state *ps) {
    if (!ps) return;
    page_clear(ps);
    PyMem_Free(ps->slots);
    PyMem_Free(ps->miss);
    PyMem_Free(ps->ahead);
    PyMem_Free(ps);
}

/* A new pass over n links: the table at most half full even if every link is a key. */
static int page_start(struct page_state *ps, Py_ssize_t n) {
    page_clear(ps);
    uint64_t want = 64;
    while (want < 2 * (uint64_t)n + 2) want *= 2;
    if (!ps->slots || ps->mask + 1 < want) {
        uint64_t *s = PyMem_Calloc((size_t)want, 3 * sizeof(uint64_t));
        if (!s) { PyErr_NoMemory(); return -1; }
        PyMem_Free(ps->slots);
        ps->slots = s;
        ps->mask = want - 1;
        ps->pass = 0;
    }
    if (!ps->ahead && !(ps->ahead = PyMem_Malloc(AHEAD_TEXT))) {
        PyErr_NoMemory();
        return -1;
    }
    ps->pass++;
    return 0;
}

/* The pass's slot of (hi, lo), *met set if this pass holds it already. */
static uint64_t *page_slot(const struct page_state *ps, uint64_t hi, uint64_t lo, int *met) {
    for (uint64_t j = hi & ps->mask;; j = (j + 1) & ps->mask) {
        uint64_t *s = ps->slots + 3 * j;
        if (s[2] != ps->pass) { *met = 0; return s; }
        if (s[0] == hi && s[1] == lo) { *met = 1; return s; }
    }
}

/* Keep a miss (its key reference is taken over, or released on failure). */
static int page_keep(struct page_state *ps, uint64_t hi, uint64_t lo, PyObject *key) {
    if (ps->nmiss == ps->cap) {
        Py_ssize_t cap = ps->cap ? 2 * ps->cap : 64;
        page_miss *m = PyMem_Realloc(ps->miss, (size_t)cap * sizeof(page_miss));
        if (!m) { Py_DECREF(key); PyErr_NoMemory(); return -1; }
        ps->miss = m;
        ps->cap = cap;
    }
    ps->miss[ps->nmiss++] = (page_miss){hi, lo, key, MISS_NEW};
    return 0;
}

/* The error raised during a call, as the answer (-1, held, exception): the caller
   learns the young table's count, which the call may have changed, then raises it. */
static PyObject *page_failed(Py_ssize_t held) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value) PyException_SetTraceback(value, tb);
    PyObject *ret = value ? Py_BuildValue("nnO", (Py_ssize_t)-1, held, value) : NULL;
    if (!ret) {
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return ret;
}

/* The maybe-seen keys asked of the index: `held_among(fps)` answers the indexes of
   those it holds, ascending; they are marked found. -1 with an error set. */
static int page_ask(struct page_state *ps, PyObject *held_among, Py_ssize_t nmaybe,
                    Py_ssize_t *nfound) {
    PyObject *fps = PyBytes_FromStringAndSize(NULL, 16 * nmaybe);
    if (!fps) return -1;
    char *w = PyBytes_AS_STRING(fps);
    for (Py_ssize_t j = 0; j < ps->nmiss; j++)
        if (ps->miss[j].said == MISS_MAYBE) {
            uint64_t f[2] = {ps->miss[j].hi, ps->miss[j].lo};
            memcpy(w, f, 16);
            w += 16;
        }
    PyObject *found = PyObject_CallOneArg(held_among, fps);
    Py_DECREF(fps);
    if (!found) return -1;
    int rc = -1;
    if (!PyList_CheckExact(found)) {
        PyErr_SetString(PyExc_TypeError, "OneLink.page: held_among must answer a list");
        goto done;
    }
    Py_ssize_t at = -1, j = 0, seen = 0;  /* the miss at j is maybe-seen key `seen - 1` */
    for (Py_ssize_t f = 0; f < PyList_GET_SIZE(found); f++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(found, f));
        if (i == -1 && PyErr_Occurred()) goto done;
        if (i <= at || i >= nmaybe) {
            PyErr_SetString(PyExc_ValueError, "OneLink.page: held_among must answer "
                            "ascending indexes of the keys asked");
            goto done;
        }
        at = i;
        for (;; j++)
            if (ps->miss[j].said == MISS_MAYBE && seen++ == i) break;
        ps->miss[j++].said = MISS_FOUND;
    }
    *nfound = PyList_GET_SIZE(found);
    rc = 0;
done:
    Py_DECREF(found);
    return rc;
}

/* page(links, start, fresh, resolved, rules, page, young, held, old, half, pend, pend_held,
        batch, rows, layers, nlayers, held_among)
     -> (stop, held, todo), or (new_keys, held, hits, rejected, compiled, misses, maybe,
        found, rest, pended)

   UrlSeen.filter_new's seen-test of a page in one call where it used to take a
   Python step a stage: confirm_links' pass over the tuple `links` (keys resolved
   against `page` with `rules`, fingerprinted, looked up in `young`, `old` and the
   pending keys' table `pend`, each miss once), then the Bloom probe of the misses
   (`rows`, `layers`, `nlayers` as one() takes them), one call of `held_among` (the
   ledger's) with the maybe-seen ones' fingerprints if there are any, the keys it
   holds added to `young`, and the new ones, in order, appended to the bytearray
   `batch` and added to `pend` (which holds `pend_held` keys, with room for one a
   link): pending admissions. The answer: the new keys (strs, in first-seen order),
   `young`'s count, the counts (hits, rejected links, links resolved here, misses,
   maybe-seen, found in the index), the found keys' fingerprints not added because
   `young` reached `half` (bytes, or None; the caller swaps or grows, then adds
   them) and how many keys went into `pend` ((0, 0) goes to `batch` only).

   The pass stops, answering (stop, held, todo), where the caller has a step to take
   before links[stop:]: `young` reached `half` (todo 0: swap or grow), or a link this
   path does not handle (todo 1; todo = the links left where `page` is not one it
   takes): the caller resolves links[stop:stop + todo] its own way and calls again
   from stop with `fresh` false and those results as `resolved` (a list of
   (fetch, key) or None), which the pass takes in their place. A page's first call
   has `fresh` true. An error is answered (-1, held, exception), not raised: the
   caller keeps the count `young` has, then raises it. Nothing is pended unless all
   went well. */
static PyObject *one_page(OneLink *o, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 17) {
        PyErr_SetString(PyExc_TypeError, "OneLink.page takes 17 arguments");
        return NULL;
    }
    PyObject *links = args[0], *resolved = args[3], *po = args[10], *batch = args[12];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), held = PyLong_AsSsize_t(args[7]);
    Py_ssize_t half = PyLong_AsSsize_t(args[9]), pend_held = PyLong_AsSsize_t(args[11]);
    int fresh = PyObject_IsTrue(args[2]);
    if (PyErr_Occurred() || fresh < 0) return NULL;
    if (!PyTuple_CheckExact(links) || !PyByteArray_CheckExact(batch)
            || (resolved != Py_None && !PyList_CheckExact(resolved))) {
        PyErr_SetString(PyExc_TypeError, "OneLink.page: links a tuple, batch a bytearray, "
                        "resolved a list or None");
        return NULL;
    }
    rules_t *r = PyCapsule_GetPointer(args[4], RULES_NAME);
    if (!r) return NULL;
    if (!o->ps && !(o->ps = PyMem_Calloc(1, sizeof(struct page_state))))
        return PyErr_NoMemory();
    struct page_state *ps = o->ps;
    if (ps->busy) {
        PyErr_SetString(PyExc_RuntimeError, "OneLink.page: called during a call");
        return NULL;
    }
    if (po == Py_None) {
        PyErr_SetString(PyExc_TypeError, "OneLink.page: the pending table is required");
        return NULL;
    }
    if (one_tables(o, args[6], held, args[8], half, po) < 0) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(links);
    if (pend_held < 0 || pend_held + n >= (Py_ssize_t)(o->pend.mask + 1) / 2) {
        PyErr_SetString(PyExc_ValueError, "OneLink.page: the pending table has no room "
                        "for a key a link");
        return NULL;
    }
    if (one_bloom(o, args[13], args[14], args[15]) < 0) return NULL;
    Py_ssize_t nres = resolved == Py_None ? 0 : PyList_GET_SIZE(resolved);
    if (fresh ? start != 0 || nres : ps->pass == 0 || 2 * (uint64_t)n + 2 > ps->mask + 1) {
        PyErr_SetString(PyExc_ValueError, "OneLink.page: a fresh call starts a page at 0, "
                        "a later one goes on with it");
        return NULL;
    }
    if (start < 0 || start > n || nres > n - start) {
        PyErr_SetString(PyExc_ValueError, "OneLink.page: start or resolved out of range");
        return NULL;
    }
    if (fresh && page_start(ps, n) < 0) return NULL;
    ps->busy = 1;
    page_t pg;
    int usable = read_page(args[5], &pg), stop = 0;
    Py_ssize_t i = start, todo = 0, nahead = 0, at = 0;
    ahead_t ahead[AHEAD];
    for (; i < n; i++) {
        const char *k = NULL;
        Py_ssize_t kn = 0;
        PyObject *given = NULL;
        uint64_t hi, lo, *b = NULL;
        if (i - start < nres) {  /* resolved by the caller */
            PyObject *pair = PyList_GET_ITEM(resolved, i - start);
            if (pair == Py_None) { ps->rejected++; continue; }
            if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2
                    || !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 1))) {
                PyErr_SetString(PyExc_TypeError, "OneLink.page: resolved items are "
                                "(fetch, str key) or None");
                goto fail;
            }
            given = PyTuple_GET_ITEM(pair, 1);
            if (!(k = PyUnicode_AsUTF8AndSize(given, &kn))) goto fail;
            uint64_t fp[2];
            murmur3_x64_128((const uint8_t *)k, kn, o->seed, fp);
            hi = fp[0];
            lo = fp[1];
        } else {
            if (at == nahead) {
                nahead = page_ahead(o, ps, links, i, n, usable, &pg, r, ahead);
                at = 0;
            }
            const ahead_t *e = &ahead[at++];
            if (e->how == NOT_HANDLED) { todo = usable ? 1 : n - i; stop = 1; break; }
            ps->compiled++;
            if (e->how == REJECTED) { ps->rejected++; continue; }
            k = e->k;
            kn = e->kn;
            hi = e->hi;
            lo = e->lo;
        }
        if (hi | lo) {  /* (0, 0) cannot be held: a miss each time */
            uint64_t *y = fpset_slot(&o->young, hi, lo);
            if (y && (y[0] | y[1])) { ps->hits++; continue; }
            const uint64_t *old = fpset_slot(&o->old, hi, lo);
            if (old && (old[0] | old[1])) {
                if (!y) { fpset_full("young"); goto fail; }
                ps->hits++;
                y[0] = hi;
                y[1] = lo;
                if (++held >= half) { i++; stop = 1; break; }
                continue;
            }
            int met;
            b = page_slot(ps, hi, lo, &met);
            if (met) continue;  /* met earlier in this pass */
            const uint64_t *p = fpset_slot(&o->pend, hi, lo);
            if (p && (p[0] | p[1])) {  /* pending: a hit the first time, as confirm_links */
                ps->hits++;
                b[0] = hi;
                b[1] = lo;
                b[2] = ps->pass;
                continue;
            }
        }
        /* the key's str is made before any other allocation: ps->ahead holds its text */
        PyObject *key = given ? (Py_INCREF(given), given) : ascii_str(k, kn);
        if (!key || page_keep(ps, hi, lo, key) < 0) goto fail;
        if (b) {
            b[0] = hi;
            b[1] = lo;
            b[2] = ps->pass;
        }
    }
    if (stop) {
        ps->busy = 0;
        return Py_BuildValue("nnn", i, held, todo);
    }
    /* the pass is done: the Bloom probe of its misses, then the index for the maybes */
    Py_ssize_t nmaybe = 0, nfound = 0, pended = 0;
    for (Py_ssize_t j = 0; j < ps->nmiss; j++) {
        int maybe;
        if (one_maybe(o, ps->miss[j].hi, ps->miss[j].lo, &maybe) < 0) goto fail;
        if (maybe) {
            ps->miss[j].said = MISS_MAYBE;
            nmaybe++;
        }
    }
    if (nmaybe && page_ask(ps, args[16], nmaybe, &nfound) < 0) goto fail;
    Py_ssize_t nnew = ps->nmiss - nfound;
    PyObject *keys = PyList_New(nnew), *rest = Py_None, *ret = NULL;
    if (!keys) goto fail;
    Py_INCREF(rest);
    for (Py_ssize_t j = 0, at = 0; j < ps->nmiss; j++)
        if (ps->miss[j].said != MISS_FOUND) {
            Py_INCREF(ps->miss[j].key);
            PyList_SET_ITEM(keys, at++, ps->miss[j].key);
            pended += (ps->miss[j].hi | ps->miss[j].lo) != 0;
        }
    /* the found keys join the young generation (confirm_add's steps), until it holds
       `half` keys: the rest go back to the caller */
    Py_ssize_t j = 0;
    for (; j < ps->nmiss && half > 0; j++) {
        page_miss *m = &ps->miss[j];
        if (m->said != MISS_FOUND || !(m->hi | m->lo)) continue;
        uint64_t *y = fpset_slot(&o->young, m->hi, m->lo);
        if (!y) { fpset_full("young"); goto fail_out; }
        if (y[0] | y[1]) continue;
        y[0] = m->hi;
        y[1] = m->lo;
        if (++held >= half) { j++; break; }
    }
    Py_ssize_t left = 0;
    for (Py_ssize_t q = j; q < ps->nmiss && half > 0; q++)
        left += ps->miss[q].said == MISS_FOUND;
    if (left) {
        Py_DECREF(rest);
        if (!(rest = PyBytes_FromStringAndSize(NULL, 16 * left))) goto fail_out;
        char *w = PyBytes_AS_STRING(rest);
        for (; j < ps->nmiss; j++)
            if (ps->miss[j].said == MISS_FOUND) {
                uint64_t f[2] = {ps->miss[j].hi, ps->miss[j].lo};
                memcpy(w, f, 16);
                w += 16;
            }
    }
    ret = Py_BuildValue("NnnnnnnnOn", keys, held, ps->hits, ps->rejected, ps->compiled,
                        ps->nmiss, nmaybe, nfound, rest, pended);
    keys = NULL;  /* taken by ret, or released by Py_BuildValue */
    if (!ret) goto fail_out;
    /* the new keys pended, all or none: the batch grows first (it may refuse) */
    Py_ssize_t len = PyByteArray_GET_SIZE(batch);
    if (nnew && PyByteArray_Resize(batch, len + 16 * nnew) < 0) goto fail_out;
    char *w = PyByteArray_AS_STRING(batch) + len;
    for (Py_ssize_t q = 0; q < ps->nmiss; q++) {
        page_miss *m = &ps->miss[q];
        if (m->said == MISS_FOUND) continue;
        uint64_t f[2] = {m->hi, m->lo};
        memcpy(w, f, 16);
        w += 16;
        if (m->hi | m->lo) {  /* room for a key a link was checked: a slot is found */
            uint64_t *p = fpset_slot(&o->pend, m->hi, m->lo);
            p[0] = m->hi;
            p[1] = m->lo;
        }
    }
    Py_DECREF(rest);
    page_clear(ps);
    ps->busy = 0;
    return ret;
fail_out:
    Py_XDECREF(keys);
    Py_XDECREF(rest);
    Py_XDECREF(ret);
fail:
    page_clear(ps);
    ps->busy = 0;
    return page_failed(held);
}

/* -- add(): UrlSeen.add, compiled ------------------------------------------------------

   Bound to a UrlSeen's parts (bind()), add(url, base_url, depth=) answers as
   UrlSeen.add's Python steps would, with the same counters, and writes the same
   Python state: the confirm cache's young count (`_held`), the pending keys' table and
   count (`held`), UrlSeen's `_pending_n`, `_pending_since` and `_pending_fps` batch, and
   calls the same Python methods for the rare steps (the cache's `_full`, the pending
   keys' `_grow`, the ledger's `held_among` for a "maybe seen" key, UrlSeen's
   `_flush_pending` when the pending keys are due: by count or by age, on the clock
   time.monotonic() reads). That state stays Python's: each call reads what it needs
   (an attribute read, no argument to parse), so the page path and every other reader
   see it as it is. Only the counters are kept here, and folded into UrlSeen's dict
   (and the canonicalizer's count of compiled links) by fold(), which every reader of
   them calls first. Whatever this path does not take (a link or base it cannot
   resolve, the fingerprint (0, 0), an unusual argument) goes to UrlSeen's Python
   add (`slow`) before anything is counted or written. */

enum { K_LINKS, K_NEW, K_REPEATS, K_REJECTED, K_DEFNEW, K_MAYBE, K_HITS, K_QUERIES, K_FALSE,
       K_COMPILED, N_COUNTS };
static const char *const COUNT_NAMES[K_COMPILED] = {
    "links", "new", "repeats", "rejected", "bloom_definitely_new", "bloom_maybe",
    "confirm_cache_hits", "ledger_queries", "false_positives"};
static PyObject *count_keys[K_COMPILED];
static PyObject *S_young, *S_old, *S_held_c, *S_table, *S_held, *S_pending_n, *S_since,
    *S_fps, *S_bloom, *S_stack, *S_rows, *S_probe_layers, *S_nlayers, *S_flush, *S_full,
    *S_grow, *S_fast_page, *S_compiled, *S_depth, *S_base_url, *S_half, *S_keys, *S_seconds,
    *S_index, *S_merge, *S_probe;

static int intern_names(void) {
    struct { PyObject **at; const char *s; } names[] = {
        {&S_young, "_young"}, {&S_old, "_old"}, {&S_held_c, "_held"}, {&S_table, "table"},
        {&S_held, "held"}, {&S_pending_n, "_pending_n"}, {&S_since, "_pending_since"},
        {&S_fps, "_pending_fps"}, {&S_bloom, "bloom"}, {&S_stack, "stack"},
        {&S_rows, "rows"}, {&S_probe_layers, "probe_layers"}, {&S_nlayers, "nlayers"},
        {&S_flush, "_flush_pending"}, {&S_full, "_full"}, {&S_grow, "_grow"},
        {&S_fast_page, "fast_page"}, {&S_compiled, "_compiled"}, {&S_depth, "depth"},
        {&S_base_url, "base_url"}, {&S_half, "_half"}, {&S_keys, "_pending_keys"},
        {&S_seconds, "_pending_seconds"}, {&S_index, "_index"}, {&S_merge, "_merge"},
        {&S_probe, "_probe"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!(*names[i].at = PyUnicode_InternFromString(names[i].s))) return -1;
    for (int i = 0; i < K_COMPILED; i++)
        if (!(count_keys[i] = PyUnicode_InternFromString(COUNT_NAMES[i]))) return -1;
    return 0;
}

/* time.monotonic() (CLOCK_MONOTONIC, as seconds in a double, as Python computes them) */
static double seconds_of(const struct timespec *ts) {
    return (double)((int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec) / 1e9;
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return seconds_of(&ts);
}

/* Not yet `seconds` since `since` by the coarse clock (the last tick's time, never
   ahead of the fine one, at most its resolution `res` behind, read without the fine
   clock's counter): the fine one can only be asked when this says maybe. */
static int surely_before(double since, double seconds, double res) {
    struct timespec ts;
    if (res <= 0 || clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) < 0) return 0;
    return seconds_of(&ts) + 2 * res - since < seconds;
}

static int attr_bind(attr_t *a, PyObject *obj, PyObject *name) {
    Py_XSETREF(a->dict, NULL);
    a->name = name;
    a->offset = -1;
    PyObject *d = _PyType_Lookup(Py_TYPE(obj), name);  /* borrowed */
    if (d && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY)) a->offset = m->offset;
    } else if (!d && PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_MANAGED_DICT)) {
        a->dict = PyObject_GenericGetDict(obj, NULL);
        if (!a->dict) return -1;
    }
    return 0;
}

static attr_t generic(PyObject *name) {
    attr_t a = {name, -1, NULL};
    return a;
}

/* A new reference to obj's attribute, or NULL with an error (AttributeError if unset). */
static PyObject *attr_get(PyObject *obj, const attr_t *a) {
    PyObject *v = NULL;
    if (a->offset >= 0) v = *(PyObject **)((char *)obj + a->offset);
    else if (a->dict && !(v = PyDict_GetItemWithError(a->dict, a->name)) && PyErr_Occurred())
        return NULL;
    return v ? Py_NewRef(v) : PyObject_GetAttr(obj, a->name);
}

static int attr_set(PyObject *obj, const attr_t *a, PyObject *v) {
    if (a->offset >= 0) {
        PyObject **at = (PyObject **)((char *)obj + a->offset);
        PyObject *was = *at;
        *at = Py_NewRef(v);
        Py_XDECREF(was);
        return 0;
    }
    if (a->dict) return PyDict_SetItem(a->dict, a->name, v);
    return PyObject_SetAttr(obj, a->name, v);
}

static int get_n(PyObject *obj, const attr_t *a, Py_ssize_t *out) {
    PyObject *v = attr_get(obj, a);
    if (!v) return -1;
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int set_n(PyObject *obj, const attr_t *a, Py_ssize_t n) {
    PyObject *v = PyLong_FromSsize_t(n);
    if (!v) return -1;
    int r = attr_set(obj, a, v);
    Py_DECREF(v);
    return r;
}

static int call_noargs(PyObject *obj, PyObject *name) {
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

/* The table `obj.name` kept open in `t` (asked again if it is another object), checked
   not to share memory with the others when it changed. */
static int add_table(OneLink *o, fpset *t, PyObject *obj, const attr_t *at,
                     const char *what) {
    PyObject *a = attr_get(obj, at);
    if (!a) return -1;
    int changed = 0;
    int r = a == t->b.obj ? 0 : one_table(t, a, what, 1, &changed);
    Py_DECREF(a);
    if (r < 0) return -1;
    if (changed && t == &o->young) {
        /* the generations swapped (the old table is the young one now) or the cache was
           cleared: the old one is asked again when a key is not in the young one */
        fpset_release(&o->old);
        o->old.s = NULL;
    }
    if (changed) {
        fpset *u[3] = {&o->young, &o->old, &o->pend};
        for (int i = 0; i < 3; i++)
            if (u[i] != t && u[i]->s && fpset_overlap(t, u[i])) {
                PyErr_SetString(PyExc_ValueError, "confirm cache: the young, old and pending "
                                "tables must not share memory");
                fpset_release(t);  /* asked again next call: refused again */
                t->s = NULL;
                return -1;
            }
    }
    return 0;
}

/* UrlSeen._flush_if_due: written at pending_keys keys or once the oldest has waited
   pending_seconds. */
/* -1 with an error if `o` was unbound (its UrlSeen closed) by the Python code a step
   called: every step after one that may run Python begins with it. */
static int add_bound(const OneLink *o) {
    if (o->seen) return 0;
    PyErr_SetString(PyExc_ValueError, "OneLink.add: not bound (its UrlSeen is closed)");
    return -1;
}

static int add_flush_if_due(OneLink *o) {
    if (add_bound(o) < 0) return -1;
    Py_ssize_t n;
    if (get_n(o->seen, &o->a_pending_n, &n) < 0) return -1;
    if (!n) return 0;
    if (n < o->keys_limit) {
        PyObject *v = attr_get(o->seen, &o->a_since);
        if (!v) return -1;
        double since = PyFloat_AsDouble(v);
        Py_DECREF(v);
        if (since == -1.0 && PyErr_Occurred()) return -1;
        if (surely_before(since, o->seconds, o->coarse_res)
                || !(monotonic_s() - since >= o->seconds))
            return 0;
    }
    return call_noargs(o->seen, S_flush);
}

/* A new key pending: counted pending first (whatever fails next, the flush writes its
   batch), then appended to its depth's batch, then held by the pending keys' table. */
static int add_pend(OneLink *o, PyObject *depth, uint64_t hi, uint64_t lo) {
    if (add_bound(o) < 0) return -1;
    Py_ssize_t n, held;
    if (get_n(o->seen, &o->a_pending_n, &n) < 0) return -1;
    if (!n) {
        PyObject *now = PyFloat_FromDouble(monotonic_s());
        if (!now) return -1;
        int r = attr_set(o->seen, &o->a_since, now);
        Py_DECREF(now);
        if (r < 0) return -1;
    }
    if (set_n(o->seen, &o->a_pending_n, n + 1) < 0) return -1;
    PyObject *fps = attr_get(o->seen, &o->a_fps);
    if (!fps) return -1;
    if (!PyDict_CheckExact(fps)) {
        Py_DECREF(fps);
        PyErr_SetString(PyExc_TypeError, "OneLink.add: _pending_fps must be a dict");
        return -1;
    }
    PyObject *batch = PyDict_GetItemWithError(fps, depth);  /* borrowed */
    if (!batch) {
        if (PyErr_Occurred() || !(batch = PyByteArray_FromStringAndSize(NULL, 0))) {
            Py_DECREF(fps);
            return -1;
        }
        int r = PyDict_SetItem(fps, depth, batch);
        Py_DECREF(batch);  /* the dict holds it */
        if (r < 0) { Py_DECREF(fps); return -1; }
    }
    Py_INCREF(batch);
    Py_DECREF(fps);
    int r = -1;
    if (!PyByteArray_CheckExact(batch)) {
        PyErr_SetString(PyExc_TypeError, "OneLink.add: a pending batch must be a bytearray");
        goto done;
    }
    Py_ssize_t len = PyByteArray_GET_SIZE(batch);
    if (PyByteArray_Resize(batch, len + 16) < 0) goto done;
    uint64_t fp[2] = {hi, lo};
    memcpy(PyByteArray_AS_STRING(batch) + len, fp, 16);
    if (get_n(o->pendk, &o->a_held, &held) < 0
            || add_table(o, &o->pend, o->pendk, &o->a_table, "pending") < 0)
        goto done;
    Py_ssize_t half = (Py_ssize_t)(o->pend.mask + 1) / 2;
    if (held < 0 || held >= half) {
        PyErr_SetString(PyExc_ValueError, "OneLink: the pending table is half full");
        goto done;
    }
    uint64_t *p = fpset_slot(&o->pend, hi, lo);
    if (!p || (p[0] | p[1])) {
        fpset_full("pending");
        goto done;
    }
    if (set_n(o->pendk, &o->a_held, held + 1) < 0) goto done;
    p[0] = hi;
    p[1] = lo;
    r = held + 1 >= half ? call_noargs(o->pendk, S_grow) : 0;
done:
    Py_DECREF(batch);
    return r;
}

/* Hold (hi, lo) in the confirm cache's young table (ConfirmCache.add of one key):
   `_held` one more, swapped or grown (`_full`) at its limit. */
static int add_confirm(OneLink *o, uint64_t hi, uint64_t lo) {
    if (add_bound(o) < 0) return -1;
    if (o->half <= 0) return 0;
    Py_ssize_t held;
    if (add_table(o, &o->young, o->cache, &o->a_young, "young") < 0
            || get_n(o->cache, &o->a_held_c, &held) < 0)
        return -1;
    Py_ssize_t limit = (Py_ssize_t)(3 * (o->young.mask + 1) / 4);
    if (o->half < limit) limit = o->half;
    if (held < 0 || held >= limit) {
        PyErr_SetString(PyExc_ValueError, "confirm cache: held < half <= 3/4 of the slots");
        return -1;
    }
    uint64_t *y = fpset_slot(&o->young, hi, lo);
    if (!y) { fpset_full("young"); return -1; }
    if (y[0] | y[1]) return 0;
    if (set_n(o->cache, &o->a_held_c, held + 1) < 0) return -1;
    y[0] = hi;
    y[1] = lo;
    return held + 1 >= limit ? call_noargs(o->cache, S_full) : 0;
}

/* The Bloom layers of UrlSeen's filter as they are now (one_bloom keeps them). */
static int add_bloom(OneLink *o) {
    PyObject *bloom = attr_get(o->seen, &o->a_bloom);
    if (!bloom) return -1;
    if (bloom != o->bloom) {
        Py_CLEAR(o->bloom);  /* read again next call if what follows fails */
        PyObject *stack = PyObject_GetAttr(bloom, S_stack);
        if (!stack) { Py_DECREF(bloom); return -1; }
        Py_XSETREF(o->stack, stack);
        if (attr_bind(&o->a_rows, stack, S_rows) < 0
                || attr_bind(&o->a_layers, stack, S_probe_layers) < 0
                || attr_bind(&o->a_nlayers, stack, S_nlayers) < 0) {
            Py_DECREF(bloom);
            return -1;
        }
        o->bloom = bloom;
    } else {
        Py_DECREF(bloom);
    }
    /* the stack's attributes as attr_get finds them (an instance dict's entry): a
       getattr each was ~0.1 us of every call that reached the filter */
    PyObject *rows = attr_get(o->stack, &o->a_rows);
    PyObject *layers = rows ? attr_get(o->stack, &o->a_layers) : NULL;
    PyObject *nl = layers ? attr_get(o->stack, &o->a_nlayers) : NULL;
    int r = nl ? one_bloom(o, rows, layers, nl) : -1;
    Py_XDECREF(rows);
    Py_XDECREF(layers);
    Py_XDECREF(nl);
    return r;
}

static void add_count(OneLink *o, int a, int b, int c) {
    o->counts[a]++;
    if (b >= 0) o->counts[b]++;
    if (c >= 0) o->counts[c]++;
    o->dirty = 1;
}

/* A repeat: counted, then the flush check (UrlSeen.add's answer False). */
static PyObject *add_repeat(OneLink *o) {
    add_count(o, K_LINKS, K_HITS, K_REPEATS);
    if (add_flush_if_due(o) < 0) return NULL;
    Py_RETURN_FALSE;
}

/* The page of `base` as fast_page gives it, kept while the same object is passed.
   Once fast_page has given its rules, an http(s) page URL that page_contexts cuts
   here is its page (fast_page's own steps for it: the same cut, the same rules),
   without fast_page's Python steps (~1.5 us a page); any other base is fast_page's. */
static int add_page(OneLink *o, PyObject *base) {
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
        PyObject *fast = PyObject_CallMethodOneArg(o->canon, S_fast_page, base);
        if (!fast) return -1;
        if (PyTuple_CheckExact(fast) && PyTuple_GET_SIZE(fast) == 2
                && PyCapsule_IsValid(PyTuple_GET_ITEM(fast, 0), RULES_NAME)) {
            rules = Py_NewRef(PyTuple_GET_ITEM(fast, 0));
            page = Py_NewRef(PyTuple_GET_ITEM(fast, 1));
            Py_XSETREF(o->krules, Py_NewRef(rules));
        }
        Py_DECREF(fast);
    }
    Py_INCREF(base);
    Py_XSETREF(o->base, base);
    Py_XSETREF(o->apage, page);
    Py_XSETREF(o->arules, rules);
    o->arp = rules ? PyCapsule_GetPointer(rules, RULES_NAME) : NULL;  /* checked valid */
    o->base_ok = rules ? read_page(o->apage, &o->apg) : 0;
    return 0;
}

/* A key the young table does not hold is then looked for in the old one, the
   pending keys' and the Bloom filter: the memory of each, a cache miss in a large
   table, is asked for now, all at once, rather than one after the other (a page's
   pass overlaps them across its keys). From the tables kept by the last call: they
   are alive (held), if perhaps no longer the ones asked. */
static void add_prefetch(const OneLink *o, uint64_t hi) {
    if (o->young.s) __builtin_prefetch(o->young.s + 2 * (hi & o->young.mask));
    if (o->old.s) __builtin_prefetch(o->old.s + 2 * (hi & o->old.mask));
    if (o->pend.s) __builtin_prefetch(o->pend.s + 2 * (hi & o->pend.mask));
    if (o->nlay && o->nl.obj) {
        const one_layer *y = &o->L[0];
        uint64_t row = probe_row(hi, (uint64_t)o->rows);
        __builtin_prefetch(y->words + row * y->row_words + ((hi + y->salt) % y->m) / 64);
    }
}

/* Does the ledger hold (hi, lo)? 1, 0, or -1 with an error: its held_among, or where
   the ledger's index (`_index`) is of the class bound (whose held_among asks its kept
   parts, `_probe`, when no merge waits to be installed, `_merge`) and has them, those
   parts asked directly, as that method would ask them (~0.4 us less a call). */
static int add_held(OneLink *o, const uint64_t fp[2]) {
    if (o->held) {
        PyObject *index = attr_get(o->ledger, &o->a_index);
        if (!index) return -1;
        if (index != o->index) {
            Py_CLEAR(o->index);
            if (Py_IS_TYPE(index, (PyTypeObject *)o->index_type)
                    && (attr_bind(&o->a_merge, index, S_merge) < 0
                        || attr_bind(&o->a_probe, index, S_probe) < 0)) {
                Py_DECREF(index);
                return -1;
            }
            o->index = Py_NewRef(index);
        }
        Py_DECREF(index);  /* o->index holds it */
        if (Py_IS_TYPE(o->index, (PyTypeObject *)o->index_type)) {
            PyObject *merge = attr_get(o->index, &o->a_merge);
            if (!merge) return -1;
            Py_DECREF(merge);
            PyObject *probe = merge == Py_None ? attr_get(o->index, &o->a_probe) : NULL;
            if (merge == Py_None && !probe) return -1;
            if (probe && Py_IS_TYPE(probe, o->held->type)) {
                int r = o->held->held_one(probe, fp[0], fp[1]);  /* probe held meanwhile */
                Py_DECREF(probe);
                return r;
            }
            Py_XDECREF(probe);
        }
    }
    PyObject *key = PyBytes_FromStringAndSize((const char *)fp, 16);
    if (!key) return -1;
    PyObject *found = PyObject_CallOneArg(o->held_among, key);
    Py_DECREF(key);
    if (!found) return -1;
    Py_ssize_t n = PyObject_Length(found);
    Py_DECREF(found);
    return n < 0 ? -1 : n > 0;
}

static PyObject *one_add(OneLink *o, PyObject *const *args, Py_ssize_t nargs,
                         PyObject *kwnames) {
    if (add_bound(o) < 0) return NULL;
    PyObject *base = Py_None, *depth = NULL;
    if (nargs < 1 || nargs > 2) goto slow;
    if (nargs == 2) base = args[1];
    if (kwnames) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            if (name == S_depth && !depth) depth = args[nargs + i];
            else if (name == S_base_url && nargs == 1) base = args[nargs + i];
            else goto slow;
        }
    }
    if (!depth) depth = o->zero;
    else if (!PyLong_CheckExact(depth)) goto slow;
    if (base != o->base && (add_page(o, base) < 0 || add_bound(o) < 0)) return NULL;
    if (!o->base_ok) goto slow;
    const char *f = NULL, *k = NULL;
    Py_ssize_t fn = 0, kn = 0;
    int how = resolve_text(args[0], &o->apg, o->arp, o->sc, &f, &fn, &k, &kn);
    if (how == NOT_HANDLED) goto slow;
    if (how == REJECTED) {
        add_count(o, K_COMPILED, K_REJECTED, -1);
        if (add_flush_if_due(o) < 0) return NULL;
        Py_RETURN_FALSE;
    }
    uint64_t fp[2];
    murmur3_x64_128((const uint8_t *)k, kn, o->seed, fp);
    uint64_t hi = fp[0], lo = fp[1];
    if (!(hi | lo)) goto slow;  /* no table holds it: the Python steps */
    add_count(o, K_COMPILED, -1, -1);  /* resolved here (the Python steps count it so) */
    add_prefetch(o, hi);
    if (add_table(o, &o->young, o->cache, &o->a_young, "young") < 0) return NULL;
    uint64_t *y = fpset_slot(&o->young, hi, lo);
    if (y && (y[0] | y[1])) return add_repeat(o);
    if (add_table(o, &o->old, o->cache, &o->a_old, "old") < 0) return NULL;
    const uint64_t *old = fpset_slot(&o->old, hi, lo);
    if (old && (old[0] | old[1])) {  /* moved to the young table */
        if (add_confirm(o, hi, lo) < 0) return NULL;
        return add_repeat(o);
    }
    if (add_table(o, &o->pend, o->pendk, &o->a_table, "pending") < 0) return NULL;
    const uint64_t *p = fpset_slot(&o->pend, hi, lo);
    if (p && (p[0] | p[1])) return add_repeat(o);
    int maybe;
    if (add_bloom(o) < 0 || add_bound(o) < 0 || one_maybe(o, hi, lo, &maybe) < 0)
        return NULL;
    if (!maybe) {
        if (add_pend(o, depth, hi, lo) < 0) return NULL;
        add_count(o, K_LINKS, K_NEW, K_DEFNEW);
        if (add_flush_if_due(o) < 0) return NULL;
        Py_RETURN_TRUE;
    }
    add_count(o, K_LINKS, K_MAYBE, K_QUERIES);  /* asked, then looked up */
    int n = add_held(o, fp);
    if (n < 0) return NULL;
    if (n) {
        if (add_confirm(o, hi, lo) < 0) return NULL;
        add_count(o, K_REPEATS, -1, -1);
        if (add_flush_if_due(o) < 0) return NULL;
        Py_RETURN_FALSE;
    }
    add_count(o, K_FALSE, K_NEW, -1);
    if (add_pend(o, depth, hi, lo) < 0) return NULL;
    if (add_flush_if_due(o) < 0) return NULL;
    Py_RETURN_TRUE;
slow:
    return PyObject_Vectorcall(o->slow, args, nargs, kwnames);
}

/* add()'s counts into the counters dict and the canonicalizer's compiled count. */
static int one_fold(OneLink *o) {
    if (!o->dirty || !o->counters) return 0;
    for (int i = 0; i < K_COMPILED; i++) {
        if (!o->counts[i]) continue;
        PyObject *v = PyDict_GetItemWithError(o->counters, count_keys[i]);
        if (!v && PyErr_Occurred()) return -1;
        long long now = v ? PyLong_AsLongLong(v) : 0;
        if (now == -1 && PyErr_Occurred()) return -1;
        PyObject *sum = PyLong_FromLongLong(now + o->counts[i]);
        if (!sum) return -1;
        int r = PyDict_SetItem(o->counters, count_keys[i], sum);
        Py_DECREF(sum);
        if (r < 0) return -1;
        o->counts[i] = 0;
    }
    if (o->counts[K_COMPILED]) {
        Py_ssize_t c;
        attr_t a = generic(S_compiled);
        if (get_n(o->canon, &a, &c) < 0
                || set_n(o->canon, &a, c + (Py_ssize_t)o->counts[K_COMPILED]) < 0)
            return -1;
        o->counts[K_COMPILED] = 0;
    }
    o->dirty = 0;
    return 0;
}

static PyObject *one_fold_py(OneLink *o, PyObject *Py_UNUSED(arg)) {
    if (one_fold(o) < 0) return NULL;
    Py_RETURN_NONE;
}

static void one_unbind(OneLink *o) {
    Py_CLEAR(o->seen);
    Py_CLEAR(o->cache);
    Py_CLEAR(o->pendk);
    Py_CLEAR(o->canon);
    Py_CLEAR(o->held_among);
    Py_CLEAR(o->slow);
    Py_CLEAR(o->counters);
    Py_CLEAR(o->base);
    Py_CLEAR(o->apage);
    Py_CLEAR(o->arules);
    Py_CLEAR(o->bloom);
    Py_CLEAR(o->stack);
    Py_CLEAR(o->krules);
    Py_CLEAR(o->ledger);
    Py_CLEAR(o->index_type);
    Py_CLEAR(o->index);
    o->held = NULL;
    o->arp = NULL;
    o->base_ok = 0;
    o->dirty = 0;
    memset(o->counts, 0, sizeof(o->counts));
    attr_t *at[] = ONE_ATTRS(o);
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        Py_CLEAR(at[i]->dict);
        at[i]->offset = -1;
    }
}

static PyObject *one_unbind_py(OneLink *o, PyObject *Py_UNUSED(arg)) {
    if (one_fold(o) < 0) return NULL;
    one_unbind(o);
    one_release(o);
    Py_RETURN_NONE;
}

/* bind(seen, cache, pending, canon, held_among, slow, counters[, ledger, index_class]):
   add() answers for `seen` (a UrlSeen, writable), whose confirm cache, pending keys
   and canonicalizer these are; held_among is its ledger's, slow its Python add,
   counters its dict. With `ledger` (whose held_among is its `_index`'s) and the
   class `index_class` (whose held_among answers by its kept `_probe`), add_held asks
   that probe itself. */
static PyObject *one_bind(OneLink *o, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 && nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "OneLink.bind takes 7 or 9 arguments");
        return NULL;
    }
    const held_api *held = NULL;
    if (nargs == 9) {
        if (!PyType_Check(args[8])) {
            PyErr_SetString(PyExc_TypeError, "OneLink.bind: index_class must be a class");
            return NULL;
        }
        held = PyCapsule_Import(HELD_API_NAME, 0);
        if (!held) return NULL;
    }
    if (!PyDict_CheckExact(args[6]) || !PyCallable_Check(args[4])
            || !PyCallable_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "OneLink.bind: held_among and slow must be "
                        "callable, counters a dict");
        return NULL;
    }
    Py_ssize_t half, keys;
    PyObject *secs = PyObject_GetAttr(args[0], S_seconds);
    if (!secs) return NULL;
    double seconds = PyFloat_AsDouble(secs);
    Py_DECREF(secs);
    attr_t a_half = generic(S_half), a_keys = generic(S_keys);
    if ((seconds == -1.0 && PyErr_Occurred()) || get_n(args[1], &a_half, &half) < 0
            || get_n(args[0], &a_keys, &keys) < 0)
        return NULL;
    if (!o->zero && !(o->zero = PyLong_FromLong(0))) return NULL;
    if (one_fold(o) < 0) return NULL;
    one_unbind(o);
    o->seen = Py_NewRef(args[0]);
    o->cache = Py_NewRef(args[1]);
    o->pendk = Py_NewRef(args[2]);
    o->canon = Py_NewRef(args[3]);
    o->held_among = Py_NewRef(args[4]);
    o->slow = Py_NewRef(args[5]);
    o->counters = Py_NewRef(args[6]);
    if (held) {
        o->ledger = Py_NewRef(args[7]);
        o->index_type = Py_NewRef(args[8]);
        o->held = held;
    }
    o->half = half;
    o->keys_limit = keys;
    o->seconds = seconds;
    struct timespec res;
    o->coarse_res = clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0
        ? seconds_of(&res) : 0;
    struct { attr_t *a; PyObject *obj, *name; } at[] = {
        {&o->a_young, o->cache, S_young}, {&o->a_old, o->cache, S_old},
        {&o->a_held_c, o->cache, S_held_c}, {&o->a_table, o->pendk, S_table},
        {&o->a_held, o->pendk, S_held}, {&o->a_pending_n, o->seen, S_pending_n},
        {&o->a_since, o->seen, S_since}, {&o->a_fps, o->seen, S_fps},
        {&o->a_bloom, o->seen, S_bloom}};
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++)
        if (attr_bind(at[i].a, at[i].obj, at[i].name) < 0) {
            one_unbind(o);
            return NULL;
        }
    if (held && attr_bind(&o->a_index, o->ledger, S_index) < 0) {
        one_unbind(o);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *one_release_py(OneLink *o, PyObject *Py_UNUSED(arg)) {
    one_release(o);
    Py_RETURN_NONE;
}

static PyMethodDef one_methods[] = {
    {"one", (PyCFunction)(void (*)(void))one_call, METH_FASTCALL,
     "one(link, rules, page, young, held, old, half, pend, pend_held, batch, rows, layers, "
     "nlayers) -> held after a hit, -1 rejected, -2 not handled, True for a new key "
     "now pending, or (fetch, key, fingerprint) for another miss"},
    {"page", (PyCFunction)(void (*)(void))one_page, METH_FASTCALL,
     "page(links, start, fresh, resolved, rules, page, young, held, old, half, pend, "
     "pend_held, batch, rows, layers, nlayers, held_among) -> (stop, held, todo) or "
     "(new_keys, held, hits, rejected, compiled, misses, maybe, found, rest, pended)"},
    {"release", (PyCFunction)one_release_py, METH_NOARGS,
     "release() -> None: let go of every kept buffer"},
    {"bind", (PyCFunction)(void (*)(void))one_bind, METH_FASTCALL,
     "bind(seen, cache, pending, canon, held_among, slow, counters[, ledger, index_class]) "
     "-> None: add() answers for them"},
    {"unbind", (PyCFunction)one_unbind_py, METH_NOARGS,
     "unbind() -> None: fold the counts, let go of what bind() gave and of every buffer"},
    {"fold", (PyCFunction)one_fold_py, METH_NOARGS,
     "fold() -> None: add()'s counts since the last fold into the counters dict and the "
     "canonicalizer's compiled count"},
    {"add", (PyCFunction)(void (*)(void))one_add, METH_FASTCALL | METH_KEYWORDS,
     "add(url, base_url=None, *, depth=0) -> bool: UrlSeen.add, compiled"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject OneLinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dedup.native._canon.OneLink",
    .tp_basicsize = sizeof(OneLink),
    .tp_dealloc = (destructor)one_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)one_traverse,
    .tp_clear = (inquiry)one_clear,
    .tp_free = PyObject_GC_Del,
    .tp_doc = "OneLink(seed): the seen-test of one link at a time, its buffers kept "
              "between calls",
    .tp_methods = one_methods,
    .tp_new = one_new,
};

static PyMethodDef methods[] = {
    {"compile_rules", compile_rules, METH_VARARGS,
     "compile_rules(max_length, sort_query, exact, prefixes) -> rules for resolve_links"},
    {"confirm_links", confirm_links, METH_VARARGS,
     "confirm_links(links, start, rules, page, seed, young, held, old, half, batch, bheld, "
     "keys, values, fps, pend) -> (stop, hits, held, bheld, rejected, compiled, todo)"},
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
    if (intern_names() < 0) return NULL;
    if (PyType_Ready(&OneLinkType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&OneLinkType);
    if (PyModule_AddObject(m, "OneLink", (PyObject *)&OneLinkType) < 0) {
        Py_DECREF(&OneLinkType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
