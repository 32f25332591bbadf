/* The journal's row checksums, checked in one compiled pass over a table.

Why C, and why its own SQLite connection: Journal.verify() reads every row of the
ledger before a resume's first fetch. In Python a row cost ~6 us, a third of it
the sqlite3 module building the row's tuple (an int, a str, a bytes or a float
object per column) and two thirds dedup.journal.format.row_crc (a list, its
repr, its encoding, the CRC). Moving only the CRC to C would leave the tuples;
here no Python object is made for a row: the rows are stepped with the SQLite C
API and each row's CRC is computed from the column values as SQLite holds them.

The CRC is row_crc's, byte for byte: CRC-32 of the repr of the list of the
columns (a blob replaced by its length) encoded as UTF-8, then of the blobs'
bytes. Integers, NULL ("None"), blob lengths and the common text (printable
ASCII without a quote or a backslash: repr is the text in single quotes) are
written here; a float goes through PyOS_double_to_string as float.__repr__
does, and any other text through PyUnicode_DecodeUTF8 (strictly, as the sqlite3
module decodes it) and PyObject_Repr: the same functions Python's path calls.

The answer is only ever "every row matched" (the row count) or None: "not
confirmed here" -- a row whose crc differs, a crc that is not an integer, text
that is not UTF-8, a database that does not open, a statement that does not
prepare, a step that fails. On None the caller runs its Python loop over the
table, which names the damaged row or raises the error it always raised, so
being unsure is always correct, only slower. A NULL crc (a row from before the
column) is not compared, as in crc_ok.

One copy of SQLite per process: the connection opened here must use the
library the sqlite3 module uses, or the two would not see each other's POSIX
locks (SQLite's "multiple copies" hazard). same_sqlite() says whether they are
the same, and the caller uses scan() only then.

Held: the GIL, for the whole scan (as the Python loop held it); a signal is
checked every SIGNAL_EVERY rows, so ^C stops a long scan.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <sqlite3.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define REPR_CAP 4096       /* repr text buffered before it is fed to the CRC */
#define SIGNAL_EVERY 65536
#define BUSY_MS 5000        /* as the sqlite3 module's default timeout */

/* The repr of one row, fed to the CRC in chunks: every write is bounds-checked
   against REPR_CAP (a piece that does not fit flushes the buffer first; one
   larger than the buffer goes to the CRC directly). */
typedef struct {
    uLong crc;
    size_t len;
    unsigned char data[REPR_CAP];
    /* the last float written and its repr: a group commit's outcome rows share
       their time, and float repr is the dearest column */
    double last_float;
    size_t last_float_len;  /* 0: none yet */
    char last_float_repr[32];
} repr_buf;

static void flush(repr_buf *b) {
    if (b->len) b->crc = crc32(b->crc, b->data, (uInt)b->len);
    b->len = 0;
}

static void put(repr_buf *b, const void *p, size_t n) {
    if (n > REPR_CAP - b->len) flush(b);
    if (n > REPR_CAP) {
        const unsigned char *q = p;
        while (n) {  /* crc32 takes a uInt length */
            uInt step = n > (1u << 30) ? (1u << 30) : (uInt)n;
            b->crc = crc32(b->crc, q, step);
            q += step;
            n -= step;
        }
        return;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void put_int(repr_buf *b, sqlite3_int64 v) {
    char digits[24];  /* 19 digits and a sign */
    int i = (int)sizeof digits;
    /* negate in unsigned arithmetic: -INT64_MIN does not fit an int64 */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) digits[--i] = '-';
    put(b, digits + i, sizeof digits - (size_t)i);
}

/* repr(str) is the text in single quotes exactly when every character is
   printable ASCII and none is a quote or a backslash. */
static int plain_ascii(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c < 0x20 || c > 0x7e || c == '\'' || c == '\\') return 0;
    }
    return 1;
}

/* repr(v)'s UTF-8: 1, or -1 with an exception set */
static int put_repr(repr_buf *b, PyObject *v) {
    PyObject *r = PyObject_Repr(v);
    if (!r) return -1;
    Py_ssize_t len;
    const char *u = PyUnicode_AsUTF8AndSize(r, &len);
    if (!u) {
        Py_DECREF(r);
        return -1;
    }
    put(b, u, (size_t)len);
    Py_DECREF(r);
    return 1;
}

/* 1: written; 0: not judged here (not UTF-8: Python raises reading it); -1: error set */
static int put_text(repr_buf *b, const unsigned char *s, int n) {
    if (!s) return 0;  /* out of memory reading it: Python will say */
    if (plain_ascii(s, (size_t)n)) {
        put(b, "'", 1);
        put(b, s, (size_t)n);
        put(b, "'", 1);
        return 1;
    }
    PyObject *str = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    if (!str) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    int done = put_repr(b, str);
    Py_DECREF(str);
    return done;
}

