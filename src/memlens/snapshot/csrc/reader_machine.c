/* The machine: its stack, values, pending entry rows, roles, memo and strings. */
#include "reader.h"

/* push()'s slow side: the stack is full; it grows, up to its limit. */
int push_grow(VM *vm, Val v) {
    if (vm->stack_cap >= vm->max_stack) {
        if (v.tag == V_OBJ) Py_XDECREF(v.v.o);
        return limit_hit("stack", (unsigned long long)vm->sp + 1,
                         (unsigned long long)vm->max_stack);
    }
    Py_ssize_t ncap = vm->stack_cap * 2;
    if (ncap > vm->max_stack) ncap = vm->max_stack;
    Val *ns = realloc(vm->stack, (size_t)ncap * sizeof(Val));
    if (!ns) {
        if (v.tag == V_OBJ) Py_XDECREF(v.v.o);
        PyErr_NoMemory();
        return -1;
    }
    vm->stack = ns;
    vm->stack_cap = ncap;
    vm->stack[vm->sp++] = v;
    return 0;
}

int push_obj(VM *vm, PyObject *o) {
    if (!o) return -1;
    Val v = {V_OBJ, {.o = o}};
    return push(vm, v);
}

void row_free(VM *vm, Py_ssize_t r) {
    Row *row = &vm->rows[r];
    for (int k = 0; k < NF; k++)
        if (row->set & (1u << k)) val_release(&row->f[k]);
    Py_CLEAR(row->unknown);
    Py_CLEAR(row->skipped);
    row->set = 0;
    row->in_use = 0;
    vm->rows_live--;
    /* free list threaded through f[0] */
    row->f[0].tag = V_INT;
    row->f[0].v.row = vm->free_row;
    vm->free_row = r;
}

void discard(VM *vm, Val *v) {
    if (v->tag == V_OBJ)
        Py_XDECREF(v->v.o);
    else if (v->tag == V_ENTRY)
        row_free(vm, v->v.row);
    v->tag = V_INT;
}

/* An entry or a container with a role: never a plain value. */
int is_entry_val(VM *vm, Val *v) {
    return v->tag == V_ENTRY || (v->tag == V_OBJ && is_role(vm, v->v.o));
}

Py_ssize_t row_alloc(VM *vm) {
    Py_ssize_t r;
    if (vm->free_row >= 0) {
        r = vm->free_row;
        vm->free_row = vm->rows[r].f[0].v.row;
    } else {
        if (vm->rows_cap >= vm->max_stack) {
            limit_hit("stack", (unsigned long long)vm->rows_cap, (unsigned long long)vm->max_stack);
            return -1;
        }
        Py_ssize_t ncap = vm->rows_cap ? vm->rows_cap * 2 : 2048;
        Row *nr = realloc(vm->rows, (size_t)ncap * sizeof(Row));
        if (!nr) {
            PyErr_NoMemory();
            return -1;
        }
        vm->rows = nr;
        for (Py_ssize_t i = vm->rows_cap; i < ncap; i++) {
            nr[i].in_use = 0;
            nr[i].set = 0;
            nr[i].unknown = NULL;
            nr[i].skipped = NULL;
            nr[i].f[0].tag = V_INT;
            nr[i].f[0].v.row = i + 1 < ncap ? i + 1 : -1;
        }
        vm->free_row = vm->rows_cap;
        vm->rows_cap = ncap;
        r = vm->free_row;
        vm->free_row = vm->rows[r].f[0].v.row;
    }
    vm->rows[r].in_use = 1;
    vm->rows[r].set = 0;
    vm->rows[r].unknown = NULL;
    vm->rows[r].skipped = NULL;
    vm->rows[r].frames_items = 0;
    vm->rows_live++;
    return r;
}

/* A Python object for a value (new reference). Entries and reader-only objects cannot
   become plain values: that shape is left to the Python path. */
PyObject *val_object(VM *vm, Val *v) {
    switch (v->tag) {
    case V_INT: return PyLong_FromLongLong(v->v.i);
    case V_UINT: return PyLong_FromUnsignedLongLong(v->v.u);
    case V_OBJ:
        if (is_role(vm, v->v.o)) {
            fallback("a trace list or entry used as a plain value");
            return NULL;
        }
        Py_INCREF(v->v.o);
        return v->v.o;
    default: fallback("a trace entry used as a plain value"); return NULL;
    }
}

