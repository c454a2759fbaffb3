/* The trace-entry shortcut: a PyTorch entry read in one go, charged to the scan as it is
   read. */
#include "reader.h"

/* The scan's charges for the opcodes the entry shortcut reads itself, as scan_until
   charges them (a test holds the two to the same total: test_prescan.py). The scan then
   goes on from the shortcut's end. */
static inline void ch_push(Scan *sc, uint64_t made) {
    sc->at.cost += made;
    if (++sc->at.height > sc->at.peak) sc->at.peak = sc->at.height;
}

static inline int ch_mark(Scan *sc) {
    if (sc->at.nmarks == sc->marks_cap) {
        size_t ncap = sc->marks_cap ? sc->marks_cap * 2 : 64;
        size_t *nm = realloc(sc->marks, ncap * sizeof *nm);
        if (!nm) return -1; /* the shortcut gives up; the scan says "nomem" in its turn */
        sc->marks = nm;
        sc->marks_cap = ncap;
    }
    sc->marks[sc->at.nmarks++] = sc->at.height;
    sc->at.cost += sc->c[C_STACK_SLOT];
    return 0;
}

static inline void ch_from_mark(Scan *sc, int op) {
    ScanAt *at = &sc->at;
    const size_t base = at->nmarks ? sc->marks[--at->nmarks] : 0;
    at->cost += sc->made[op] + sc->per_item[op] * (at->height > base ? at->height - base : 0);
    at->height = base + sc->left[op];
    if (at->height > at->peak) at->peak = at->height;
}

static inline void ch_pop(Scan *sc, int op) {
    ScanAt *at = &sc->at;
    at->cost += sc->made[op];
    at->height = (at->height > sc->popk[op] ? at->height - sc->popk[op] : 0) + sc->left[op];
}

static inline void ch_memo(Scan *sc, int64_t idx) {
    if (idx > sc->at.memo_top) sc->at.memo_top = idx;
    sc->at.memo_len++;
}

#define FAST_PUTS 16

typedef struct {
    size_t idx;
    PyObject *o; /* owned object, or a MEMO_STACK */
} PendingPut;

typedef struct {
    const unsigned char *p, *end;
    Scan *sc; /* the scan to charge the opcodes read to, or NULL: it has passed them */
    PendingPut put[FAST_PUTS]; /* memo puts, applied only once the whole entry is read */
    int nput;
    size_t new_slots;    /* puts into empty slots: where the next MEMOIZE goes moves with them */
    long long items;     /* items of the frames lists read (for the builder's budget) */
    /* a frames list body read item by item, to remember once the entry is accepted */
    const unsigned char *span;
    size_t span_n;
    uint64_t span_hash;
    int32_t span_stack, span_items;
} Fast;

static void fast_drop_puts(Fast *f) {
    for (int k = 0; k < f->nput; k++) memo_release(f->put[k].o);
    f->nput = 0;
}

/* The memo as it will be once the pending puts are applied (borrowed, maybe a MEMO_STACK). */
static inline PyObject *fast_memo(VM *vm, Fast *f, size_t idx) {
    for (int k = f->nput - 1; k >= 0; k--)
        if (f->put[k].idx == idx) return f->put[k].o;
    return idx < vm->memo_cap ? vm->memo[idx] : NULL;
}

/* A memo opcode at f->p records a put of o (taken on 1). 1 put, 0 no memo opcode there,
   -1 not for the shortcut (a slot overwritten, a limit, the lookahead's end). */
static int fast_put(VM *vm, Fast *f, PyObject *o) {
    const unsigned char *p = f->p;
    size_t idx;
    if (p >= f->end) return -1;
    if (*p == 0x94) {
        idx = vm->memo_count + f->new_slots;
        p += 1;
    } else if (*p == 'q') {
        if (f->end - p < 2) return -1;
        idx = p[1];
        p += 2;
    } else if (*p == 'r') {
        if (f->end - p < 5) return -1;
        idx = (size_t)ld32(p + 1);
        p += 5;
    } else {
        return 0;
    }
    if (idx >= vm->max_memo || f->nput == FAST_PUTS || fast_memo(vm, f, idx)) return -1;
    if (f->sc) ch_memo(f->sc, *f->p == 0x94 ? (int64_t)f->sc->at.memo_len : (int64_t)idx);
    f->put[f->nput++] = (PendingPut){idx, o};
    f->new_slots++;
    f->p = p;
    return 1;
}

