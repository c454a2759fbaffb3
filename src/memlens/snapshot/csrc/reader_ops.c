/* The opcodes, by family: each handler runs one opcode (its byte already read) and answers
   OP_OK, OP_ERROR (an exception set) or OP_TRUNCATED. run() (reader_run.c) dispatches
   through OP_HANDLERS. */
#include "reader.h"

#define NEED(n)                                                                                    \
    do {                                                                                           \
        if (in->len - in->pos < (size_t)(n)) {                                                     \
            int _r = input_need(in, (size_t)(n));                                                  \
            if (_r < 0) return OP_ERROR;                                                           \
            if (_r > 0) return OP_TRUNCATED;                                                       \
        }                                                                                          \
    } while (0)

#define POP_CHECK(n)                                                                               \
    do {                                                                                           \
        if (vm->sp - fence(vm) < (n)) {                                                            \
            corrupt(vm->nmarks ? "unexpected MARK found" : "unpickling stack underflow");          \
            return OP_ERROR;                                                                       \
        }                                                                                          \
    } while (0)

/* The top mark, popped: the stack index it marks, or -1 (the error set) without one. */
static Py_ssize_t pop_mark(VM *vm) {
    if (!vm->nmarks) {
        corrupt("could not find MARK");
        return -1;
    }
    return vm->marks[--vm->nmarks];
}

/* Pop the items above the top mark into a new tuple/list (reader objects refused). */
static PyObject *pop_mark_items(VM *vm, int as_tuple) {
    Py_ssize_t m = pop_mark(vm);
    if (m < 0) return NULL;
    Py_ssize_t n = vm->sp - m;
    PyObject *seq = as_tuple ? PyTuple_New(n) : PyList_New(n);
    if (!seq) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = val_object(vm, &vm->stack[m + i]);
        if (!o) {
            Py_DECREF(seq);
            return NULL;
        }
        if (as_tuple)
            PyTuple_SET_ITEM(seq, i, o);
        else
            PyList_SET_ITEM(seq, i, o);
    }
    for (Py_ssize_t i = m; i < vm->sp; i++) discard(vm, &vm->stack[i]);
    vm->sp = m;
    return seq;
}

/* PROTO, FRAME, MARK, POP, POP_MARK, DUP */
int op_stack(VM *vm, int op) {
    Input *in = &vm->in;
    switch (op) {
    case 0x80: /* PROTO */
        NEED(1);
        if (in->buf[in->pos] > 5) {
            corrupt("unsupported pickle protocol: %d", in->buf[in->pos]);
            return OP_ERROR;
        }
        vm->proto = in->buf[in->pos++];
        break;
    case 0x95: { /* FRAME: a length hint; it must fit in what is left (scan() checks) */
        NEED(8);
        uint64_t flen = (uint64_t)rd_le(in->buf + in->pos, 8);
        in->pos += 8;
        if (flen > in->total - in->pos) return OP_TRUNCATED;
        break;
    }
    case '(': /* MARK */
        if (vm->nmarks == vm->marks_cap) {
            if (vm->marks_cap >= vm->max_marks) {
                limit_hit("depth", (unsigned long long)vm->nmarks + 1,
                          (unsigned long long)vm->max_marks);
                return OP_ERROR;
            }
            Py_ssize_t ncap = vm->marks_cap * 2;
            if (ncap > vm->max_marks) ncap = vm->max_marks;
            Py_ssize_t *nm = realloc(vm->marks, (size_t)ncap * sizeof(Py_ssize_t));
            if (!nm) {
                PyErr_NoMemory();
                return OP_ERROR;
            }
            vm->marks = nm;
            vm->marks_cap = ncap;
        }
        vm->marks[vm->nmarks++] = vm->sp;
        break;
    case '0': /* POP */
        if (vm->nmarks && vm->marks[vm->nmarks - 1] == vm->sp) {
            vm->nmarks--;
        } else {
            POP_CHECK(1);
            discard(vm, &vm->stack[--vm->sp]);
        }
        break;
    case '1': /* POP_MARK */ {
        Py_ssize_t m = pop_mark(vm);
        if (m < 0) return OP_ERROR;
        while (vm->sp > m) discard(vm, &vm->stack[--vm->sp]);
        break;
    }
    case '2': { /* DUP */
        POP_CHECK(1);
        Val v = vm->stack[vm->sp - 1];
        if (is_entry_val(vm, &v)) {
            fallback("DUP of a trace list or entry");
            return OP_ERROR;
        }
        if (v.tag == V_OBJ) Py_INCREF(v.v.o);
        if (push(vm, v) < 0) return OP_ERROR;
        break;
    }
    }
    return OP_OK;
}