static int str_equals(PyObject *o, PyObject *s) {
    if (o == s) return 1;
    if (!PyUnicode_Check(o)) return 0;
    return PyUnicode_Compare(o, s) == 0;
}

/* Which entry field a key names. */
int field_of(VM *vm, PyObject *key) {
    for (int i = 0; i < vm->nkeys; i++)
        if (vm->key_cache[i] == key) return vm->key_field[i];
    if (!PyUnicode_Check(key)) return -2;
    int f = F_UNKNOWN;
    for (int k = 0; k < NF; k++)
        if (PyUnicode_CompareWithASCIIString(key, FIELD_NAMES[k]) == 0) f = k;
    if (f == F_UNKNOWN && PyUnicode_CompareWithASCIIString(key, "cpp_frames") == 0) f = F_LEGACY;
    if (f == F_UNKNOWN) {
        int in = PySet_Contains(vm->known, key);
        if (in < 0) return -1;
        if (in) f = F_KNOWN_SKIPPED;
    }
    if (vm->nkeys < 64) {
        Py_INCREF(key);
        vm->key_cache[vm->nkeys] = key;
        vm->key_field[vm->nkeys++] = f;
    }
    return f;
}

/* entry[key] = value (takes the value). */
int row_set(VM *vm, Row *row, PyObject *key, Val *value) {
    int f = field_of(vm, key);
    if (f == -1) return -1;
    if (f == -2) return fallback("a trace entry with a non-string key");
    if (f == F_LEGACY) return fallback("legacy cpp_frames entries");
    if (f == F_KNOWN_SKIPPED) {
        if (is_entry_val(vm, value)) return fallback("a trace entry inside a trace entry");
        discard(vm, value);
        if (!row->skipped && !(row->skipped = PyList_New(0))) return -1;
        return PyList_Append(row->skipped, key);
    }
    if (f == F_UNKNOWN) {
        if (is_entry_val(vm, value)) return fallback("a trace entry inside a trace entry");
        discard(vm, value);
        if (!row->unknown && !(row->unknown = PyList_New(0))) return -1;
        return PyList_Append(row->unknown, key);
    }
    if (is_entry_val(vm, value)) return fallback("a trace entry inside a trace entry");
    if (row->set & (1u << f)) val_release(&row->f[f]);
    row->f[f] = *value;
    row->set |= 1u << f;
    value->tag = V_INT;
    return 0;
}

/* list.append(item) for the containers the reader makes. Takes the item. */
int append_to(VM *vm, Val *target, Val *item) {
    if (target->tag == V_OBJ && Py_IS_TYPE(target->v.o, &ColumnsType)) {
        Columns *ct = (Columns *)target->v.o;
        if (item->tag == V_ENTRY) {
            int rc = finish_row(vm, ct, &vm->rows[item->v.row]);
            discard(vm, item);
            return rc;
        }
        if (item->tag == V_OBJ && PyDict_CheckExact(item->v.o) && !is_role(vm, item->v.o)) {
            int rc = finish_dict(vm, ct, item->v.o);
            discard(vm, item);
            return rc;
        }
        return fallback("a trace entry that is not a dict");
    }
    if (target->tag != V_OBJ || !PyList_CheckExact(target->v.o))
        return fallback("APPEND to something other than a list");
    PyObject *list = target->v.o;
    if (vm->taken.used && id_get(&vm->taken, list) != -2)
        return fallback("a list appended to after a trace entry read it");
    if (list == vm->dtlist) {
        if (!(item->tag == V_OBJ && Py_IS_TYPE(item->v.o, &ColumnsType)))
            return fallback("a device trace that is not a list");
        Columns *ct = (Columns *)item->v.o;
        if (ct->attached) return fallback("a device trace listed twice");
        ct->attached = 1;
        vm->columns_attached++;
    } else if (is_entry_val(vm, item)) {
        return fallback("a trace list or entry inside another list");
    }
    PyObject *o = item->tag == V_OBJ ? (Py_INCREF(item->v.o), item->v.o) : val_object(vm, item);
    if (!o) return -1;
    int rc = PyList_Append(list, o);
    Py_DECREF(o);
    discard(vm, item);
    return rc;
}

