/* Growable buffers and the device columns they become (a Columns per device list,
   exported to numpy as OwnedBuffers). */
#include "reader.h"
#define OWNED_BUFFER_NAME "memlens.snapshot._fastreader.Chunk"
#include "owned_buffer.h"

int buf_reserve(Buf *b, size_t n) {
    if (n <= b->cap) return 0;
    size_t ncap = b->cap ? b->cap * 2 : 1024;
    while (ncap < n) ncap *= 2;
    char *nd = realloc(b->data, ncap * b->item);
    if (!nd) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = nd;
    b->cap = ncap;
    return 0;
}

/* Hand a Buf over to an OwnedBuffer (the Buf is left empty; kept on failure). */
static PyObject *buf_to_chunk(Buf *b) {
    if (b->data && b->n < b->cap) { /* give the slack back */
        char *nd = realloc(b->data, b->n ? b->n * b->item : 1);
        if (nd) b->data = nd;
        b->cap = b->n;
    }
    void *base = b->data;
    PyObject *c = owned_buffer_new(&base, b->data, (Py_ssize_t)(b->n * b->item));
    if (!c) return NULL;
    b->data = NULL;
    b->n = b->cap = 0;
    return c;
}

const char *FIELD_NAMES[NF] = TYPED_FIELD_NAMES;

static const char *COL_NAMES[NCOL] = {"action",
                                      "addr",
                                      "size",
                                      "stream",
                                      "time_us",
                                      "frames",
                                      "compile_context",
                                      "user_metadata",
                                      "forward_frames",
                                      "pool_id",
                                      "device_free_row",
                                      "device_free"};
static const size_t COL_ITEM[NCOL] = {1, 8, 8, 4, 8, 4, 4, 4, 4, 4, 8, 8};

static void columns_dealloc(Columns *self) {
    for (int c = 0; c < NCOL; c++) free(self->col[c].data);
    eq_clear(&self->actions);
    eq_clear(&self->streams);
    eq_clear(&self->cc);
    eq_clear(&self->um);
    eq_clear(&self->ff);
    eq_clear(&self->pools);
    id_clear(&self->frames);
    id_clear(&self->ff_lists);
    Py_XDECREF(self->ff_texts);
    Py_XDECREF(self->frames_objects);
    free(self->g2l);
    Py_XDECREF(self->unknown);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* d[key] = v as a Python int: 0, or -1 with the error set. */
static int set_count(PyObject *d, const char *key, long long v) {
    PyObject *n = PyLong_FromLongLong(v);
    int rc = n ? PyDict_SetItemString(d, key, n) : -1;
    Py_XDECREF(n);
    return rc;
}

/* export() -> dict: n, the columns as buffers (moved out), the distinct tables, flags. */
static PyObject *columns_export(Columns *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    PyObject *n = NULL;
    if (set_count(d, "n", self->n) < 0 || set_count(d, "total_keys", self->total_keys) < 0 ||
        set_count(d, "frames_items", self->frames_items) < 0 ||
        set_count(d, "forward_frames_items", self->ff_items) < 0 ||
        set_count(d, "forward_frames_chars", self->ff_chars) < 0)
        goto fail;
    /* the frames values met as objects, with their local index: the builder must know
       them by identity too, should the segments refer to them */
    n = PyList_New(PyList_GET_SIZE(self->frames.list));
    if (!n) goto fail;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(self->frames.list); k++) {
        PyObject *o = PyList_GET_ITEM(self->frames.list, k);
        PyObject *pair = Py_BuildValue("(On)", o, id_get(&self->frames, o));
        if (!pair) goto fail;
        PyList_SET_ITEM(n, k, pair);
    }
    if (PyDict_SetItemString(d, "frames_aliases", n) < 0) goto fail;
    Py_CLEAR(n);
    for (int c = 0; c < NCOL; c++) {
        int always = c == C_ACTION || c == C_ADDR || c == C_SIZE || c == C_STREAM ||
                     c == C_FRAMES || c == C_DF_ROW || c == C_DF_VAL;
        if (!always && !self->has_col[c]) continue;
        PyObject *ch = buf_to_chunk(&self->col[c]);
        if (!ch) goto fail;
        int bad = PyDict_SetItemString(d, COL_NAMES[c], ch) < 0;
        Py_DECREF(ch);
        if (bad) goto fail;
    }
    if (PyDict_SetItemString(d, "actions", self->actions.list) < 0 ||
        PyDict_SetItemString(d, "streams", self->streams.list) < 0 ||
        PyDict_SetItemString(d, "frames_objects", self->frames_objects) < 0 ||
        PyDict_SetItemString(d, "compile_context_values", self->cc.list) < 0 ||
        PyDict_SetItemString(d, "user_metadata_values", self->um.list) < 0 ||
        PyDict_SetItemString(d, "forward_frames_values", self->ff.list) < 0 ||
        PyDict_SetItemString(d, "pool_id_values", self->pools.list) < 0 ||
        PyDict_SetItemString(d, "unknown_fields", self->unknown) < 0 ||
        PyDict_SetItemString(d, "has_action", self->has_action ? Py_True : Py_False) < 0)
        goto fail;
    return d;
fail:
    Py_XDECREF(n);
    Py_DECREF(d);
    return NULL;
}

static PyMethodDef columns_methods[] = {
    {"export", (PyCFunction)columns_export, METH_NOARGS,
     "Move the columns out as buffers, with the distinct-value tables."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "memlens.snapshot._fastreader.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_dealloc = (destructor)columns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = columns_methods,
    .tp_doc = "one device's trace entries, as columns",
};

Columns *columns_new(void) {
    Columns *c = PyObject_New(Columns, &ColumnsType);
    if (!c) return NULL;
    c->n = 0;
    c->room = 0;
    for (int k = 0; k < NCOL; k++) {
        c->col[k] = (Buf){NULL, 0, 0, COL_ITEM[k]};
        c->has_col[k] = 0;
    }
    c->actions = (EqTable){0};
    c->streams = (EqTable){0};
    c->cc = (EqTable){0};
    c->um = (EqTable){0};
    c->ff = (EqTable){0};
    c->pools = (EqTable){0};
    c->frames = (IdTable){0};
    c->frames_objects = NULL;
    c->g2l = NULL;
    c->g2l_cap = 0;
    c->frames_items = 0;
    c->ff_lists = (IdTable){0};
    c->ff_texts = NULL;
    c->ff_items = 0;
    c->ff_chars = 0;
    c->unknown = NULL;
    c->has_action = 0;
    c->attached = 0;
    c->total_keys = 0;
    c->last_stream = 0;
    c->last_stream_idx = -1;
    if (eq_init(&c->actions) < 0 || eq_init(&c->streams) < 0 || eq_init(&c->cc) < 0 ||
        eq_init(&c->um) < 0 || eq_init(&c->ff) < 0 || eq_init(&c->pools) < 0 ||
        id_init(&c->frames) < 0 || id_init(&c->ff_lists) < 0 ||
        !(c->frames_objects = PyList_New(0)) || !(c->ff_texts = PyList_New(0)) ||
        !(c->unknown = PySet_New(NULL))) {
        Py_DECREF(c);
        return NULL;
    }
    return c;
}

/* The types this unit defines, ready for use (at import). */
int columns_ready(void) {
    return PyType_Ready(&OwnedBufferType) < 0 || PyType_Ready(&ColumnsType) < 0 ? -1 : 0;
}
