/* The Python module memlens.snapshot._fastreader: read() and scan(), their exceptions,
   and the import (the hash keys from os.urandom). */
#include "reader.h"
#include "urandom.h"

/* ------------------------------------------------------------------ exceptions */
static PyObject *Fallback;  /* shape we do not handle: read with the Python path */
static PyObject *Corrupt;   /* not a readable pickle: args (detail,) */
PyObject *Truncated; /* the pickle ends before STOP */
PyObject *Refused;   /* args (opcode name, protocol, module or None, name or None) */
static PyObject *LimitHit;  /* args (limit name, value, limit) */

int fallback(const char *why) {
    PyErr_SetString(Fallback, why);
    return -1;
}

int corrupt(const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_SetString(Corrupt, msg);
    return -1;
}

int limit_hit(const char *name, unsigned long long value, unsigned long long limit) {
    PyObject *args = Py_BuildValue("(sKK)", name, value, limit);
    if (args) {
        PyErr_SetObject(LimitHit, args);
        Py_DECREF(args);
    }
    return -1;
}

PyObject *ScanStop; /* the scan refused the file: args (the scan's result) */

static PyObject *fr_span_hash(PyObject *Py_UNUSED(mod), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint64_t h = bytes_hash(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

PyDoc_STRVAR(scan_doc, "scan(data, memory_limit, memo_limit, costs)\n--\n\n"
                       "(status, refused opcode name, estimated bytes, position): see "
                       "prescan.scan, which this is, in C.");

/* The last read's scan, as scan() would answer it (for the tests: the reader's own
   charges for its shortcut must come to what the scan alone finds). */
static const char *last_scan[2] = {"", ""};
static unsigned long long last_scan_value;
static size_t last_scan_pos;

static PyObject *fr_last_scan(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(args)) {
    return Py_BuildValue("(ssKn)", last_scan[0], last_scan[1], last_scan_value,
                         (Py_ssize_t)last_scan_pos);
}

static PyObject *scan_result(const Scan *sc) {
    return Py_BuildValue("(ssKn)", sc->status, sc->opname, sc->value, (Py_ssize_t)sc->pos);
}

static PyObject *fr_scan(PyObject *Py_UNUSED(mod), PyObject *args) {
    Py_buffer view;
    Scan sc = {0};
    PyObject *costs_obj;
    if (!PyArg_ParseTuple(args, "y*KKO:scan", &view, &sc.limit, &sc.memo_limit, &costs_obj))
        return NULL;
    PyObject *result = NULL;
    if (scan_costs(&sc, costs_obj) == 0) {
        scan_init(&sc, view.buf, (size_t)view.len);
        Py_BEGIN_ALLOW_THREADS scan_until(&sc, sc.n);
        Py_END_ALLOW_THREADS result = scan_result(&sc);
        scan_free(&sc);
    }
    PyBuffer_Release(&view);
    return result;
}

static void vm_free(VM *vm) {
    for (Py_ssize_t i = 0; i < vm->sp; i++) discard(vm, &vm->stack[i]);
    free(vm->stack);
    free(vm->marks);
    for (size_t i = 0; i < vm->memo_cap; i++) memo_release(vm->memo[i]);
    stackset_clear(&vm->stacks);
    id_clear(&vm->taken);
    spanset_clear(&vm->spans);
    free(vm->tmp_items);
    free(vm->memo);
    for (Py_ssize_t i = 0; i < vm->rows_cap; i++)
        if (vm->rows[i].in_use) {
            for (int k = 0; k < NF; k++)
                if (vm->rows[i].set & (1u << k)) val_release(&vm->rows[i].f[k]);
            Py_XDECREF(vm->rows[i].unknown);
            Py_XDECREF(vm->rows[i].skipped);
        }
    free(vm->rows);
    for (int i = 0; i < vm->nkeys; i++) Py_DECREF(vm->key_cache[i]);
    for (int i = 0; i < 4096; i++) Py_XDECREF(vm->strcache[i]);
    Py_XDECREF(vm->root);
    Py_XDECREF(vm->dtlist);
}

PyDoc_STRVAR(read_doc,
             "read(data, known_fields, max_memo, max_stack, max_depth, max_string, max_text,\n"
             "     memory_limit, memo_limit, costs, mapped=False)\n"
             "--\n\n"
             "The top-level object of the pickle in `data` (bytes-like, checked by scan()),\n"
             "with every device trace list as a Columns. `mapped`: `data` is a shared\n"
             "mapping of a file, whose pages the reader may give back once it has passed\n"
             "them (they map again, unchanged, when read again).\n"
             "Raises ScanStop (args: the scan's result, as scan() returns it) when the scan\n"
             "refuses the file, whatever the reader met; else Fallback, Corrupt, Truncated,\n"
             "Refused or LimitHit.");

static PyObject *fr_read(PyObject *Py_UNUSED(mod), PyObject *args) {
    Py_buffer view;
    PyObject *known;
    unsigned long long max_memo, max_stack, max_depth, max_string, max_text;
    Scan sc = {0};
    PyObject *costs_obj;
    int mapped = 0;
    if (!PyArg_ParseTuple(args, "y*O!KKKKKKKO|p", &view, &PySet_Type, &known, &max_memo, &max_stack,
                          &max_depth, &max_string, &max_text, &sc.limit, &sc.memo_limit, &costs_obj,
                          &mapped))
        return NULL;
    if (scan_costs(&sc, costs_obj) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    VM *vm = calloc(1, sizeof(VM));
    if (!vm) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    /* The scan (prescan.py's, in C) runs in step with the reader, just ahead of it: the
       reader reads only bytes it has passed, so it never builds what the scan would
       refuse, and its answer wins. The reader's shortcut for trace entries charges their
       opcodes itself (fast_entry), so most bytes are decoded once. */
    scan_init(&sc, view.buf, (size_t)view.len);
    PyObject *result = NULL;
    vm->known = known;
    vm->marker = PyList_New(0); /* a private object nobody else can hold */
    vm->s_device_traces = PyUnicode_InternFromString("device_traces");
    vm->free_row = -1;
    vm->max_string = max_string;
    vm->max_text = max_text;
    vm->max_memo = max_memo ? (size_t)max_memo : 1;
    vm->max_stack =
        max_stack < 16
            ? 16
            : (Py_ssize_t)(max_stack > PY_SSIZE_T_MAX / 64 ? PY_SSIZE_T_MAX / 64 : max_stack);
    vm->max_marks =
        max_depth < 4
            ? 4
            : (Py_ssize_t)(max_depth > PY_SSIZE_T_MAX / 64 ? PY_SSIZE_T_MAX / 64 : max_depth);
    vm->stack_cap = 256 < vm->max_stack ? 256 : vm->max_stack;
    vm->marks_cap = 64 < vm->max_marks ? 64 : vm->max_marks;
    vm->stack = malloc((size_t)vm->stack_cap * sizeof(Val));
    vm->marks = malloc((size_t)vm->marks_cap * sizeof(Py_ssize_t));
    vm->in.buf = view.buf;
    vm->in.total = (size_t)view.len;
    vm->in.sc = &sc;
    vm->in.release_step = mapped ? (size_t)8 << 20 : 0;
    /* PyTorch's entries take 70-80 bytes of pickle: a slight overestimate */
    vm->rows_hint = (size_t)view.len / 64;
    if (!vm->marker || !vm->s_device_traces || !vm->stack || !vm->marks ||
        id_init(&vm->taken) < 0) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    result = run(vm);
done:
    if (!sc.done) { /* the reader stopped early: the rest of the file may still be refused */
        Py_BEGIN_ALLOW_THREADS scan_until(&sc, sc.n);
        Py_END_ALLOW_THREADS
    }
    last_scan[0] = sc.status, last_scan[1] = sc.opname;
    last_scan_value = sc.value, last_scan_pos = sc.pos;
    if (strcmp(sc.status, "ok") != 0) { /* the scan's answer first, as on the Python path */
        Py_CLEAR(result);
        PyErr_Clear();
        PyObject *why = scan_result(&sc);
        if (why) {
            PyErr_SetObject(ScanStop, why);
            Py_DECREF(why);
        }
    }
    scan_free(&sc);
    vm_free(vm);
    Py_XDECREF(vm->marker);
    Py_XDECREF(vm->s_device_traces);
    free(vm);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef fr_methods[] = {
    {"read", fr_read, METH_VARARGS, read_doc},
    {"scan", fr_scan, METH_VARARGS, scan_doc},
    {"span_hash", fr_span_hash, METH_O,
     "span_hash(data)\n--\n\nThe key a frames list's bytes are remembered by (for the tests)."},
    {"last_scan", fr_last_scan, METH_NOARGS,
     "last_scan()\n--\n\nThe scan's result for the last read(), as scan() gives it."},
    {NULL, NULL, 0, NULL},
};

/* the remaining slots (m_slots, traverse, clear, free) are unused: zero */
static struct PyModuleDef fr_module = {
    PyModuleDef_HEAD_INIT, "_fastreader",
    "Streaming reader of PyTorch memory-snapshot pickles into columns (see read/compiled.py).", -1,
    fr_methods};

PyMODINIT_FUNC PyInit__fastreader(void) {
    if (columns_ready() < 0) return NULL;
    if (urandom_fill(hash_seed, sizeof hash_seed) < 0) return NULL;
    PyObject *m = PyModule_Create(&fr_module);
    if (!m) return NULL;
    struct {
        PyObject **slot;
        const char *name;
    } excs[] = {{&Fallback, "Fallback"}, {&Corrupt, "Corrupt"},   {&Truncated, "Truncated"},
                {&Refused, "Refused"},   {&LimitHit, "LimitHit"}, {&ScanStop, "ScanStop"}};
    for (size_t i = 0; i < sizeof excs / sizeof excs[0]; i++) {
        char full[96];
        snprintf(full, sizeof full, "memlens.snapshot._fastreader.%s", excs[i].name);
        *excs[i].slot = PyErr_NewException(full, NULL, NULL);
        if (!*excs[i].slot || PyModule_AddObjectRef(m, excs[i].name, *excs[i].slot) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    PyObject *typed = PyTuple_New(NF); /* for the test that they are the Python's */
    for (int k = 0; typed && k < NF; k++) {
        PyObject *name = PyUnicode_FromString(FIELD_NAMES[k]);
        if (!name)
            Py_CLEAR(typed);
        else
            PyTuple_SET_ITEM(typed, k, name);
    }
    if (!typed || PyModule_AddObject(m, "TYPED_FIELDS", typed) < 0) {
        Py_XDECREF(typed);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(&ColumnsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