/* ints, None, booleans, floats, strings */
int op_scalar(VM *vm, int op) {
    Input *in = &vm->in;
    const unsigned char *p;
    switch (op) {
    case 'J': /* BININT */
        NEED(4);
        p = in->buf + in->pos;
        in->pos += 4;
        if (push(vm, (Val){V_INT, {.i = (int32_t)(uint32_t)rd_le(p, 4)}}) < 0) return OP_ERROR;
        break;
    case 'K': /* BININT1 */
        NEED(1);
        if (push(vm, (Val){V_INT, {.i = in->buf[in->pos++]}}) < 0) return OP_ERROR;
        break;
    case 'M': /* BININT2 */
        NEED(2);
        p = in->buf + in->pos;
        in->pos += 2;
        if (push(vm, (Val){V_INT, {.i = rd_le(p, 2)}}) < 0) return OP_ERROR;
        break;
    case 0x8a: { /* LONG1 */
        NEED(1);
        size_t n = in->buf[in->pos];
        NEED(1 + n);
        p = in->buf + in->pos + 1;
        in->pos += 1 + n;
        if (push_long(vm, p, n) < 0) return OP_ERROR;
        break;
    }
    case 0x8b: { /* LONG4 */
        NEED(4);
        int32_t n = (int32_t)(uint32_t)rd_le(in->buf + in->pos, 4);
        if (n < 0) {
            corrupt("LONG pickle has negative byte count");
            return OP_ERROR;
        }
        NEED(4 + (size_t)n);
        p = in->buf + in->pos + 4;
        in->pos += 4 + (size_t)n;
        if (push_long(vm, p, (size_t)n) < 0) return OP_ERROR;
        break;
    }
    case 'N':
        Py_INCREF(Py_None);
        if (push_obj(vm, Py_None) < 0) return OP_ERROR;
        break;
    case 0x88:
        Py_INCREF(Py_True);
        if (push_obj(vm, Py_True) < 0) return OP_ERROR;
        break;
    case 0x89:
        Py_INCREF(Py_False);
        if (push_obj(vm, Py_False) < 0) return OP_ERROR;
        break;
    case 'G': { /* BINFLOAT: big-endian IEEE double */
        NEED(8);
        p = in->buf + in->pos;
        in->pos += 8;
        uint64_t bits = 0;
        for (int i = 0; i < 8; i++) bits = (bits << 8) | p[i];
        double d;
        memcpy(&d, &bits, 8);
        if (push_obj(vm, PyFloat_FromDouble(d)) < 0) return OP_ERROR;
        break;
    }
    case 0x8c: /* SHORT_BINUNICODE */
    case 'X':  /* BINUNICODE */
    case 0x8d: /* BINUNICODE8 */ {
        int w = op == 0x8c ? 1 : op == 'X' ? 4 : 8;
        NEED(w);
        uint64_t n = (uint64_t)rd_le(in->buf + in->pos, w);
        if (n > vm->max_string) {
            if (n > (uint64_t)PY_SSIZE_T_MAX - 16) {
                corrupt("string length out of range");
                return OP_ERROR;
            }
            limit_hit("string", n, vm->max_string);
            return OP_ERROR;
        }
        NEED((size_t)w + (size_t)n);
        p = in->buf + in->pos + w;
        in->pos += (size_t)w + (size_t)n;
        PyObject *s = make_str(vm, p, (size_t)n);
        if (!s) {
            if (take_error(PyExc_UnicodeDecodeError)) corrupt("a string is not valid UTF-8");
            return OP_ERROR;
        }
        if (push_obj(vm, s) < 0) return OP_ERROR;
        break;
    }
    }
    return OP_OK;
}

/* APPEND(S) (`per` 1) and SETITEM(S) (`per` 2): the items from stack index `m` up go, in
   order, into the container just below them, then off the stack; on a failure, what is
   left of them is discarded. APPEND and SETITEM are the batch of one item or pair on top. */
static int fill_container(VM *vm, Py_ssize_t m, int per) {
    for (Py_ssize_t i = m; i < vm->sp; i += per) {
        Val *target = &vm->stack[m - 1];
        int rc = per == 1 ? append_to(vm, target, &vm->stack[i])
                          : setitem_to(vm, target, &vm->stack[i], &vm->stack[i + 1]);
        if (rc < 0) {
            while (vm->sp > m) discard(vm, &vm->stack[--vm->sp]);
            return OP_ERROR;
        }
    }
    vm->sp = m;
    return OP_OK;
}