/* A BINGET/LONG_BINGET at f->p: its memo index, or -1 when there is none. */
static inline Py_ssize_t fast_get_index(Fast *f) {
    const unsigned char *p = f->p;
    if (p < f->end && *p == 'h' && f->end - p >= 2) {
        f->p = p + 2;
        return p[1];
    }
    if (p < f->end && *p == 'j' && f->end - p >= 5) {
        f->p = p + 5;
        return (Py_ssize_t)ld32(p + 1);
    }
    return -1;
}

/* The k items of a frames list body at f->p, memo reference by memo reference, as a VM
   stack; -1 with no error set when they are not all plain objects. */
static Py_ssize_t frames_items_stack(VM *vm, Fast *f, size_t k) {
    if (grow_objects(&vm->tmp_items, &vm->tmp_cap, k, 256) < 0) return -1;
    for (size_t j = 0; j < k;) {
        if (*f->p == '(' || *f->p == 'e') {
            f->p++;
            continue;
        }
        Py_ssize_t idx = fast_get_index(f);
        PyObject *it = idx < 0 ? NULL : fast_memo(vm, f, (size_t)idx);
        if (!it || it == vm->marker || MEMO_IS_STACK(it)) return -1;
        if (f->p < f->end && *f->p == 'a') f->p++;
        vm->tmp_items[j++] = it;
    }
    if (f->p < f->end && *f->p == 'e') f->p++; /* the last batch's end */
    int added;
    return stackset_index(&vm->stacks, vm->tmp_items, k, &added);
}

/* A frames list being built (EMPTY_LIST at f->p): its items must all be memo references
   to plain objects. *out becomes its VM stack. 1 ok, 0 not for the shortcut, -1 error. */
static int fast_frames(VM *vm, Fast *f, Val *out) {
    Scan *sc = f->sc;
    f->p++;
    if (sc) ch_push(sc, sc->made[']']);
    int slot = f->nput;
    Py_INCREF(vm->marker); /* stands for the list until its stack is known */
    int r = fast_put(vm, f, vm->marker);
    if (r != 1) {
        Py_DECREF(vm->marker);
        if (r < 0) return 0;
        slot = -1;
    }
    /* the body's extent: MARK batches of memo references, or one reference and APPEND */
    const unsigned char *p0 = f->p, *q = f->p, *end = f->end;
    size_t k = 0;
    for (;;) {
        if (q >= end) return 0;
        if (*q == '(') {
            if (sc && ch_mark(sc) < 0) return 0;
            for (q++;; k++) {
                if (q < end && *q == 'e') break;
                if (q < end && *q == 'h' && end - q >= 2)
                    q += 2;
                else if (q < end && *q == 'j' && end - q >= 5)
                    q += 5;
                else
                    return 0;
                if (sc) ch_push(sc, 0);
            }
            q++;
            if (sc) ch_from_mark(sc, 'e');
        } else if (*q == 'h' && end - q >= 3 && q[2] == 'a') {
            q += 3, k++;
            if (sc) ch_push(sc, 0), ch_pop(sc, 'a');
        } else if (*q == 'j' && end - q >= 6 && q[5] == 'a') {
            q += 6, k++;
            if (sc) ch_push(sc, 0), ch_pop(sc, 'a');
        } else {
            break;
        }
    }
    /* the machine would push every item of a MARK batch: the same stack limit applies */
    size_t room = vm->max_stack > vm->sp ? (size_t)(vm->max_stack - vm->sp) : 0;
    if (k > room) return 0;
    size_t n = (size_t)(q - p0);
    uint64_t h = bytes_hash(p0, n);
    Py_ssize_t seen = spanset_find(&vm->spans, p0, n, h, vm->memo_overwrites);
    Py_ssize_t g;
    if (seen >= 0) {
        g = vm->spans.stack[seen];
        f->p = q;
    } else {
        g = frames_items_stack(vm, f, k);
        if (g < 0 || f->p != q) return g < 0 && PyErr_Occurred() ? -1 : 0;
        f->span = p0;
        f->span_n = n;
        f->span_hash = h;
        f->span_stack = (int32_t)g;
        f->span_items = (int32_t)k;
    }
    if (slot >= 0) {
        Py_DECREF(vm->marker);
        f->put[slot].o = MEMO_STACK(g);
    }
    f->items += (long long)k;
    *out = (Val){V_STACK, {.i = g}};
    return 1;
}

