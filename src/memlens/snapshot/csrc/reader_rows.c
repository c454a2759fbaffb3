/* A finished trace entry (a pending row) written into its device's columns. */
#include "reader.h"

/* Optional object column: created at the first entry that has the key, with the rows
   before it filled with None (the Python path's default), in first-appearance order. */
static int opt_column(Columns *ct, int c, EqTable *t) {
    if (ct->has_col[c]) return 0;
    ct->has_col[c] = 1;
    ct->room = 0;
    if (buf_reserve(&ct->col[c], (size_t)ct->n + 1) < 0) return -1;
    if (ct->n) {
        Py_ssize_t none = eq_index(t, Py_None);
        if (none < 0) return -1;
        int32_t *p = (int32_t *)ct->col[c].data;
        for (Py_ssize_t i = 0; i < ct->n; i++) p[i] = (int32_t)none;
    }
    ct->col[c].n = (size_t)ct->n;
    return 0;
}

static int obj_index(VM *vm, Row *row, int f, EqTable *t, Py_ssize_t *out) {
    if (!(row->set & (1u << f))) {
        *out = eq_index(t, Py_None);
    } else if (row->f[f].tag == V_OBJ && !is_role(vm, row->f[f].v.o)) {
        *out = eq_index(t, row->f[f].v.o); /* the row holds a reference meanwhile */
    } else {
        PyObject *o = val_object(vm, &row->f[f]);
        if (!o) return -1;
        *out = eq_index(t, o);
        Py_DECREF(o);
    }
    return *out < 0 ? -1 : 0;
}

static int uint_of(Val *v, uint64_t *out) {
    if (v->tag == V_INT && v->v.i >= 0) {
        *out = (uint64_t)v->v.i;
        return 0;
    }
    if (v->tag == V_UINT) {
        *out = v->v.u;
        return 0;
    }
    return -1;
}

/* The local index of VM stack g in ct (a new one when ct meets it first). */
static Py_ssize_t stack_local(VM *vm, Columns *ct, size_t g) {
    if (g >= ct->g2l_cap) {
        size_t ncap = ct->g2l_cap ? ct->g2l_cap : 256;
        while (ncap <= g) ncap *= 2;
        int32_t *nl = realloc(ct->g2l, ncap * sizeof(int32_t));
        if (!nl) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t k = ct->g2l_cap; k < ncap; k++) nl[k] = -1;
        ct->g2l = nl;
        ct->g2l_cap = ncap;
    }
    if (ct->g2l[g] >= 0) return ct->g2l[g];
    Py_ssize_t idx = PyList_GET_SIZE(ct->frames_objects);
    if (PyList_Append(ct->frames_objects, vm->stacks.rep[g]) < 0) return -1;
    ct->g2l[g] = (int32_t)idx;
    return idx;
}

/* The local index of an entry's frames value. Lists become VM stacks (by their items),
   each distinct list object counted once for the budget, as the Python path charges
   them; any other value is kept as itself, by identity (Python's StackTable decides what
   it means). */
static Py_ssize_t frames_local(VM *vm, Columns *ct, Val *v) {
    if (v->tag == V_STACK) return stack_local(vm, ct, (size_t)v->v.i);
    if (v->tag != V_OBJ) return fallback("trace frames that are a number");
    PyObject *o = v->v.o;
    Py_ssize_t idx = id_get(&ct->frames, o);
    if (idx != -2) return idx;
    if (PyList_CheckExact(o)) {
        size_t k = (size_t)PyList_GET_SIZE(o);
        int added;
        Py_ssize_t g = stackset_index(&vm->stacks, ((PyListObject *)o)->ob_item, k, &added);
        if (g < 0) return -1;
        /* a representative stands for a list the fast path read and counted already */
        if (o != vm->stacks.rep[g]) ct->frames_items += (long long)k;
        /* its items are taken now: a later APPEND to it is for the Python path */
        if (id_get(&vm->taken, o) == -2 && id_put(&vm->taken, o, 0) < 0) return -1;
        idx = stack_local(vm, ct, (size_t)g);
    } else {
        if (PyTuple_CheckExact(o)) ct->frames_items += (long long)PyTuple_GET_SIZE(o);
        idx = PyList_GET_SIZE(ct->frames_objects);
        if (idx >= INT32_MAX) return fallback("too many distinct stacks");
        if (PyList_Append(ct->frames_objects, o) < 0) return -1;
    }
    if (idx < 0 || id_put(&ct->frames, o, (int32_t)idx) < 0) return -1;
    return idx;
}