/* dicts, lists, tuples, APPEND(S), SETITEM(S) */
int op_container(VM *vm, int op) {
    switch (op) {
    case '}': { /* EMPTY_DICT */
        int role = role_for(vm, 1);
        if (role == R_ENTRY) {
            int fr = fast_entry(vm);
            if (fr < 0) return OP_ERROR;
            if (fr > 0) break;
            Py_ssize_t r = row_alloc(vm);
            if (r < 0) return OP_ERROR;
            if (push(vm, (Val){V_ENTRY, {.row = r}}) < 0) return OP_ERROR;
        } else {
            PyObject *d = PyDict_New();
            if (!d) return OP_ERROR;
            if (role == R_ROOT) {
                Py_INCREF(d);
                vm->root = d;
            }
            if (push_obj(vm, d) < 0) return OP_ERROR;
        }
        break;
    }
    case ']': { /* EMPTY_LIST */
        int role = role_for(vm, 0);
        PyObject *l;
        if (role == R_DEVLIST) {
            l = (PyObject *)columns_new();
            if (l) vm->columns_made++;
        } else {
            l = PyList_New(0);
            if (l && role == R_DTLIST) {
                Py_INCREF(l);
                vm->dtlist = l;
            }
        }
        if (push_obj(vm, l) < 0) return OP_ERROR;
        break;
    }
    case ')': /* EMPTY_TUPLE */
        if (push_obj(vm, PyTuple_New(0)) < 0) return OP_ERROR;
        break;
    case 0x85: /* TUPLE1 */
    case 0x86: /* TUPLE2 */
    case 0x87: /* TUPLE3 */ {
        Py_ssize_t n = op - 0x84;
        POP_CHECK(n);
        PyObject *t = PyTuple_New(n);
        if (!t) return OP_ERROR;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *o = val_object(vm, &vm->stack[vm->sp - n + i]);
            if (!o) {
                Py_DECREF(t);
                return OP_ERROR;
            }
            PyTuple_SET_ITEM(t, i, o);
        }
        for (Py_ssize_t i = 0; i < n; i++) discard(vm, &vm->stack[--vm->sp]);
        if (push_obj(vm, t) < 0) return OP_ERROR;
        break;
    }
    case 't': /* TUPLE */
        if (push_obj(vm, pop_mark_items(vm, 1)) < 0) return OP_ERROR;
        break;
    case 'l': /* LIST */
        if (push_obj(vm, pop_mark_items(vm, 0)) < 0) return OP_ERROR;
        break;
    case 'd': { /* DICT */
        PyObject *items = pop_mark_items(vm, 1);
        if (!items) return OP_ERROR;
        Py_ssize_t n = PyTuple_GET_SIZE(items);
        if (n & 1) {
            Py_DECREF(items);
            corrupt("odd number of items for DICT");
            return OP_ERROR;
        }
        PyObject *d = PyDict_New();
        for (Py_ssize_t i = 0; d && i < n; i += 2)
            if (PyDict_SetItem(d, PyTuple_GET_ITEM(items, i), PyTuple_GET_ITEM(items, i + 1)) < 0)
                Py_CLEAR(d);
        Py_DECREF(items);
        if (!d) {
            if (take_error(PyExc_TypeError)) fallback("an unhashable dict key");
            return OP_ERROR;
        }
        if (push_obj(vm, d) < 0) return OP_ERROR;
        break;
    }
    case 'a': /* APPEND */
    case 's': /* SETITEM */ {
        int per = op == 'a' ? 1 : 2;
        POP_CHECK(per + 1);
        return fill_container(vm, vm->sp - per, per);
    }
    case 'e': /* APPENDS */
    case 'u': /* SETITEMS */ {
        int per = op == 'e' ? 1 : 2;
        Py_ssize_t m = pop_mark(vm);
        if (m < 0) return OP_ERROR;
        /* the container is below the mark, above the fence: CPython's order and words */
        if (m <= fence(vm) || (vm->sp - m) % per) {
            corrupt(m > fence(vm) ? "odd number of items for SETITEMS"
                    : vm->nmarks  ? "unexpected MARK found"
                                  : "unpickling stack underflow");
            while (vm->sp > m && vm->sp > 0) discard(vm, &vm->stack[--vm->sp]);
            return OP_ERROR;
        }
        return fill_container(vm, m, per);
    }
    }
    return OP_OK;
}

/* memo puts and gets, out-of-band buffers, opcodes of other protocols, and the
   refused and invalid ones (the table's default) */