/* A value just read, o (owned), and its memo put if one follows: *out becomes o. 1 ok, 0
   not for the shortcut (o released). */
static inline int fast_value_put(VM *vm, Fast *f, PyObject *o, Val *out) {
    Py_INCREF(o);
    int r = fast_put(vm, f, o);
    if (r != 1) Py_DECREF(o);
    if (r < 0) {
        Py_DECREF(o);
        return 0;
    }
    *out = (Val){V_OBJ, {.o = o}};
    return 1;
}

/* A BININT1, BININT2 or BININT at p: its length (0: none there), its value in *v. */
static inline int fast_small_int(const unsigned char *p, const unsigned char *end, int64_t *v) {
    if (p < end && *p == 'K' && end - p >= 2) return *v = p[1], 2;
    if (p < end && *p == 'M' && end - p >= 3) return *v = rd_le(p + 1, 2), 3;
    if (p < end && *p == 'J' && end - p >= 5) return *v = (int32_t)ld32(p + 1), 5;
    return 0;
}

/* A pool_id as PyTorch writes it at f->p: two small ints, TUPLE2, then usually its memo put
   (the caller charged the first int to the scan). Without this, every entry that has one
   would be read by the machine, opcode by opcode (2.8x slower). 1 ok, 0 not for the
   shortcut, -1 error. */
static int fast_pool_id(VM *vm, Fast *f, Val *out) {
    const unsigned char *p = f->p, *end = f->end;
    int64_t a = 0, b = 0;
    const int na = fast_small_int(p, end, &a);
    const int nb = na ? fast_small_int(p + na, end, &b) : 0;
    if (!nb || end - (p + na + nb) < 1 || p[na + nb] != 0x86) return 0;
    Scan *sc = f->sc;
    if (sc) { /* the second int and TUPLE2, as the scan charges them */
        if (p[na] == 'M' && b > 256) sc->at.cost += sc->c[C_INT];
        ch_push(sc, sc->made[p[na]]);
        ch_pop(sc, 0x86);
    }
    /* a new tuple each time, as the unpickler makes one: should the memo hand it to
       anything that goes by identity, both readers see the same objects */
    PyObject *t = Py_BuildValue("(LL)", (long long)a, (long long)b);
    if (!t) return -1;
    f->p = p + na + nb + 1;
    return fast_value_put(vm, f, t, out);
}

