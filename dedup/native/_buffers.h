/* The arguments of the compiled kernels (dedup/native/_kernel.c, dedup/native/_lookup.c),
checked before any loop reads them. They come from Python, where a float64 or
uint32 array of the right byte length, a strided view or a read-only array is
one typo away; read as raw bytes, the first would be taken for other numbers and
the last written through. So each buffer is asked for with its format and must
be C-contiguous, hold the expected item type (a dtype is a code and an item
size: numpy's uint64 is 'L' on LP64, 'Q' elsewhere), be in native byte order
and, where the kernel writes it, writable. A refusal raises TypeError (item
type) or BufferError (layout, read-only), once per call: nothing here runs per
item. */
#ifndef BLOOMCRAWL_BUFFERS_H
#define BLOOMCRAWL_BUFFERS_H
#include <Python.h>
#include <string.h>

/* Item types: the accepted struct codes and their size in bytes (0: 4 or 8). */
typedef struct { const char *name, *codes; Py_ssize_t size; } item_type;

static const item_type U64 = {"uint64", "LQ", 8};
static const item_type U8 = {"uint8", "B", 1};
static const item_type FLAGS = {"uint8 or bool", "B?", 1};
static const item_type INTP = {"intp", "lqn", (Py_ssize_t)sizeof(Py_ssize_t)};
static const item_type INT32_OR_64 = {"int32 or int64", "ilq", 0};

/* The format's one code without a native or same-endian byte-order prefix; 0
   for anything else (a struct, a shape in the format, the other byte order). */
static char buffer_code(const Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == (PY_LITTLE_ENDIAN ? '<' : '>')
            || (!PY_LITTLE_ENDIAN && *f == '!'))
        f++;
    return f[0] && !f[1] ? f[0] : 0;
}

/* Fill `b` from `o`: a C-contiguous buffer of items of type `t`, writable if
   `writable`. -1 with an error set (and `b` released) if not. */
static int get_items(PyObject *o, Py_buffer *b, const char *what, const item_type *t,
                     int writable) {
    if (PyObject_GetBuffer(o, b, PyBUF_RECORDS_RO) < 0) return -1;
    char code = buffer_code(b);
    int sized = t->size ? b->itemsize == t->size : (b->itemsize == 4 || b->itemsize == 8);
    if (!code || !strchr(t->codes, code) || !sized) {
        PyErr_Format(PyExc_TypeError, "%s must be %s, not format '%s' of %zd-byte items",
                     what, t->name, b->format ? b->format : "B", b->itemsize);
    } else if (!PyBuffer_IsContiguous(b, 'C')) {
        PyErr_Format(PyExc_BufferError, "%s must be C-contiguous", what);
    } else if (writable && b->readonly) {
        PyErr_Format(PyExc_BufferError, "%s is read-only: it is written", what);
    } else {
        return 0;
    }
    PyBuffer_Release(b);
    return -1;
}

#endif