static int put_float(repr_buf *b, double d) {
    /* the bits, not ==: 0.0 == -0.0 but their reprs differ */
    if (b->last_float_len && memcmp(&d, &b->last_float, sizeof d) == 0) {
        put(b, b->last_float_repr, b->last_float_len);
        return 1;
    }
    char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (!s) return -1;
    size_t n = strlen(s);
    put(b, s, n);
    if (n <= sizeof b->last_float_repr) {
        memcpy(b->last_float_repr, s, n);
        memcpy(&b->last_float, &d, sizeof d);
        b->last_float_len = n;
    } else {
        b->last_float_len = 0;
    }
    PyMem_Free(s);
    return 1;
}

/* The current row's row_crc over its first `ncols` columns into *crc:
   1 computed, 0 not judged here, -1 error set. */
static int row_crc(sqlite3_stmt *st, int ncols, int *types, repr_buf *b, uLong *crc) {
    b->crc = crc32(0L, Z_NULL, 0);
    b->len = 0;
    put(b, "[", 1);
    for (int i = 0; i < ncols; i++) {
        if (i) put(b, ", ", 2);
        int rc = 1;
        switch (types[i] = sqlite3_column_type(st, i)) {
        case SQLITE_INTEGER:
            put_int(b, sqlite3_column_int64(st, i));
            break;
        case SQLITE_FLOAT:
            rc = put_float(b, sqlite3_column_double(st, i));
            break;
        case SQLITE_TEXT: {
            const unsigned char *s = sqlite3_column_text(st, i);
            rc = put_text(b, s, sqlite3_column_bytes(st, i));
            break;
        }
        case SQLITE_BLOB:
            put_int(b, sqlite3_column_bytes(st, i));
            break;
        case SQLITE_NULL:
            put(b, "None", 4);
            break;
        default:
            return 0;
        }
        if (rc <= 0) return rc;
    }
    put(b, "]", 1);
    flush(b);
    for (int i = 0; i < ncols; i++) {
        if (types[i] != SQLITE_BLOB) continue;
        const void *p = sqlite3_column_blob(st, i);
        int n = sqlite3_column_bytes(st, i);
        if (n > 0 && !p) return 0;  /* out of memory reading it: Python will say */
        if (n > 0) put(b, p, (size_t)n);
    }
    flush(b);
    *crc = b->crc;
    return 1;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    const char *path, *sql;
    Py_ssize_t path_len, sql_len;
    PyObject *sql_str;
    if (!PyArg_ParseTuple(args, "y#U:scan", &path, &path_len, &sql_str)) return NULL;
    if (!(sql = PyUnicode_AsUTF8AndSize(sql_str, &sql_len))) return NULL;
    if ((Py_ssize_t)strlen(path) != path_len) {
        PyErr_SetString(PyExc_ValueError, "scan: path holds a NUL byte");
        return NULL;
    }
    if ((Py_ssize_t)strlen(sql) != sql_len || sql_len > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "scan: sql holds a NUL byte or is too long");
        return NULL;
    }
    repr_buf *b = PyMem_Malloc(sizeof *b);
    if (!b) return PyErr_NoMemory();
    b->last_float_len = 0;
    int *types = NULL;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    PyObject *result = NULL;
    int judged = 0;
    long long rows = 0;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) goto done;
    sqlite3_busy_timeout(db, BUSY_MS);
    const char *tail = NULL;
    if (sqlite3_prepare_v2(db, sql, (int)sql_len, &st, &tail) != SQLITE_OK || !st) goto done;
    while (tail && (*tail == ' ' || *tail == '\t' || *tail == '\n' || *tail == '\r')) tail++;
    if (tail && *tail) {  /* the sqlite3 module refuses it too: not one statement */
        PyErr_SetString(PyExc_ValueError, "scan: sql holds more than one statement (or text after its end)");
        goto done;
    }
    int ncols = sqlite3_column_count(st);
    if (ncols < 2) {
        PyErr_Format(PyExc_ValueError,
                     "scan: the statement must return a row's columns then its crc, "
                     "not %d column(s)", ncols);
        goto done;
    }
    types = PyMem_Calloc((size_t)ncols, sizeof *types);
    if (!types) {
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        uLong crc = 0;
        int got = row_crc(st, ncols - 1, types, b, &crc);
        if (got < 0) goto done;
        if (got == 0) goto done;  /* not judged here */
        switch (sqlite3_column_type(st, ncols - 1)) {
        case SQLITE_NULL:
            break;  /* a row from before the crc column: not checked */
        case SQLITE_INTEGER:
            if (sqlite3_column_int64(st, ncols - 1) == (sqlite3_int64)crc) break;
            goto done;
        default:
            goto done;
        }
        if (++rows % SIGNAL_EVERY == 0 && PyErr_CheckSignals() < 0) goto done;
    }
    judged = rc == SQLITE_DONE;
done:
    sqlite3_finalize(st);
    sqlite3_close(db);
    PyMem_Free(types);
    PyMem_Free(b);
    if (PyErr_Occurred()) return NULL;
    if (!judged) Py_RETURN_NONE;
    result = PyLong_FromLongLong(rows);
    return result;
}

/* One Python value of a row as row_crc's list repr holds it: 1 written (*blob: a
   bytes, written as its length), -1 error set. Ints that fit 64 bits, None, exact
   str that is plain ASCII, bytes and floats are written here; anything else (an
   int subclass such as bool or an IntEnum, a long int, other text) through
   PyObject_Repr, which is what repr(list) calls for each item. */