/* dict[key] = value for the containers the reader makes. Takes key and value. */
int setitem_to(VM *vm, Val *target, Val *key, Val *value) {
    if (target->tag == V_ENTRY) {
        if (key->tag != V_OBJ) return fallback("a trace entry with a non-string key");
        int rc = row_set(vm, &vm->rows[target->v.row], key->v.o, value);
        discard(vm, key);
        return rc;
    }
    if (target->tag != V_OBJ || !PyDict_CheckExact(target->v.o))
        return fallback("SETITEM on something other than a dict");
    PyObject *d = target->v.o;
    int dt_value = value->tag == V_OBJ && value->v.o == vm->dtlist && vm->dtlist;
    if (dt_value) {
        if (d != vm->root || key->tag != V_OBJ || !str_equals(key->v.o, vm->s_device_traces) ||
            vm->dtlist_attached)
            return fallback("the device trace list in an unexpected place");
        vm->dtlist_attached = 1;
    } else if (d == vm->root && vm->dtlist_attached && key->tag == V_OBJ &&
               str_equals(key->v.o, vm->s_device_traces)) {
        return fallback("device_traces set twice");
    }
    PyObject *k = val_object(vm, key);
    if (!k) return -1;
    PyObject *v;
    if (dt_value) {
        v = value->v.o;
        Py_INCREF(v);
    } else {
        v = val_object(vm, value);
    }
    if (!v) {
        Py_DECREF(k);
        return -1;
    }
    int rc = PyDict_SetItem(d, k, v);
    Py_DECREF(k);
    Py_DECREF(v);
    if (rc < 0 && take_error(PyExc_TypeError)) return fallback("an unhashable dict key");
    discard(vm, key);
    discard(vm, value);
    return rc;
}

/* The job of a container about to be created, from the stack (see the file comment).
   Pickler output fills a container either in MARK ... APPENDS/SETITEMS batches (then the
   container sits right below the top mark) or, for one item, with a bare APPEND/SETITEM
   (then it is the top item, still empty, or a dict below a pending key). */
int role_for(VM *vm, int is_dict) {
    Py_ssize_t sp = vm->sp, m = vm->nmarks ? vm->marks[vm->nmarks - 1] : -1;
    if (!is_dict && !vm->root && sp == 0) return R_NONE;
    if (is_dict && !vm->root && sp == 0 && vm->nmarks == 0) return R_ROOT;
    if (sp > 0 && sp - 1 >= (m < 0 ? 0 : m)) {
        Val *t = &vm->stack[sp - 1];
        if (t->tag == V_OBJ) {
            PyObject *o = t->v.o;
            if (!is_dict && o == vm->dtlist && vm->dtlist && PyList_GET_SIZE(o) == 0)
                return R_DEVLIST;
            if (is_dict && Py_IS_TYPE(o, &ColumnsType) && ((Columns *)o)->n == 0) return R_ENTRY;
            if (!is_dict && m < 0 && sp >= 2 && vm->root && vm->stack[sp - 2].tag == V_OBJ &&
                vm->stack[sp - 2].v.o == vm->root && str_equals(o, vm->s_device_traces))
                return vm->dtlist ? R_NONE : R_DTLIST;
        }
    }
    if (m >= 1) {
        Val *p = &vm->stack[m - 1];
        if (p->tag != V_OBJ) return R_NONE;
        Py_ssize_t k = sp - m;
        if (!is_dict && p->v.o == vm->root && vm->root && (k & 1) &&
            vm->stack[sp - 1].tag == V_OBJ &&
            str_equals(vm->stack[sp - 1].v.o, vm->s_device_traces))
            return vm->dtlist ? R_NONE : R_DTLIST;
        if (!is_dict && p->v.o == vm->dtlist && vm->dtlist) return R_DEVLIST;
        if (is_dict && Py_IS_TYPE(p->v.o, &ColumnsType)) return R_ENTRY;
    }
    return R_NONE;
}

/* memo[idx] = o (takes o: an owned object or a MEMO_STACK); the slot must exist. */
void memo_store(VM *vm, size_t idx, PyObject *o) {
    PyObject *old = vm->memo[idx];
    vm->memo[idx] = o;
    if (old) {
        memo_release(old);
        vm->memo_overwrites++;
        if (vm->field_by_slot[idx & 255].slot1 == idx + 1) vm->field_by_slot[idx & 255].slot1 = 0;
    } else {
        vm->memo_count++;
    }
}