/* One value at f->p, for field fld, into *out (owned). 1 ok, 0 not for the shortcut, -1 error. */
static inline int fast_value(VM *vm, Fast *f, int fld, Val *out) {
    const unsigned char *p = f->p, *end = f->end;
    if (p >= end) return 0;
    Scan *sc = f->sc;
    /* the scan's charge for the value (a bail undoes it: fast_entry) */
    if (sc && *p != ']') {
        uint64_t arg = 0;
        if (*p == 'M' && end - p >= 3 && rd_le(p + 1, 2) > 256) arg = sc->c[C_INT];
        if ((*p == 0x8a || *p == 0x8c) && end - p >= 2 && (size_t)(end - p) >= 2u + p[1])
            arg = scan_arg_cost(sc, *p, p + 2, p[1]);
        sc->at.cost += arg;
        ch_push(sc, sc->made[*p]);
    }
    if (fld == F_POOL_ID && (*p == 'K' || *p == 'M' || *p == 'J')) return fast_pool_id(vm, f, out);
    switch (*p) {
    case 'K':
        if (end - p < 2) return 0;
        *out = (Val){V_INT, {.i = p[1]}};
        f->p = p + 2;
        return 1;
    case 'M':
        if (end - p < 3) return 0;
        *out = (Val){V_INT, {.i = rd_le(p + 1, 2)}};
        f->p = p + 3;
        return 1;
    case 'J':
        if (end - p < 5) return 0;
        *out = (Val){V_INT, {.i = (int32_t)ld32(p + 1)}};
        f->p = p + 5;
        return 1;
    case 0x8a: { /* LONG1, as push_long reads it */
        if (end - p < 2) return 0;
        size_t n = p[1];
        if ((size_t)(end - p) < 2 + n) return 0;
        const unsigned char *b = p + 2;
        if (n <= 8) {
            uint64_t x = end - b >= 8 ? ld_le_in8(b, (int)n) : ld_le(b, (int)n);
            if (n && n < 8 && (b[n - 1] & 0x80)) x |= ~0ULL << (8 * n);
            *out = (Val){V_INT, {.i = (int64_t)x}};
        } else if (n == 9 && b[8] == 0) {
            uint64_t x = (uint64_t)rd_le(b, 8);
            *out = x <= (uint64_t)INT64_MAX ? (Val){V_INT, {.i = (int64_t)x}}
                                            : (Val){V_UINT, {.u = x}};
        } else {
            return 0;
        }
        f->p = p + 2 + n;
        return 1;
    }
    case 'N':
    case 0x88:
    case 0x89: {
        PyObject *o = *p == 'N' ? Py_None : *p == 0x88 ? Py_True : Py_False;
        Py_INCREF(o);
        *out = (Val){V_OBJ, {.o = o}};
        f->p = p + 1;
        return 1;
    }
    case 'h':
    case 'j': {
        Py_ssize_t idx = fast_get_index(f);
        PyObject *o = idx < 0 ? NULL : fast_memo(vm, f, (size_t)idx);
        if (!o || o == vm->marker) return 0;
        if (MEMO_IS_STACK(o)) {
            if (fld != F_FRAMES) return 0;
            *out = (Val){V_STACK, {.i = (int64_t)MEMO_STACK_INDEX(o)}};
        } else {
            Py_INCREF(o);
            *out = (Val){V_OBJ, {.o = o}};
        }
        return 1;
    }
    case 0x8c: { /* SHORT_BINUNICODE, then usually its memo put */
        if (end - p < 2) return 0;
        size_t n = p[1];
        if ((size_t)(end - p) < 2 + n || n > vm->max_string) return 0;
        PyObject *s = make_str(vm, p + 2, n);
        if (!s) {
            /* the machine says it in its words */
            return take_error(PyExc_UnicodeDecodeError) ? 0 : -1;
        }
        f->p = p + 2 + n;
        return fast_value_put(vm, f, s, out);
    }
    case ']': return fld == F_FRAMES ? fast_frames(vm, f, out) : 0;
    default: return 0;
    }
}

/* The shortcut read an entry, up to in->pos, and charged it to the scan (from `before`):
   the scan goes on from there. The next entry's EMPTY_DICT, when it follows in the same
   frame, is charged too (as the scan charges it), so that the reader reads on to it
   without a call into the scan for that one byte (once per entry). Past a limit, none of
   this: the scan itself reads the entry again from `before`, to stop where it stops
   alone, at the same byte with the same estimate, and the reader goes no further. */
static void scan_charged(Scan *sc, const ScanAt *before, Input *in) {
    ScanAt *at = &sc->at;
    size_t upto = in->pos;
    const size_t edge = at->frame_end > upto ? at->frame_end : in->total;
    if (upto < edge && in->buf[upto] == '}') {
        ch_push(sc, sc->made['}']);
        upto++;
    }
    at->pos = upto;
    at->extra = sc->c[C_BASE] + sc->c[C_MEMO_SLOT] * (uint64_t)(at->memo_top + 1) +
                sc->c[C_STACK_SLOT] * (uint64_t)at->peak;
    if (at->cost + at->extra > sc->lim || at->memo_top >= sc->memo_max) {
        *at = *before;
        scan_until(sc, in->pos);
        upto = in->pos;
    }
    in->len = upto;
    input_passed(in);
}