/* A forward_frames list of strings as the one text the builder makes of it (joined, as
   MemoryViz shows it; None for an empty list); its items counted once per list object for
   the budget, as the Python path charges them. Other lists go the Python way. Made once
   per list object: a list of a thousand references to one 1 MiB string, shared by every
   entry, is joined once, and its characters are charged to the 'text' limit before. */
static PyObject *forward_frames_text(VM *vm, Columns *ct, PyObject *list) {
    Py_ssize_t known = id_get(&ct->ff_lists, list);
    if (known >= 0) {
        PyObject *text = PyList_GET_ITEM(ct->ff_texts, known);
        Py_INCREF(text);
        return text;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    unsigned long long chars = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GET_ITEM(list, k);
        if (!PyUnicode_CheckExact(item)) {
            fallback("forward_frames that are not all text");
            return NULL;
        }
        chars += (unsigned long long)PyUnicode_GET_LENGTH(item);
    }
    vm->text_used += chars;
    if (vm->text_used > vm->max_text) {
        limit_hit("text", vm->text_used, vm->max_text);
        return NULL;
    }
    PyObject *text;
    if (n == 0) {
        text = Py_None;
        Py_INCREF(text);
    } else {
        PyObject *empty = PyUnicode_New(0, 0);
        if (!empty) return NULL;
        text = PyUnicode_Join(empty, list);
        Py_DECREF(empty);
        if (!text) return NULL;
        if (PyUnicode_GET_LENGTH(text) == 0) { /* [""]: text to the builder, not None */
            Py_DECREF(text);
            fallback("forward_frames of empty strings");
            return NULL;
        }
    }
    if (id_put(&ct->ff_lists, list, (int32_t)PyList_GET_SIZE(ct->ff_texts)) < 0 ||
        PyList_Append(ct->ff_texts, text) < 0 ||
        (id_get(&vm->taken, list) == -2 && id_put(&vm->taken, list, 0) < 0)) {
        Py_DECREF(text);
        return NULL;
    }
    ct->ff_items += n;
    ct->ff_chars += (long long)chars;
    return text;
}

/* Columns that exist only once an entry has their key. */
static inline int optional_col(int c) {
    return c == C_TIME || c == C_CC || c == C_UM || c == C_FF || c == C_POOL;
}