/* Make memo slot idx exist (within the limit). */
int memo_room(VM *vm, size_t idx) {
    if (idx >= vm->max_memo)
        return limit_hit("memo", (unsigned long long)idx + 1, (unsigned long long)vm->max_memo);
    if (idx >= vm->memo_cap) {
        /* a memo slot per entry: start at the file's guess rather than copy on each doubling */
        size_t ncap = vm->memo_cap ? vm->memo_cap : 1024 + vm->rows_hint;
        while (ncap <= idx) ncap *= 2;
        if (ncap > vm->max_memo) ncap = vm->max_memo;
        /* calloc the first time: pages of the guess that are never used are never touched */
        PyObject **nm = vm->memo ? realloc(vm->memo, ncap * sizeof(PyObject *))
                                 : calloc(ncap, sizeof(PyObject *));
        if (!nm) {
            PyErr_NoMemory();
            return -1;
        }
        if (vm->memo) memset(nm + vm->memo_cap, 0, (ncap - vm->memo_cap) * sizeof(PyObject *));
        vm->memo = nm;
        vm->memo_cap = ncap;
    }
    return 0;
}

int memo_put(VM *vm, size_t idx, Val *top) {
    if (memo_room(vm, idx) < 0) return -1;
    PyObject *o;
    if (is_entry_val(vm, top)) {
        o = vm->marker;
        Py_INCREF(o);
    } else if (top->tag == V_OBJ) {
        o = top->v.o;
        Py_INCREF(o);
    } else {
        o = val_object(vm, top);
        if (!o) return -1;
    }
    memo_store(vm, idx, o);
    return 0;
}

int memo_get(VM *vm, size_t idx) {
    if (idx >= vm->memo_cap || !vm->memo[idx])
        return corrupt("Memo value not found at index %zu", idx);
    PyObject *o = vm->memo[idx];
    if (o == vm->marker) return fallback("a trace list or entry referenced twice");
    if (MEMO_IS_STACK(o)) {
        o = vm->stacks.rep[MEMO_STACK_INDEX(o)]; /* the list it stands for */
        if (id_get(&vm->taken, o) == -2 && id_put(&vm->taken, o, 0) < 0) return -1;
    }
    Py_INCREF(o);
    return push_obj(vm, o);
}

PyObject *make_str(VM *vm, const unsigned char *s, size_t n) {
    if (n <= 48) {
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
        size_t slot = (size_t)(h ^ (h >> 29) ^ n) & 4095;
        PyObject *c = vm->strcache[slot];
        if (c && (size_t)PyUnicode_GET_LENGTH(c) == n && memcmp(PyUnicode_DATA(c), s, n) == 0) {
            Py_INCREF(c);
            return c;
        }
        PyObject *o = PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "surrogatepass");
        if (o && PyUnicode_IS_ASCII(o)) {
            Py_INCREF(o);
            Py_XSETREF(vm->strcache[slot], o);
        }
        return o;
    }
    return PyUnicode_DecodeUTF8((const char *)s, (Py_ssize_t)n, "surrogatepass");
}

/* LONG1/LONG4 payload: two's complement, little endian. */
int push_long(VM *vm, const unsigned char *p, size_t n) {
    if (n == 0) return push(vm, (Val){V_INT, {.i = 0}});
    if (n <= 8) {
        uint64_t x = 0;
        for (size_t i = n; i-- > 0;) x = (x << 8) | p[i];
        if (n < 8 && (p[n - 1] & 0x80)) x |= ~0ULL << (8 * n);
        return push(vm, (Val){V_INT, {.i = (int64_t)x}});
    }
    if (n == 9 && p[8] == 0) {
        uint64_t x = (uint64_t)rd_le(p, 8);
        if (x <= (uint64_t)INT64_MAX) return push(vm, (Val){V_INT, {.i = (int64_t)x}});
        return push(vm, (Val){V_UINT, {.u = x}});
    }
    return push_obj(vm, _PyLong_FromByteArray(p, n, 1, 1));
}