/* Right after an entry's EMPTY_DICT: 1 the entry was read and pushed as a pending row;
   0 nothing happened (the machine reads it); -1 error. */
int fast_entry(VM *vm) {
    if (vm->nmarks + 2 > vm->max_marks || vm->sp + 1 > vm->max_stack) return 0;
    Input *in = &vm->in;
    Fast f; /* not zeroed as a whole: put[] is written before it is read */
    f.p = in->buf + in->pos;
    f.end = in->buf + in->len;
    /* the scan is at the entry (it runs in step with the reader): the shortcut reads on to
       the end of the data or of the FRAME, charging what it reads to the scan itself */
    f.sc = in->sc && !in->sc->done && in->sc->at.pos == in->pos ? in->sc : NULL;
    ScanAt before;
    if (f.sc) {
        before = f.sc->at;
        const size_t fe = before.frame_end;
        f.end = in->buf + (fe > in->pos ? fe : in->total);
    }
    f.nput = 0;
    f.new_slots = 0;
    f.items = 0;
    f.span = NULL;
    Py_ssize_t r_row = row_alloc(vm);
    if (r_row < 0) {
        PyErr_Clear(); /* the row limit: the machine meets it again */
        return 0;
    }
    Row *row = &vm->rows[r_row];
    Py_INCREF(vm->marker); /* the entry's own memo slot, as the machine fills it */
    int r = fast_put(vm, &f, vm->marker);
    if (r != 1) Py_DECREF(vm->marker);
    if (r < 0 || f.p >= f.end || *f.p != '(') goto bail;
    if (f.sc && ch_mark(f.sc) < 0) goto bail;
    f.p++;
    for (;;) {
        if (f.p >= f.end) goto bail;
        if (*f.p == 'u') {
            f.p++;
            if (f.sc) ch_from_mark(f.sc, 'u');
            break;
        }
        Py_ssize_t idx = fast_get_index(&f);
        if (idx < 0) goto bail;
        if (f.sc) ch_push(f.sc, 0);
        int fld;
        if (vm->field_by_slot[idx & 255].slot1 == (size_t)idx + 1) {
            /* a filled slot: pending puts only go to empty ones, so this is the key */
            fld = vm->field_by_slot[idx & 255].field;
        } else {
            PyObject *key = fast_memo(vm, &f, (size_t)idx);
            if (!key || MEMO_IS_STACK(key) || !PyUnicode_CheckExact(key)) goto bail;
            fld = field_of(vm, key);
            if (fld < 0) {
                PyErr_Clear();
                goto bail;
            }
            if (key == (idx < (Py_ssize_t)vm->memo_cap ? vm->memo[idx] : NULL)) {
                vm->field_by_slot[idx & 255].slot1 = (size_t)idx + 1;
                vm->field_by_slot[idx & 255].field = fld;
            }
        }
        if (fld >= NF || (row->set & (1u << fld))) goto bail;
        int rv = fast_value(vm, &f, fld, &row->f[fld]);
        if (rv < 0) goto error;
        if (rv == 0) goto bail;
        row->set |= 1u << fld;
    }
    for (int k = 0; k < f.nput; k++) {
        if (memo_room(vm, f.put[k].idx) < 0) goto error;
        memo_store(vm, f.put[k].idx, f.put[k].o);
        f.put[k].o = NULL;
    }
    f.nput = 0;
    if (f.span) spanset_add(&vm->spans, f.span, f.span_n, f.span_hash, f.span_stack, f.span_items);
    in->pos = (size_t)(f.p - in->buf);
    if (f.sc) scan_charged(f.sc, &before, in);
    row->frames_items = f.items;
    return push(vm, (Val){V_ENTRY, {.row = r_row}}) < 0 ? -1 : 1;
bail:
    if (f.sc) f.sc->at = before;
    row_free(vm, r_row);
    fast_drop_puts(&f);
    return 0;
error:
    if (f.sc) f.sc->at = before;
    row_free(vm, r_row);
    fast_drop_puts(&f);
    return -1;
}
