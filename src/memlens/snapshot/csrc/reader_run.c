/* The opcode loop: one dispatch per opcode, STOP, and the refusals. */
#include "reader.h"

const char *refused_name(int op) {
    switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 'R': return "REDUCE";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'b': return "BUILD";
    default: return NULL;
    }
}

/* Refused(op, module, name): module/name given for GLOBAL/INST (in the opcode's argument)
   and STACK_GLOBAL (two strings on the stack), so the message can name them. */
int refuse(VM *vm, int op) {
    PyObject *mod = Py_None, *name = Py_None, *tmp1 = NULL, *tmp2 = NULL;
    if (op == 'i' && !vm->nmarks) return corrupt("could not find MARK"); /* CPython's first */
    if (op == 'c' || op == 'i') {
        /* the bytes of its two text lines, as far as they go: the caller has the restricted
           unpickler read them, so that it says what it says of them (the names, or why
           they are not names); all of the data, once the scan has passed it */
        if (input_need(&vm->in, vm->in.total - vm->in.pos) < 0) return -1;
        size_t have = vm->in.total - vm->in.pos;
        const char *s = (const char *)vm->in.buf + vm->in.pos;
        const char *nl1 = memchr(s, '\n', have);
        const char *nl2 = nl1 ? memchr(nl1 + 1, '\n', have - (size_t)(nl1 + 1 - s)) : NULL;
        tmp1 = PyBytes_FromStringAndSize(s, nl2 ? (nl2 + 1 - s) : (Py_ssize_t)have);
        if (tmp1) mod = tmp1;
    } else if (op == 0x93 && vm->sp >= 2 && vm->stack[vm->sp - 1].tag == V_OBJ &&
               vm->stack[vm->sp - 2].tag == V_OBJ && PyUnicode_Check(vm->stack[vm->sp - 1].v.o) &&
               PyUnicode_Check(vm->stack[vm->sp - 2].v.o)) {
        mod = vm->stack[vm->sp - 2].v.o;
        name = vm->stack[vm->sp - 1].v.o;
    }
    PyErr_Clear();
    PyObject *args = Py_BuildValue("(siOO)", refused_name(op), vm->proto, mod, name);
    Py_XDECREF(tmp1);
    Py_XDECREF(tmp2);
    if (args) {
        PyErr_SetObject(Refused, args);
        Py_DECREF(args);
    }
    return -1;
}

/* STOP, the stack checked: the top-level object, which must be the snapshot dict when
   trace lists or entries were made (else the Python path reads the file). */
static PyObject *stop(VM *vm) {
    Val top = vm->stack[--vm->sp];
    if (top.tag == V_OBJ && top.v.o == vm->root && vm->root) {
        if (vm->columns_attached != vm->columns_made || (vm->dtlist && !vm->dtlist_attached) ||
            vm->rows_live) {
            discard(vm, &top);
            fallback("trace lists or entries outside device_traces");
            return NULL;
        }
        return top.v.o;
    }
    if (vm->columns_made || vm->dtlist || vm->rows_live || is_entry_val(vm, &top)) {
        discard(vm, &top);
        fallback("the top-level object is not the snapshot dict");
        return NULL;
    }
    PyObject *result = val_object(vm, &top);
    discard(vm, &top);
    return result;
}

/* The pickle's opcodes, one after the other, to STOP: the top-level object. */
PyObject *run(VM *vm) {
    Input *in = &vm->in;
    for (;;) {
        if (in->len == in->pos) {
            int r = input_need(in, 1);
            if (r < 0) goto error;
            if (r > 0) goto truncated;
        }
        const int op = in->buf[in->pos++];
        if (op == '.') {
            if (vm->sp - fence(vm) < 1) {
                corrupt(vm->nmarks ? "unexpected MARK found" : "unpickling stack underflow");
                goto error;
            }
            return stop(vm);
        }
        const OpHandler h = OP_HANDLERS[op];
        const int r = h ? h(vm, op) : op_other(vm, op);
        if (r == OP_ERROR) goto error;
        if (r == OP_TRUNCATED) goto truncated;
    }
truncated:
    PyErr_SetString(Truncated, "the pickle ends before its STOP opcode");
error:
    return NULL;
}
