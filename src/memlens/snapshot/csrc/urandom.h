/* Random bytes from os.urandom, for the hash keys of both extensions (taken once, at
   import): the keys their tables' hashes are seeded with, so that a crafted file cannot
   aim its addresses or frames lists at one run of slots. */
#ifndef MEMLENS_URANDOM_H
#define MEMLENS_URANDOM_H
#include <Python.h>
#include <string.h>

/* Fill `out` with `n` random bytes; -1 with an exception set. */
static inline int urandom_fill(void *out, Py_ssize_t n) {
    PyObject *os = PyImport_ImportModule("os");
    PyObject *rnd = os ? PyObject_CallMethod(os, "urandom", "n", n) : NULL;
    Py_XDECREF(os);
    if (!rnd) return -1;
    if (PyBytes_Check(rnd) && PyBytes_GET_SIZE(rnd) == n) memcpy(out, PyBytes_AS_STRING(rnd), n);
    Py_DECREF(rnd);
    return 0;
}

#endif
