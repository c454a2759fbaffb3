/* A read-write buffer object over part of a malloc'd block, handed to numpy (it views it;
   freeing the object frees the block): the reader's columns and the replay's rows and
   curves. A view may start past the block's start (the replay writes rows with room in
   front for those whose number is known only at the end).

   Each extension has its own type object (its tp_name names the module): define
   OWNED_BUFFER_NAME, then include this in one unit of the extension, which calls
   PyType_Ready(&OwnedBufferType) at import. */
#ifndef MEMLENS_OWNED_BUFFER_H
#define MEMLENS_OWNED_BUFFER_H
#include <Python.h>
#include <stdlib.h>

#ifndef OWNED_BUFFER_NAME
#error "define OWNED_BUFFER_NAME (the type's dotted name) before including owned_buffer.h"
#endif

typedef struct {
    PyObject_HEAD void *base; /* the malloc'd block, freed with the object */
    char *data;               /* where the view starts, inside it */
    Py_ssize_t nbytes;
} OwnedBuffer;

static void owned_buffer_dealloc(OwnedBuffer *self) {
    free(self->base);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int owned_buffer_getbuffer(OwnedBuffer *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (char *)"",
                             self->nbytes, 0, flags);
}

static PyBufferProcs owned_buffer_procs = {(getbufferproc)owned_buffer_getbuffer, NULL};

static PyTypeObject OwnedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = OWNED_BUFFER_NAME,
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_dealloc = (destructor)owned_buffer_dealloc,
    .tp_as_buffer = &owned_buffer_procs,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "memory handed to numpy",
};

/* An OwnedBuffer over `nbytes` at `data` inside `*base`, which it now owns (*base set to
   NULL); NULL with an exception set (the block stays the caller's). */
static PyObject *owned_buffer_new(void **base, char *data, Py_ssize_t nbytes) {
    OwnedBuffer *b = PyObject_New(OwnedBuffer, &OwnedBufferType);
    if (!b) return NULL;
    b->base = *base;
    b->data = data;
    b->nbytes = nbytes;
    *base = NULL;
    return (PyObject *)b;
}

#endif