/* Write a finished entry to a device's columns, at index ct->n. */
int finish_row(VM *vm, Columns *ct, Row *row) {
    Py_ssize_t i = ct->n;
    size_t need = (size_t)i + 1;
    if (need > ct->room) { /* room: the smallest capacity among the per-entry columns */
        size_t room = SIZE_MAX, want = need;
        if (want < vm->rows_hint) { /* the first device's columns: as many rows as the file
                                       suggests, so they never grow by copying (untouched
                                       pages cost nothing) */
            want = vm->rows_hint;
            vm->rows_hint = 0;
        }
        for (int c = 0; c < NCOL; c++) {
            if (c == C_DF_ROW || c == C_DF_VAL) continue;
            if (optional_col(c) && !ct->has_col[c]) continue;
            if (buf_reserve(&ct->col[c], want) < 0) return -1;
            if (ct->col[c].cap < room) room = ct->col[c].cap;
        }
        ct->room = room;
    }
    Py_ssize_t idx;
    /* action */
    if (!(row->set & (1u << F_ACTION)) || row->f[F_ACTION].tag != V_OBJ ||
        !PyUnicode_Check(row->f[F_ACTION].v.o))
        return fallback("a trace entry whose action is missing or not a string");
    ct->has_action = 1;
    if (obj_index(vm, row, F_ACTION, &ct->actions, &idx) < 0) return -1;
    if (idx > 255) return fallback("more than 255 distinct actions");
    ((uint8_t *)ct->col[C_ACTION].data)[i] = (uint8_t)idx;
    /* addr (uint64), size (int64) */
    uint64_t u = 0;
    if ((row->set & (1u << F_ADDR)) && uint_of(&row->f[F_ADDR], &u) < 0)
        return fallback("a trace addr that is not a non-negative integer");
    ((uint64_t *)ct->col[C_ADDR].data)[i] = u;
    int64_t s = 0;
    if (row->set & (1u << F_SIZE)) {
        if (row->f[F_SIZE].tag != V_INT) return fallback("a trace size that is not an integer");
        s = row->f[F_SIZE].v.i;
    }
    ((int64_t *)ct->col[C_SIZE].data)[i] = s;
    /* stream: raw values interned by equality (ints; the cache catches repeats) */
    int64_t sv = 0;
    int stream_inline = 1, stream_none = 0;
    if (row->set & (1u << F_STREAM)) {
        Val *v = &row->f[F_STREAM];
        if (v->tag == V_INT)
            sv = v->v.i;
        else if (v->tag == V_UINT)
            stream_inline = 0;
        else if (v->tag == V_OBJ && v->v.o == Py_None)
            stream_inline = 0, stream_none = 1;
        else
            return fallback("a trace stream that is not an integer");
    }
    if (stream_inline && ct->last_stream_idx >= 0 && sv == ct->last_stream) {
        idx = ct->last_stream_idx;
    } else {
        PyObject *o = stream_none     ? (Py_INCREF(Py_None), Py_None)
                      : stream_inline ? PyLong_FromLongLong(sv)
                                      : PyLong_FromUnsignedLongLong(row->f[F_STREAM].v.u);
        if (!o) return -1;
        idx = eq_index(&ct->streams, o);
        Py_DECREF(o);
        if (idx < 0) return -1;
        if (stream_inline) {
            ct->last_stream = sv;
            ct->last_stream_idx = (int32_t)idx;
        }
    }
    ((int32_t *)ct->col[C_STREAM].data)[i] = (int32_t)idx;
    /* time_us */
    if ((row->set & (1u << F_TIME_US)) && !ct->has_col[C_TIME]) {
        ct->has_col[C_TIME] = 1;
        ct->room = 0;
        if (buf_reserve(&ct->col[C_TIME], need) < 0) return -1;
        for (Py_ssize_t k = 0; k < i; k++) ((int64_t *)ct->col[C_TIME].data)[k] = -1;
    }
    if (ct->has_col[C_TIME]) {
        int64_t t = -1;
        if (row->set & (1u << F_TIME_US)) {
            if (row->f[F_TIME_US].tag != V_INT) return fallback("a time_us that is not an integer");
            t = row->f[F_TIME_US].v.i;
        }
        ((int64_t *)ct->col[C_TIME].data)[i] = t;
    }
    /* frames */
    {
        Val none = {V_OBJ, {.o = Py_None}};
        idx = frames_local(vm, ct, (row->set & (1u << F_FRAMES)) ? &row->f[F_FRAMES] : &none);
        if (idx < 0) return -1;
        ((int32_t *)ct->col[C_FRAMES].data)[i] = (int32_t)idx;
    }
    /* optional strings */
    static const int OPT_F[3] = {F_COMPILE_CONTEXT, F_USER_METADATA, F_FORWARD_FRAMES};
    static const int OPT_C[3] = {C_CC, C_UM, C_FF};
    EqTable *opt_t[3] = {&ct->cc, &ct->um, &ct->ff};
    for (int k = 0; k < 3; k++) {
        int f = OPT_F[k], c = OPT_C[k];
        if (row->set & (1u << f)) {
            Val *v = &row->f[f];
            if (f == F_FORWARD_FRAMES && v->tag == V_OBJ && PyList_CheckExact(v->v.o)) {
                PyObject *text = forward_frames_text(vm, ct, v->v.o);
                if (!text) return -1;
                Py_SETREF(v->v.o, text);
            }
            /* text or None; other values go the Python way */
            if (v->tag != V_OBJ || !(v->v.o == Py_None || PyUnicode_Check(v->v.o)))
                return fallback("an optional entry field that is not text");
            if (opt_column(ct, c, opt_t[k]) < 0) return -1;
        }
        if (!ct->has_col[c]) continue;
        if (buf_reserve(&ct->col[c], need) < 0) return -1;
        if (obj_index(vm, row, f, opt_t[k], &idx) < 0) return -1;
        ((int32_t *)ct->col[c].data)[i] = (int32_t)idx;
    }
    /* pool_id: a pair of ints (a tuple, as PyTorch writes it) or None, interned by equality
       like the optional strings; the builder checks the ints' range on the distinct values.
       Anything else (a list, a bool, a wrong length) goes the Python way, which says what
       is wrong with it. */
    if (row->set & (1u << F_POOL_ID)) {
        Val *v = &row->f[F_POOL_ID];
        PyObject *o = v->tag == V_OBJ ? v->v.o : NULL;
        if (!o || !(o == Py_None || (PyTuple_CheckExact(o) && PyTuple_GET_SIZE(o) == 2 &&
                                     PyLong_CheckExact(PyTuple_GET_ITEM(o, 0)) &&
                                     PyLong_CheckExact(PyTuple_GET_ITEM(o, 1)))))
            return fallback("a pool_id that is not a pair of integers");
        if (opt_column(ct, C_POOL, &ct->pools) < 0) return -1;
    }
    if (ct->has_col[C_POOL]) {
        if (buf_reserve(&ct->col[C_POOL], need) < 0) return -1;
        if (obj_index(vm, row, F_POOL_ID, &ct->pools, &idx) < 0) return -1;
        ((int32_t *)ct->col[C_POOL].data)[i] = (int32_t)idx;
    }
    /* device_free (only used for oom rows, decided later when action codes are known) */
    if (row->set & (1u << F_DEVICE_FREE)) {
        Val *v = &row->f[F_DEVICE_FREE];
        uint64_t df = 0;
        if (uint_of(v, &df) < 0) {
            if (!(v->tag == V_OBJ && (v->v.o == Py_None || v->v.o == Py_False)))
                return fallback("a device_free that is not a non-negative integer");
        }
        Buf *br = &ct->col[C_DF_ROW], *bv = &ct->col[C_DF_VAL];
        if (buf_reserve(br, br->n + 1) < 0 || buf_reserve(bv, bv->n + 1) < 0) return -1;
        ((int64_t *)br->data)[br->n++] = i;
        ((uint64_t *)bv->data)[bv->n++] = df;
    }
    /* len(entry): the Python path charges every key it walks to the 'items' budget */
    long long nkeys = __builtin_popcount(row->set);
    PyObject *lists[2] = {row->unknown, row->skipped};
    for (int l = 0; l < 2; l++) {
        if (!lists[l]) continue;
        PyObject *distinct = PySet_New(lists[l]);
        if (!distinct) return -1;
        nkeys += PySet_GET_SIZE(distinct);
        if (l == 0) {
            Py_ssize_t nu = PyList_GET_SIZE(lists[l]);
            for (Py_ssize_t k = 0; k < nu; k++)
                if (PySet_Add(ct->unknown, PyList_GET_ITEM(lists[l], k)) < 0) {
                    Py_DECREF(distinct);
                    return -1;
                }
        }
        Py_DECREF(distinct);
    }
    ct->total_keys += nkeys;
    ct->frames_items += row->frames_items;
    ct->n = i + 1;
    for (int c = 0; c < NCOL; c++) {
        if (c == C_DF_ROW || c == C_DF_VAL) continue;
        if (!optional_col(c) || ct->has_col[c]) ct->col[c].n = (size_t)ct->n;
    }
    return 0;
}

/* A dict (an entry the role guess missed) appended to device columns. */
int finish_dict(VM *vm, Columns *ct, PyObject *d) {
    Py_ssize_t r = row_alloc(vm);
    if (r < 0) return -1;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        Val val = {V_OBJ, {.o = v}};
        Py_INCREF(v);
        if (row_set(vm, &vm->rows[r], k, &val) < 0) {
            discard(vm, &val);
            row_free(vm, r);
            return -1;
        }
    }
    int rc = finish_row(vm, ct, &vm->rows[r]);
    row_free(vm, r);
    return rc;
}