static int put_value(repr_buf *b, PyObject *v, int *blob) {
    *blob = 0;
    if (v == Py_None) {
        put(b, "None", 4);
        return 1;
    }
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow) {
            if (x == -1 && PyErr_Occurred()) return -1;
            put_int(b, (sqlite3_int64)x);
            return 1;
        }
    } else if (PyUnicode_CheckExact(v)) {
        if (PyUnicode_IS_ASCII(v)) {
            const unsigned char *s = PyUnicode_1BYTE_DATA(v);
            size_t n = (size_t)PyUnicode_GET_LENGTH(v);
            if (plain_ascii(s, n)) {
                put(b, "'", 1);
                put(b, s, n);
                put(b, "'", 1);
                return 1;
            }
        }
    } else if (PyBytes_CheckExact(v)) {
        put_int(b, (sqlite3_int64)PyBytes_GET_SIZE(v));
        *blob = 1;
        return 1;
    } else if (PyFloat_CheckExact(v)) {
        return put_float(b, PyFloat_AS_DOUBLE(v));
    }
    return put_repr(b, v);
}

/* with_crcs(rows) -> list of tuples: each row (a sequence of values) followed by its
   row_crc, what dedup.journal.format.with_crc gives one row at a time. */
static PyObject *with_crcs(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "with_crcs: rows must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t nrows = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(nrows);
    repr_buf *b = PyMem_Malloc(sizeof *b);
    if (!out || !b) {
        Py_XDECREF(out);
        Py_DECREF(seq);
        PyMem_Free(b);
        return PyErr_NoMemory();
    }
    b->last_float_len = 0;
    for (Py_ssize_t r = 0; r < nrows; r++) {
        PyObject *row = PySequence_Fast(PySequence_Fast_GET_ITEM(seq, r),
                                        "with_crcs: a row must be a sequence");
        if (!row) goto fail;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(row);
        PyObject **items = PySequence_Fast_ITEMS(row);
        int blobs = 0;
        b->crc = crc32(0L, Z_NULL, 0);
        b->len = 0;
        put(b, "[", 1);
        for (Py_ssize_t i = 0; i < n; i++) {
            int blob;
            if (i) put(b, ", ", 2);
            if (put_value(b, items[i], &blob) < 0) {
                Py_DECREF(row);
                goto fail;
            }
            blobs |= blob;
        }
        put(b, "]", 1);
        flush(b);
        for (Py_ssize_t i = 0; blobs && i < n; i++) {
            if (PyBytes_CheckExact(items[i]))
                put(b, PyBytes_AS_STRING(items[i]), (size_t)PyBytes_GET_SIZE(items[i]));
        }
        flush(b);
        PyObject *t = PyTuple_New(n + 1);
        PyObject *crc = t ? PyLong_FromUnsignedLong(b->crc) : NULL;
        if (!crc) {
            Py_XDECREF(t);
            Py_DECREF(row);
            goto fail;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_INCREF(items[i]);
            PyTuple_SET_ITEM(t, i, items[i]);
        }
        PyTuple_SET_ITEM(t, n, crc);
        PyList_SET_ITEM(out, r, t);
        Py_DECREF(row);
    }
    PyMem_Free(b);
    Py_DECREF(seq);
    return out;
fail:
    PyMem_Free(b);
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

static PyObject *same_sqlite(PyObject *self, PyObject *args) {
    const char *module;
    Py_ssize_t module_len;
    if (!PyArg_ParseTuple(args, "y#:same_sqlite", &module, &module_len)) return NULL;
    if ((Py_ssize_t)strlen(module) != module_len) {
        PyErr_SetString(PyExc_ValueError, "same_sqlite: path holds a NUL byte");
        return NULL;
    }
    /* only a module already loaded (the sqlite3 module's _sqlite3): nothing new runs */
    void *h = dlopen(module, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) Py_RETURN_FALSE;
    void *theirs = dlsym(h, "sqlite3_libversion_number");
    dlclose(h);
    if (theirs == (void *)&sqlite3_libversion_number) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(path: bytes, sql: str) -> int | None: the rows of `sql` (a row's columns\n"
     "then its crc) on the ledger at `path` when every row matches its crc, else None\n"
     "(not confirmed here: the caller checks the table in Python)"},
    {"with_crcs", with_crcs, METH_O,
     "with_crcs(rows) -> list[tuple]: each row followed by its crc, as\n"
     "dedup.journal.format.with_crc makes it (a group commit's rows in one call)"},
    {"same_sqlite", same_sqlite, METH_VARARGS,
     "same_sqlite(module: bytes) -> bool: whether the loaded extension module at that\n"
     "path (the sqlite3 module's _sqlite3) uses the SQLite library this module uses"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dedup.native._rowcrc",
    "The journal's row checksums, checked in one compiled pass (see "
    "dedup/journal/journal.py, Journal.verify)", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowcrc(void) {
    return PyModule_Create(&module);
}