int op_other(VM *vm, int op) {
    Input *in = &vm->in;
    const unsigned char *p;
    switch (op) {
    case 0x94: /* MEMOIZE */
        POP_CHECK(1);
        if (memo_put(vm, vm->memo_count, &vm->stack[vm->sp - 1]) < 0) return OP_ERROR;
        break;
    case 'q': /* BINPUT */
        NEED(1);
        POP_CHECK(1);
        if (memo_put(vm, in->buf[in->pos++], &vm->stack[vm->sp - 1]) < 0) return OP_ERROR;
        break;
    case 'r': /* LONG_BINPUT */
        NEED(4);
        POP_CHECK(1);
        p = in->buf + in->pos;
        in->pos += 4;
        if (memo_put(vm, (size_t)(uint32_t)rd_le(p, 4), &vm->stack[vm->sp - 1]) < 0)
            return OP_ERROR;
        break;
    case 'h': /* BINGET */
        NEED(1);
        if (memo_get(vm, in->buf[in->pos++]) < 0) return OP_ERROR;
        break;
    case 'j': /* LONG_BINGET */
        NEED(4);
        p = in->buf + in->pos;
        in->pos += 4;
        if (memo_get(vm, (size_t)(uint32_t)rd_le(p, 4)) < 0) return OP_ERROR;
        break;
    case 0x97: /* NEXT_BUFFER */
        corrupt("pickle stream refers to out-of-band data but no *buffers* argument was given");
        return OP_ERROR;
    case 0x98: /* READONLY_BUFFER: a view of the bytes on top (never made here) */
        POP_CHECK(1);
        {
            PyObject *top = val_object(vm, &vm->stack[vm->sp - 1]);
            if (!top) return OP_ERROR;
            corrupt("TypeError: memoryview: a bytes-like object is required, not '%s'",
                    Py_TYPE(top)->tp_name);
            Py_DECREF(top);
        }
        return OP_ERROR;
    /* protocol 0/1 text opcodes, py2 strings, bytes and sets: valid but never written by
       PyTorch; the Python path reads them */
    case 'I':
    case 'L':
    case 'F':
    case 'S':
    case 'V':
    case 'p':
    case 'g':
    case 'T':
    case 'U':
    case 'B':
    case 'C':
    case 0x8e:
    case 0x96:
    case 0x8f:
    case 0x90:
    case 0x91: fallback("a pickle opcode of another protocol or type"); return OP_ERROR;
    case 0x93: /* STACK_GLOBAL: CPython's checks of its operands first, in its words */
        POP_CHECK(2);
        if (vm->stack[vm->sp - 1].tag != V_OBJ || vm->stack[vm->sp - 2].tag != V_OBJ ||
            !PyUnicode_CheckExact(vm->stack[vm->sp - 1].v.o) ||
            !PyUnicode_CheckExact(vm->stack[vm->sp - 2].v.o)) {
            corrupt("STACK_GLOBAL requires str");
            return OP_ERROR;
        }
        refuse(vm, op);
        return OP_ERROR;
    default:
        if (refused_name(op)) {
            refuse(vm, op);
            return OP_ERROR;
        }
        if (op >= 0x20 && op <= 0x7e && op != '\'' && op != '\\') /* as CPython words it */
            corrupt("invalid load key, '%c'", op);
        else
            corrupt("invalid load key, '\\x%02x'", op);
        return OP_ERROR;
    }
    return OP_OK;
}

/* Every opcode's handler; NULL: op_other's. */
const OpHandler OP_HANDLERS[256] = {
    [0x80] = op_stack,    [0x95] = op_stack,     ['('] = op_stack,      ['0'] = op_stack,
    ['1'] = op_stack,     ['2'] = op_stack,      ['J'] = op_scalar,     ['K'] = op_scalar,
    ['M'] = op_scalar,    [0x8a] = op_scalar,    [0x8b] = op_scalar,    ['N'] = op_scalar,
    [0x88] = op_scalar,   [0x89] = op_scalar,    ['G'] = op_scalar,     [0x8c] = op_scalar,
    ['X'] = op_scalar,    [0x8d] = op_scalar,    ['}'] = op_container,  [']'] = op_container,
    [')'] = op_container, [0x85] = op_container, [0x86] = op_container, [0x87] = op_container,
    ['t'] = op_container, ['l'] = op_container,  ['d'] = op_container,  ['a'] = op_container,
    ['e'] = op_container, ['s'] = op_container,  ['u'] = op_container,
};
