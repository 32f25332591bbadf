/* The exact seen-test's hot loops, compiled: the confirm cache's pass over a
page's links.

Why C: it was a Python loop per link (a tuple unpack and two set lookups) whose
interpreter overhead cost more than the work. The results are exactly those of
the Python code it replaces (dedup/recent.py), which runs when this module did
not build; the tests compare the two.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* split_known(items, start, young, old, first, half) -> (stop, hits)

   For items[start:] -- each None (a rejected link, skipped) or a (value, key)
   tuple -- as RecentKeys.first_unknown does key by key: a key in `young` is a
   hit; a key in `old` is a hit and is added to `young`; any other key not yet in
   `first` gets first[key] = value. Stops right after an addition that brings
   `young` to `half` keys, so that the caller swaps the generations and calls
   again from `stop`; stop == len(items) when done. */
static PyObject *split_known(PyObject *Py_UNUSED(self), PyObject *args) {
    PyObject *items, *young, *old, *first;
    Py_ssize_t start, half;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!n", &PyList_Type, &items, &start, &PySet_Type,
                          &young, &PySet_Type, &old, &PyDict_Type, &first, &half))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items), hits = 0, i;
    for (i = start < 0 ? 0 : start; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (item == Py_None) continue;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "items must be (value, key) pairs or None");
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(item, 1);
        int in = PySet_Contains(young, key);
        if (in < 0) return NULL;
        if (in) { hits++; continue; }
        in = PySet_Contains(old, key);
        if (in < 0) return NULL;
        if (in) {
            hits++;
            if (half > 0) {
                if (PySet_Add(young, key) < 0) return NULL;
                if (PySet_GET_SIZE(young) >= half) { i++; break; }
            }
            continue;
        }
        PyObject *got = PyDict_SetDefault(first, key, PyTuple_GET_ITEM(item, 0));
        if (!got) return NULL;
    }
    return Py_BuildValue("nn", i, hits);
}

static PyMethodDef methods[] = {
    {"split_known", split_known, METH_VARARGS,
     "split_known(items, start, young, old, first, half) -> (stop, hits)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "dedup._lookup",
    "The exact seen-test's hot loops, compiled (see dedup/recent.py)",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lookup(void) { return PyModule_Create(&module); }
