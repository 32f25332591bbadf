/* Which of some tag names a page's markup can hold: crawler/net/links.py asks before
   it walks the parsed tree for each name of its boilerplate (a walk of every element a
   name: a dozen walks a page, most finding nothing).

The HTML tokenizer makes an element of name N only from a start tag "<" N, written in
any case, so markup whose bytes nowhere hold "<" then N (ASCII case-insensitively) has
no element N. The answer may say a name is there when it is not (in a comment, a
script, an attribute: the walk then finds nothing), never the other way round, for
bytes in an encoding where ASCII is ASCII: every encoding the WHATWG decoders read
except UTF-16, whose text holds NUL bytes; a buffer with a NUL byte is answered with
every name (and links.py does not ask for UTF-16 with a byte order mark, or for text
it decoded itself). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_NAMES 64
#define MAX_NAME 32

static inline unsigned char lower(unsigned char c) {
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c | 0x20) : c;
}

/* The names of the last call, as a scanner: by first letter (lowercase), the names
   that start with it. Every page is asked about the same tuple (links.py's), so its
   names are checked and filed once, not at each call; a tuple and its str are
   immutable, and the tuple is held here, so what is filed stays true. */
typedef struct {
    PyObject *names;  /* a strong reference; NULL before the first call */
    Py_ssize_t count;
    const char *name[MAX_NAMES];
    Py_ssize_t len[MAX_NAMES];
    signed char by_first[26][MAX_NAMES + 1];  /* -1 ends a letter's list */
} scanner;

static scanner last;

/* File `names` (a tuple) in `last`; -1 with an exception set if one cannot be searched for. */
static int file_names(PyObject *names) {
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    if (count > MAX_NAMES) {
        PyErr_Format(PyExc_ValueError, "start_tags: at most %d names, not %zd", MAX_NAMES, count);
        return -1;
    }
    scanner s;
    int per_first[26] = {0};
    memset(s.by_first, -1, sizeof s.by_first);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *n = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(n) || !(s.name[i] = PyUnicode_AsUTF8AndSize(n, &s.len[i])) ||
                s.len[i] < 1 || s.len[i] > MAX_NAME) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError,
                                "start_tags: names must be str of 1 to 32 characters");
            return -1;
        }
        for (Py_ssize_t j = 0; j < s.len[i]; j++) {
            unsigned char c = (unsigned char)s.name[i][j];
            if (c >= 0x80 || c != lower(c)) {
                PyErr_SetString(PyExc_ValueError, "start_tags: names must be lowercase ASCII");
                return -1;
            }
        }
        unsigned char c0 = (unsigned char)s.name[i][0];
        if (c0 < 'a' || c0 > 'z') {
            PyErr_SetString(PyExc_ValueError, "start_tags: a name starts with a letter");
            return -1;
        }
        s.by_first[c0 - 'a'][per_first[c0 - 'a']++] = (signed char)i;
    }
    Py_INCREF(names);
    s.names = names;
    s.count = count;
    PyObject *old = last.names;
    last = s;
    Py_XDECREF(old);
    return 0;
}

/* start_tags(data, names) -> tuple: the names (ASCII lowercase str) that follow a "<"
   somewhere in data, in any case; all of them if data holds a NUL byte. */
static PyObject *start_tags(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*O!:start_tags", &view, &PyTuple_Type, &names)) return NULL;
    if (names != last.names && file_names(names) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t count = last.count;
    const Py_ssize_t *len = last.len;
    const char *const *name = last.name;
    int found[MAX_NAMES] = {0};
    const unsigned char *p = view.buf, *end = p + view.len;
    int all = memchr(p, 0, (size_t)view.len) != NULL;
    Py_ssize_t left = count;
    while (!all && left > 0 && p < end) {
        const unsigned char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt || lt + 1 >= end) break;
        p = lt + 1;
        unsigned char c0 = lower(*p);
        if (c0 < 'a' || c0 > 'z') continue;
        for (const signed char *q = last.by_first[c0 - 'a']; *q >= 0; q++) {
            Py_ssize_t i = *q;
            if (found[i] || end - p < len[i]) continue;
            Py_ssize_t j = 0;
            while (j < len[i] && lower(p[j]) == (unsigned char)name[i][j]) j++;
            if (j == len[i]) {
                found[i] = 1;
                left--;
            }
        }
    }
    PyBuffer_Release(&view);
    PyObject *out = PyTuple_New(all ? count : count - left);
    if (!out) return NULL;
    for (Py_ssize_t i = 0, k = 0; i < count; i++) {
        if (!all && !found[i]) continue;
        PyObject *n = PyTuple_GET_ITEM(names, i);
        Py_INCREF(n);
        PyTuple_SET_ITEM(out, k++, n);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"start_tags", start_tags, METH_VARARGS,
     "start_tags(data, names) -> tuple: the names that follow a '<' in data, in any case "
     "(every name if data holds a NUL byte)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "crawler.net._markup",
    "Which tag names a page's markup can hold, compiled (see crawler/net/links.py)", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__markup(void) { return PyModule_Create(&module); }
