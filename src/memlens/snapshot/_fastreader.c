/*
 * memlens.snapshot._fastreader: a reader for PyTorch memory-snapshot pickles.
 *
 * It runs the pickle opcodes (protocols 2-5) of a whole pickle in memory (the caller maps
 * the file, or inflates a gzip stream, and checks it with scan() first) itself and writes
 * every trace entry of device_traces straight into typed columns, so the dict per event
 * that pickle.load builds never exists. Everything else (segments, settings, annotations,
 * frames, stacks) is small and is built as plain Python objects exactly as the restricted
 * unpickler would build it, so memlens' Python builder turns it into the same columns.
 *
 * Roles. A container's job is guessed when it is created, from the stack: the root dict,
 * the list under its "device_traces" key (DT_LIST), the lists in that list (device lists,
 * built as Columns objects) and the dicts in those (entries, kept as pending rows until
 * they are appended). The guess is checked as the pickle goes on; whenever the file is
 * shaped differently (an entry referenced twice, a value we do not type, an opcode of
 * protocol 0/1, ...) the reader raises Fallback and memlens reads the file with the Python
 * path instead. Fallback is about speed only; it is never taken for PyTorch's own output.
 *
 * Safety. Opcodes that import or call (GLOBAL, STACK_GLOBAL, INST, OBJ, REDUCE, NEWOBJ,
 * NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, BUILD) raise Refused before anything else
 * happens; every declared length is checked against the bytes left; stack, marks and memo are bounded
 * by the limits the caller passes. Any failure is a Python exception, never a crash.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ exceptions */
static PyObject *Fallback;  /* shape we do not handle: read with the Python path */
static PyObject *Corrupt;   /* not a readable pickle: args (detail,) */
static PyObject *Truncated; /* the pickle ends before STOP */
static PyObject *Refused;   /* args (opcode name, protocol, module or None, name or None) */
static PyObject *LimitHit;  /* args (limit name, value, limit) */

static int fallback(const char *why) {
    PyErr_SetString(Fallback, why);
    return -1;
}

static int corrupt(const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_SetString(Corrupt, msg);
    return -1;
}

static int limit_hit(const char *name, unsigned long long value, unsigned long long limit) {
    PyObject *args = Py_BuildValue("(sKK)", name, value, limit);
    if (args) {
        PyErr_SetObject(LimitHit, args);
        Py_DECREF(args);
    }
    return -1;
}

/* ------------------------------------------------------------------ input */
/* What the scan charges (prescan.COSTS, in this order). */
enum {
    C_DICT,
    C_LIST,
    C_TUPLE,
    C_SET,
    C_DICT_ITEM,
    C_LIST_ITEM,
    C_TUPLE_ITEM,
    C_SET_ITEM,
    C_INT,
    C_FLOAT,
    C_STR,
    C_BYTES,
    C_MEMO_SLOT,
    C_STACK_SLOT,
    NCOSTS
};

/* Where a scan stands: it can stop after any opcode and go on later (the reader runs it
   just ahead of itself, and charges the opcodes of its own shortcuts itself). */
typedef struct {
    size_t pos, height, peak, nmarks;
    /* where the current FRAME ends (PEP 3154: no opcode crosses it); 0, or a value at or
       before `pos` once an opcode has ended on it: none */
    size_t frame_end;
    uint64_t cost, memo_len;
    uint64_t extra; /* memo table and stack at their largest, kept up to date */
    int64_t memo_top;
} ScanAt;

/* One scan over a whole pickle: its inputs, its tables, where it stands, and its outcome. */
typedef struct {
    const unsigned char *d;
    size_t n;
    unsigned long long limit, memo_limit;
    uint64_t c[NCOSTS];
    uint64_t lim;
    int64_t memo_max;
    /* the class of each opcode (its argument), and its effect on the stack */
    unsigned char cls[256], wid[256], eff[256], txt[256], popk[256], left[256];
    uint64_t made[256], per_item[256];
    ScanAt at;
    size_t *marks, marks_cap; /* the stack's height at each open MARK */
    uint64_t memo_named;      /* for a "memo" status: the slots named */
    int done;                 /* 1 when the fields below are final */
    const char *status, *opname;
    unsigned long long value;
    size_t pos;
} Scan;

/* The whole pickle, borrowed from the caller's buffer (a mapped file or inflated bytes),
   of which the reader may read `len` bytes: all `total` once the scan has ended (or when
   there is no scan), until then the bytes it has checked. */
typedef struct {
    const unsigned char *buf;
    size_t pos, len, total;
    Scan *sc; /* NULL: no scan ahead of the reader */
} Input;

static PyObject *ScanStop; /* the scan refused the file: args (the scan's result) */

static void scan_until(Scan *sc, size_t target);

/* Run the scan over `need` unread bytes (it stops after the opcode that covers them). 0
   they are there; 1 the data ends before (truncated); -1 with ScanStop set when the scan
   refused the file before them (its answer is the reader's: the file is refused as the
   Python path would refuse it). */
static int input_need(Input *in, size_t need) {
    while (in->len - in->pos < need) {
        Scan *sc = in->sc;
        if (!sc) return 1;
        if (!sc->done) scan_until(sc, need > in->total - in->pos ? in->total : in->pos + need);
        if (sc->done && strcmp(sc->status, "ok") != 0) {
            PyErr_SetString(ScanStop, sc->status);
            return -1;
        }
        const size_t visible = sc->done ? in->total : sc->at.pos;
        if (visible > in->len)
            in->len = visible;
        else if (sc->done)
            in->sc = NULL; /* all of it is there: what is missing is missing */
    }
    return 0;
}

/* ------------------------------------------------------------------ growable buffers */
typedef struct {
    char *data;
    size_t n, cap, item;
} Buf;

static int buf_reserve(Buf *b, size_t n) {
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

/* A read-write buffer object that owns malloc'd column memory (numpy views it). */
typedef struct {
    PyObject_HEAD char *data;
    Py_ssize_t nbytes;
} Chunk;

static void chunk_dealloc(Chunk *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int chunk_getbuffer(Chunk *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (char *)"",
                             self->nbytes, 0, flags);
}

static PyBufferProcs chunk_as_buffer = {(getbufferproc)chunk_getbuffer, NULL};

static PyTypeObject ChunkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "memlens.snapshot._fastreader.Chunk",
    .tp_basicsize = sizeof(Chunk),
    .tp_dealloc = (destructor)chunk_dealloc,
    .tp_as_buffer = &chunk_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "column memory handed to numpy",
};

/* Hand a Buf over to a Chunk (the Buf is left empty). */
static PyObject *buf_to_chunk(Buf *b) {
    Chunk *c = PyObject_New(Chunk, &ChunkType);
    if (!c) return NULL;
    c->data = b->data;
    c->nbytes = (Py_ssize_t)(b->n * b->item);
    if (c->data && b->n < b->cap) { /* give the slack back */
        char *nd = realloc(c->data, b->n ? b->n * b->item : 1);
        if (nd) c->data = nd;
    }
    b->data = NULL;
    b->n = b->cap = 0;
    return (PyObject *)c;
}

/* ------------------------------------------------------------------ interning */
/* Intern by equality (dict semantics, as Python's set() in builder._coded): the distinct
   values in order of first appearance, with a small identity cache in front (actions
   alternate between a few memo-shared strings, so one entry is not enough). */
#define EQ_RECENT 4
typedef struct {
    PyObject *list; /* distinct values, first appearance order */
    PyObject *map;  /* value -> index */
    PyObject *recent[EQ_RECENT];
    Py_ssize_t recent_idx[EQ_RECENT];
    unsigned next;
} EqTable;

static int eq_init(EqTable *t) {
    *t = (EqTable){0};
    t->list = PyList_New(0);
    t->map = PyDict_New();
    return (t->list && t->map) ? 0 : -1;
}

static void eq_clear(EqTable *t) {
    Py_CLEAR(t->list);
    Py_CLEAR(t->map);
    for (int k = 0; k < EQ_RECENT; k++) Py_CLEAR(t->recent[k]);
}

static Py_ssize_t eq_index(EqTable *t, PyObject *v) {
    for (int k = 0; k < EQ_RECENT; k++)
        if (t->recent[k] == v) return t->recent_idx[k];
    PyObject *hit = PyDict_GetItemWithError(t->map, v);
    Py_ssize_t idx;
    if (hit) {
        idx = PyLong_AsSsize_t(hit);
    } else {
        if (PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                fallback("unhashable value in a trace entry");
            }
            return -1;
        }
        idx = PyList_GET_SIZE(t->list);
        PyObject *key = PyLong_FromSsize_t(idx);
        if (!key) return -1;
        int bad = PyDict_SetItem(t->map, v, key) < 0 || PyList_Append(t->list, v) < 0;
        Py_DECREF(key);
        if (bad) return -1;
    }
    unsigned k = t->next++ % EQ_RECENT;
    Py_INCREF(v);
    Py_XSETREF(t->recent[k], v);
    t->recent_idx[k] = idx;
    return idx;
}

/* Objects by identity -> an index the caller chose (frames values the fast path did not
   see being built). Holding a reference keeps an address from being reused by another
   object while it is a key. */
typedef struct {
    PyObject **keys;
    int32_t *vals;
    size_t mask, used;
    PyObject *list; /* the keys, kept alive */
} IdTable;

static int id_init(IdTable *t) {
    t->mask = 1023;
    t->used = 0;
    t->keys = calloc(t->mask + 1, sizeof(PyObject *));
    t->vals = calloc(t->mask + 1, sizeof(int32_t));
    t->list = PyList_New(0);
    if (!t->keys || !t->vals) {
        PyErr_NoMemory();
        return -1;
    }
    return t->list ? 0 : -1;
}

static void id_clear(IdTable *t) {
    free(t->keys);
    free(t->vals);
    t->keys = NULL;
    t->vals = NULL;
    Py_CLEAR(t->list);
}

static size_t ptr_hash(PyObject *p) {
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

/* The index stored for v, or -2 when v is not a key. */
static Py_ssize_t id_get(IdTable *t, PyObject *v) {
    size_t i = ptr_hash(v) & t->mask;
    while (t->keys[i]) {
        if (t->keys[i] == v) return t->vals[i];
        i = (i + 1) & t->mask;
    }
    return -2;
}

static int id_put(IdTable *t, PyObject *v, int32_t idx) {
    size_t i = ptr_hash(v) & t->mask;
    while (t->keys[i]) i = (i + 1) & t->mask;
    if (PyList_Append(t->list, v) < 0) return -1;
    t->keys[i] = v;
    t->vals[i] = idx;
    if (++t->used * 2 > t->mask) {
        size_t nmask = t->mask * 2 + 1;
        PyObject **nk = calloc(nmask + 1, sizeof(PyObject *));
        int32_t *nv = calloc(nmask + 1, sizeof(int32_t));
        if (!nk || !nv) {
            free(nk);
            free(nv);
            PyErr_NoMemory();
            return -1;
        }
        for (size_t j = 0; j <= t->mask; j++) {
            if (!t->keys[j]) continue;
            size_t k = ptr_hash(t->keys[j]) & nmask;
            while (nk[k]) k = (k + 1) & nmask;
            nk[k] = t->keys[j];
            nv[k] = t->vals[j];
        }
        free(t->keys);
        free(t->vals);
        t->keys = nk;
        t->vals = nv;
        t->mask = nmask;
    }
    return 0;
}

/* Distinct stacks by content. PyTorch writes a new frames list for every allocation (its
   free shares it through the memo), made of memo-shared frame dicts, so a million entries
   hold a few hundred distinct stacks. A stack here is its sequence of frame objects (by
   identity): equal sequences are one stack, and one list per stack (its representative)
   is all the builder ever sees, instead of a list per entry. Python's StackTable then
   interns the representatives by frame content, in the same first-use order. */
typedef struct {
    PyObject **items; /* the frame objects of every stack, back to back (borrowed: each
                         representative list holds them) */
    size_t n_items, cap_items;
    size_t *off; /* stack g is items[off[g] .. off[g + 1]) */
    uint64_t *hash;
    PyObject **rep; /* owned: one list per stack */
    size_t n, cap;
    int32_t *slots; /* open addressing: stack + 1, 0 for empty */
    size_t mask;
} StackSet;

/* Keys for the stack and span hashes, set once per process from os.urandom at import: the
   bytes of a frames list come from an untrusted file, and with a fixed hash a crafted file
   could choose bodies that all land in one slot run (as it could addresses in the replay's
   table before it was keyed: tests/hostile/test_hash_flood.py). */
static uint64_t hash_seed[2] = {0x9e3779b97f4a7c15ULL, 0x243f6a8885a308d3ULL};

static uint64_t items_hash(PyObject *const *items, size_t k) {
    uint64_t h = hash_seed[0] ^ k;
    for (size_t i = 0; i < k; i++) h = (h ^ ptr_hash(items[i])) * 0x100000001b3ULL;
    return h ^ (h >> 31);
}

static void stackset_clear(StackSet *t) {
    for (size_t g = 0; g < t->n; g++) Py_XDECREF(t->rep[g]);
    free(t->items);
    free(t->off);
    free(t->hash);
    free(t->rep);
    free(t->slots);
    *t = (StackSet){0};
}

/* An open-addressing table of indexes + 1 (0: empty) over n entries with hashes `hash`,
   rebuilt twice as large (1,024 slots the first time). -1 when out of memory. */
static int slots_grow(int32_t **slots, size_t *mask, const uint64_t *hash, size_t n) {
    size_t nmask = *mask ? *mask * 2 + 1 : 1023;
    int32_t *ns = calloc(nmask + 1, sizeof(int32_t));
    if (!ns) return -1;
    for (size_t e = 0; e < n; e++) {
        size_t i = (size_t)hash[e] & nmask;
        while (ns[i]) i = (i + 1) & nmask;
        ns[i] = (int32_t)(e + 1);
    }
    free(*slots);
    *slots = ns;
    *mask = nmask;
    return 0;
}

static int stackset_grow_slots(StackSet *t) {
    if (slots_grow(&t->slots, &t->mask, t->hash, t->n) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The stack made of items[0..k), added if new (*added set). -1 on error. */
static Py_ssize_t stackset_index(StackSet *t, PyObject *const *items, size_t k, int *added) {
    *added = 0;
    if (!t->slots && stackset_grow_slots(t) < 0) return -1;
    uint64_t h = items_hash(items, k);
    size_t i = (size_t)h & t->mask;
    while (t->slots[i]) {
        size_t g = (size_t)t->slots[i] - 1;
        if (t->hash[g] == h && t->off[g + 1] - t->off[g] == k &&
            (k == 0 || memcmp(t->items + t->off[g], items, k * sizeof(PyObject *)) == 0))
            return (Py_ssize_t)g;
        i = (i + 1) & t->mask;
    }
    if (t->n >= INT32_MAX - 1) return fallback("too many distinct stacks");
    if (t->n + 1 >= t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        size_t *no = realloc(t->off, (ncap + 1) * sizeof(size_t));
        if (no) t->off = no;
        uint64_t *nh = realloc(t->hash, ncap * sizeof(uint64_t));
        if (nh) t->hash = nh;
        PyObject **nr = realloc(t->rep, ncap * sizeof(PyObject *));
        if (nr) t->rep = nr;
        if (!no || !nh || !nr) {
            PyErr_NoMemory();
            return -1;
        }
        if (!t->cap) t->off[0] = 0;
        t->cap = ncap;
    }
    if (t->n_items + k > t->cap_items) {
        size_t ncap = t->cap_items ? t->cap_items * 2 : 4096;
        while (ncap < t->n_items + k) ncap *= 2;
        PyObject **ni = realloc(t->items, ncap * sizeof(PyObject *));
        if (!ni) {
            PyErr_NoMemory();
            return -1;
        }
        t->items = ni;
        t->cap_items = ncap;
    }
    PyObject *rep = PyList_New((Py_ssize_t)k);
    if (!rep) return -1;
    for (size_t j = 0; j < k; j++) {
        Py_INCREF(items[j]);
        PyList_SET_ITEM(rep, (Py_ssize_t)j, items[j]);
    }
    size_t g = t->n++;
    if (k) memcpy(t->items + t->n_items, items, k * sizeof(PyObject *)); /* (NULL when empty) */
    t->n_items += k;
    t->off[g + 1] = t->n_items;
    t->hash[g] = h;
    t->rep[g] = rep;
    t->slots[i] = (int32_t)(g + 1);
    *added = 1;
    if (t->n * 2 > t->mask && stackset_grow_slots(t) < 0) return -1;
    return (Py_ssize_t)g;
}

/* Frames list bodies by their bytes. Inside a file, the same memo references in the same
   order are the same frame objects, as long as no memo slot is overwritten (never, in a
   pickler's output: a BINPUT over a filled slot starts the table afresh), so an allocation's
   new list whose bytes were seen before is that stack, without looking at its items. */
#define SPAN_MAX_BYTES 8192
#define SPAN_TOTAL_BYTES (64u << 20)

typedef struct {
    unsigned char *bytes; /* every body, back to back */
    size_t n_bytes, cap_bytes;
    size_t *off; /* body i: bytes[off[i] .. off[i + 1]) */
    uint64_t *hash;
    int32_t *stack, *n_items;
    size_t n, cap;
    int32_t *slots; /* open addressing: body + 1, 0 for empty */
    size_t mask;
    unsigned long long generation; /* the memo's overwrite count the bodies belong to */
} SpanSet;

static uint64_t bytes_hash(const unsigned char *p, size_t n) {
    uint64_t h = hash_seed[1] ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x9fb21c651e98df25ULL;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0x9fb21c651e98df25ULL;
    h ^= h >> 32;
    return (h ^ hash_seed[0]) * 0xff51afd7ed558ccdULL; /* the key again, at the end too */
}

static PyObject *fr_span_hash(PyObject *Py_UNUSED(mod), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    uint64_t h = bytes_hash(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

static void spanset_clear(SpanSet *t) {
    free(t->bytes);
    free(t->off);
    free(t->hash);
    free(t->stack);
    free(t->n_items);
    free(t->slots);
    *t = (SpanSet){0};
}

/* The body's index, or -1. */
static Py_ssize_t spanset_find(SpanSet *t, const unsigned char *p, size_t n, uint64_t h,
                               unsigned long long generation) {
    if (t->generation != generation) {
        spanset_clear(t);
        t->generation = generation;
    }
    if (!t->slots) return -1;
    size_t i = (size_t)h & t->mask;
    while (t->slots[i]) {
        size_t b = (size_t)t->slots[i] - 1;
        if (t->hash[b] == h && t->off[b + 1] - t->off[b] == n &&
            (n == 0 || memcmp(t->bytes + t->off[b], p, n) == 0))
            return (Py_ssize_t)b;
        i = (i + 1) & t->mask;
    }
    return -1;
}

/* Remember a body (best effort: on a full table or no memory it is simply not kept). */
static void spanset_add(SpanSet *t, const unsigned char *p, size_t n, uint64_t h, int32_t stack,
                        int32_t n_items) {
    if (n > SPAN_MAX_BYTES || t->n_bytes + n > SPAN_TOTAL_BYTES || t->n >= INT32_MAX - 1) return;
    if ((!t->slots || (t->n + 1) * 2 > t->mask) &&
        slots_grow(&t->slots, &t->mask, t->hash, t->n) < 0)
        return;
    if (t->n + 1 >= t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        size_t *no = realloc(t->off, (ncap + 1) * sizeof(size_t));
        if (no) t->off = no;
        uint64_t *nh = realloc(t->hash, ncap * sizeof(uint64_t));
        if (nh) t->hash = nh;
        int32_t *nst = realloc(t->stack, ncap * sizeof(int32_t));
        if (nst) t->stack = nst;
        int32_t *nk = realloc(t->n_items, ncap * sizeof(int32_t));
        if (nk) t->n_items = nk;
        if (!no || !nh || !nst || !nk) return;
        if (!t->cap) t->off[0] = 0;
        t->cap = ncap;
    }
    if (t->n_bytes + n > t->cap_bytes) {
        size_t ncap = t->cap_bytes ? t->cap_bytes * 2 : 1 << 16;
        while (ncap < t->n_bytes + n) ncap *= 2;
        unsigned char *nb = realloc(t->bytes, ncap);
        if (!nb) return;
        t->bytes = nb;
        t->cap_bytes = ncap;
    }
    size_t b = t->n++;
    if (n) memcpy(t->bytes + t->n_bytes, p, n);
    t->n_bytes += n;
    t->off[b + 1] = t->n_bytes;
    t->hash[b] = h;
    t->stack[b] = stack;
    t->n_items[b] = n_items;
    size_t i = (size_t)h & t->mask;
    while (t->slots[i]) i = (i + 1) & t->mask;
    t->slots[i] = (int32_t)(b + 1);
}

/* ------------------------------------------------------------------ values */
/* V_ENTRY: an entry dict (v.row: its pending Row, written to the columns when APPENDed);
   V_STACK: inside a Row only, a frames list as its index in the VM's stack table. */
enum { V_OBJ = 0, V_INT, V_UINT, V_ENTRY, V_STACK };

typedef struct {
    int tag;
    union {
        PyObject *o;
        int64_t i;
        uint64_t u;
        Py_ssize_t row;
    } v;
} Val;

/* Entry fields the reader types; everything else builder.KNOWN_ENTRY_FIELDS names is
   skipped, and any other key is reported as unknown. */
enum { F_ACTION, F_ADDR, F_SIZE, F_STREAM, F_TIME, F_FRAMES, F_CC, F_UM, F_FF, F_DEVFREE, NF };
enum { F_KNOWN_SKIPPED = 100, F_UNKNOWN, F_LEGACY };
static const char *FIELD_NAMES[NF] = {
    "action",          "addr",          "size",           "stream",     "time_us", "frames",
    "compile_context", "user_metadata", "forward_frames", "device_free"};

typedef struct {
    Val f[NF];
    unsigned set;
    int in_use;
    PyObject *unknown; /* list of unknown keys, or NULL */
    PyObject *skipped; /* list of known keys the columns do not keep, or NULL */
    long long frames_items; /* items of a frames list the fast path read for this entry */
} Row;

static void val_release(Val *v) {
    if (v->tag == V_OBJ) Py_XDECREF(v->v.o);
    v->tag = V_INT;
    v->v.i = 0;
}

/* ------------------------------------------------------------------ device columns */
enum {
    C_ACTION,
    C_ADDR,
    C_SIZE,
    C_STREAM,
    C_TIME,
    C_FRAMES,
    C_CC,
    C_UM,
    C_FF,
    C_DF_ROW,
    C_DF_VAL,
    NCOL
};
static const char *COL_NAMES[NCOL] = {
    "action",          "addr",          "size",           "stream",          "time_us",    "frames",
    "compile_context", "user_metadata", "forward_frames", "device_free_row", "device_free"};
static const size_t COL_ITEM[NCOL] = {1, 8, 8, 4, 8, 4, 4, 4, 4, 8, 8};

typedef struct {
    PyObject_HEAD Py_ssize_t n;
    size_t room; /* rows every per-entry column has room for (0: look again) */
    Buf col[NCOL];
    int has_col[NCOL]; /* optional columns exist once their key was seen */
    EqTable actions, streams, cc, um, ff;
    /* frames values, by their local index (the "frames" column): a stack's representative
       list, or any other object (None, a tuple...) as it is */
    PyObject *frames_objects;
    int32_t *g2l; /* VM stack index -> local index, -1 for none yet */
    size_t g2l_cap;
    IdTable frames; /* frames objects seen as they are (not as a VM stack) -> local index */
    long long frames_items; /* items of the distinct frames lists, for the builder's budget */
    IdTable ff_lists;       /* forward_frames lists met -> their text's index in ff_texts */
    PyObject *ff_texts;     /* owned list: each list's text, joined once */
    long long ff_items;     /* their items, for the builder's budget */
    long long ff_chars;     /* and their characters, for its 'text' budget */
    PyObject *unknown; /* set of unknown keys */
    int has_action;
    int attached;
    long long total_keys;
    int64_t last_stream;
    int32_t last_stream_idx;
} Columns;

static void columns_dealloc(Columns *self) {
    for (int c = 0; c < NCOL; c++) free(self->col[c].data);
    eq_clear(&self->actions);
    eq_clear(&self->streams);
    eq_clear(&self->cc);
    eq_clear(&self->um);
    eq_clear(&self->ff);
    id_clear(&self->frames);
    id_clear(&self->ff_lists);
    Py_XDECREF(self->ff_texts);
    Py_XDECREF(self->frames_objects);
    free(self->g2l);
    Py_XDECREF(self->unknown);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* export() -> dict: n, the columns as buffers (moved out), the distinct tables, flags. */
static PyObject *columns_export(Columns *self, PyObject *Py_UNUSED(ignored)) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    PyObject *n = PyLong_FromSsize_t(self->n);
    if (!n || PyDict_SetItemString(d, "n", n) < 0) goto fail;
    Py_CLEAR(n);
    n = PyLong_FromLongLong(self->total_keys);
    if (!n || PyDict_SetItemString(d, "total_keys", n) < 0) goto fail;
    Py_CLEAR(n);
    n = PyLong_FromLongLong(self->frames_items);
    if (!n || PyDict_SetItemString(d, "frames_items", n) < 0) goto fail;
    Py_CLEAR(n);
    n = PyLong_FromLongLong(self->ff_items);
    if (!n || PyDict_SetItemString(d, "forward_frames_items", n) < 0) goto fail;
    Py_CLEAR(n);
    n = PyLong_FromLongLong(self->ff_chars);
    if (!n || PyDict_SetItemString(d, "forward_frames_chars", n) < 0) goto fail;
    Py_CLEAR(n);
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

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "memlens.snapshot._fastreader.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_dealloc = (destructor)columns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = columns_methods,
    .tp_doc = "one device's trace entries, as columns",
};

static Columns *columns_new(void) {
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
        eq_init(&c->um) < 0 || eq_init(&c->ff) < 0 || id_init(&c->frames) < 0 ||
        id_init(&c->ff_lists) < 0 || !(c->frames_objects = PyList_New(0)) ||
        !(c->ff_texts = PyList_New(0)) || !(c->unknown = PySet_New(NULL))) {
        Py_DECREF(c);
        return NULL;
    }
    return c;
}

/* ------------------------------------------------------------------ the machine */
typedef struct {
    Input in;
    Val *stack;
    Py_ssize_t sp, stack_cap, max_stack;
    Py_ssize_t *marks;
    Py_ssize_t nmarks, marks_cap, max_marks;
    /* memo slots hold an owned object, or a VM stack as MEMO_STACK(g) (a frames list the
       fast path read: it never became an object of its own) */
    PyObject **memo;
    size_t memo_cap, max_memo;
    size_t memo_count; /* filled slots: where MEMOIZE puts (as CPython's unpickler does) */
    StackSet stacks;
    SpanSet spans;
    unsigned long long memo_overwrites; /* filled memo slots written again */
    PyObject **tmp_items; /* the fast path's frames list being read */
    size_t tmp_cap;

    Row *rows;
    Py_ssize_t rows_cap, rows_live;
    size_t rows_hint; /* entries the file probably holds (0: no guess) */
    Py_ssize_t free_row;
    PyObject *root;     /* owned: the top-level dict */
    PyObject *dtlist;   /* owned: the list under root["device_traces"] */
    uint64_t max_string;
    unsigned long long max_text, text_used; /* forward_frames' characters, joined */
    /* lists whose content an entry has taken already (a stack's representative list, a
       forward_frames list joined): appending to one later is the Python path's to read,
       where every entry sees the list as it is at the end */
    IdTable taken;
    int proto;
    int dtlist_attached;
    Py_ssize_t columns_made, columns_attached;
    PyObject *marker;   /* memo stand-in for objects only the reader may hold */
    PyObject *known;    /* set: builder.KNOWN_ENTRY_FIELDS */
    PyObject *key_cache[64];
    int key_field[64];
    int nkeys;
    /* entry field by the memo slot its key string is in (PyTorch's keys are memo-shared:
       every entry names them by the same few slots); slot + 1, 0 for none */
    struct {
        size_t slot1;
        int field;
    } field_by_slot[256];
    PyObject *s_device_traces;
    /* short ASCII strings seen recently: one object per content (str identity is
       invisible to the builder, and this keeps millions of "N/A" from costing memory) */
    PyObject *strcache[4096];
} VM;

#define MEMO_IS_STACK(o) (((uintptr_t)(o)) & 1u)
#define MEMO_STACK(g) ((PyObject *)(((uintptr_t)(g) << 1) | 1u))
#define MEMO_STACK_INDEX(o) ((size_t)(((uintptr_t)(o)) >> 1))

static void memo_release(PyObject *o) {
    if (o && !MEMO_IS_STACK(o)) Py_DECREF(o);
}

static int push(VM *vm, Val v) {
    if (vm->sp == vm->stack_cap) {
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
    }
    vm->stack[vm->sp++] = v;
    return 0;
}

static int push_obj(VM *vm, PyObject *o) {
    if (!o) return -1;
    Val v = {V_OBJ, {.o = o}};
    return push(vm, v);
}

static Py_ssize_t fence(VM *vm) { return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0; }

static int is_role(VM *vm, PyObject *o) {
    return o == vm->root || o == vm->dtlist || Py_IS_TYPE(o, &ColumnsType);
}

static void row_free(VM *vm, Py_ssize_t r) {
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

static void discard(VM *vm, Val *v) {
    if (v->tag == V_OBJ)
        Py_XDECREF(v->v.o);
    else if (v->tag == V_ENTRY)
        row_free(vm, v->v.row);
    v->tag = V_INT;
}

/* An entry or a container with a role: never a plain value. */
static int is_entry_val(VM *vm, Val *v) {
    return v->tag == V_ENTRY || (v->tag == V_OBJ && is_role(vm, v->v.o));
}

static Py_ssize_t row_alloc(VM *vm) {
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
static PyObject *val_object(VM *vm, Val *v) {
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
static int field_of(VM *vm, PyObject *key) {
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
static int row_set(VM *vm, Row *row, PyObject *key, Val *value) {
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

/* Write a finished entry to a device's columns, at index ct->n. */
static int finish_row(VM *vm, Columns *ct, Row *row) {
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
            if ((c == C_TIME || c == C_CC || c == C_UM || c == C_FF) && !ct->has_col[c]) continue;
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
    if ((row->set & (1u << F_TIME)) && !ct->has_col[C_TIME]) {
        ct->has_col[C_TIME] = 1;
        ct->room = 0;
        if (buf_reserve(&ct->col[C_TIME], need) < 0) return -1;
        for (Py_ssize_t k = 0; k < i; k++) ((int64_t *)ct->col[C_TIME].data)[k] = -1;
    }
    if (ct->has_col[C_TIME]) {
        int64_t t = -1;
        if (row->set & (1u << F_TIME)) {
            if (row->f[F_TIME].tag != V_INT) return fallback("a time_us that is not an integer");
            t = row->f[F_TIME].v.i;
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
    static const int OPT_F[3] = {F_CC, F_UM, F_FF};
    static const int OPT_C[3] = {C_CC, C_UM, C_FF};
    EqTable *opt_t[3] = {&ct->cc, &ct->um, &ct->ff};
    for (int k = 0; k < 3; k++) {
        int f = OPT_F[k], c = OPT_C[k];
        if (row->set & (1u << f)) {
            Val *v = &row->f[f];
            if (f == F_FF && v->tag == V_OBJ && PyList_CheckExact(v->v.o)) {
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
    /* device_free (only used for oom rows, decided later when action codes are known) */
    if (row->set & (1u << F_DEVFREE)) {
        Val *v = &row->f[F_DEVFREE];
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
        int optional = c == C_TIME || c == C_CC || c == C_UM || c == C_FF;
        if (!optional || ct->has_col[c]) ct->col[c].n = (size_t)ct->n;
    }
    return 0;
}

/* A dict (an entry the role guess missed) appended to device columns. */
static int finish_dict(VM *vm, Columns *ct, PyObject *d) {
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

/* list.append(item) for the containers the reader makes. Takes the item. */
static int append_to(VM *vm, Val *target, Val *item) {
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
static int setitem_to(VM *vm, Val *target, Val *key, Val *value) {
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
    if (rc < 0 && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        return fallback("an unhashable dict key");
    }
    discard(vm, key);
    discard(vm, value);
    return rc;
}

enum { R_NONE, R_ROOT, R_DTLIST, R_DEVLIST, R_ENTRY };

/* The job of a container about to be created, from the stack (see the file comment).
   Pickler output fills a container either in MARK ... APPENDS/SETITEMS batches (then the
   container sits right below the top mark) or, for one item, with a bare APPEND/SETITEM
   (then it is the top item, still empty, or a dict below a pending key). */
static int role_for(VM *vm, int is_dict) {
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
static void memo_store(VM *vm, size_t idx, PyObject *o) {
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
static int memo_room(VM *vm, size_t idx) {
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

static int memo_put(VM *vm, size_t idx, Val *top) {
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

static int memo_get(VM *vm, size_t idx) {
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

static PyObject *make_str(VM *vm, const unsigned char *s, size_t n) {
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

/* Little-endian loads of pickle arguments (whatever the host's byte order). */
static inline uint64_t ld_le(const unsigned char *p, int n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x = 0;
    memcpy(&x, p, (size_t)n);
    return x;
#else
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = (x << 8) | p[i];
    return x;
#endif
}

static inline uint32_t ld32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t rd_le(const unsigned char *p, int n) { return (int64_t)ld_le(p, n); }

/* LONG1/LONG4 payload: two's complement, little endian. */
static int push_long(VM *vm, const unsigned char *p, size_t n) {
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

/* ------------------------------------------------------------------ fast entries */
/* A trace entry as PyTorch writes it, read in one go: EMPTY_DICT, its memo put, MARK,
   key/value pairs, SETITEMS. Keys are memo-shared strings naming typed fields; values are
   small ints, strings, None, memo references, or a frames list of memo-shared frames. The
   entry becomes the same pending Row the machine would have made. Anything else (a key seen for the first time, a new frame dict, an unknown
   field, a value the columns do not type, the end of the data) and nothing has
   happened: the machine reads the entry opcode by opcode instead. The opcode machine is
   the reference; this is a shortcut through it for the common shape, with the same
   outcome (tests/snapshot/test_compiled_equality.py compares both with the Python path). */

/* Only ASCII bytes? (8 at a time: the scan reads every string of the file) */
static int all_ascii(const unsigned char *p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        if (x & 0x8080808080808080ULL) return 0;
    }
    for (; i < n; i++)
        if (p[i] & 0x80) return 0;
    return 1;
}

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
    if (k > vm->tmp_cap) {
        size_t ncap = vm->tmp_cap ? vm->tmp_cap : 256;
        while (ncap < k) ncap *= 2;
        PyObject **nt = realloc(vm->tmp_items, ncap * sizeof(PyObject *));
        if (!nt) {
            PyErr_NoMemory();
            return -1;
        }
        vm->tmp_items = nt;
        vm->tmp_cap = ncap;
    }
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

/* One value at f->p, for field fld, into *out (owned). 1 ok, 0 not for the shortcut, -1 error. */
static inline int fast_value(VM *vm, Fast *f, int fld, Val *out) {
    const unsigned char *p = f->p, *end = f->end;
    if (p >= end) return 0;
    Scan *sc = f->sc;
    /* the scan's charge for the value (a bail undoes it: fast_entry) */
    if (sc && *p != ']') {
        uint64_t arg = 0;
        if (*p == 'M' && end - p >= 3 && rd_le(p + 1, 2) > 256) arg = sc->c[C_INT];
        if (*p == 0x8a && end - p >= 2) arg = p[1];
        if (*p == 0x8c && end - p >= 2 && (size_t)(end - p) >= 2u + p[1])
            arg = (all_ascii(p + 2, p[1]) ? 1 : 4) * (uint64_t)p[1];
        sc->at.cost += arg;
        ch_push(sc, sc->made[*p]);
    }
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
            uint64_t x = n ? ld_le(b, (int)n) : 0;
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
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return -1;
            PyErr_Clear(); /* the machine says it in its words */
            return 0;
        }
        f->p = p + 2 + n;
        Py_INCREF(s);
        int r = fast_put(vm, f, s);
        if (r != 1) Py_DECREF(s);
        if (r < 0) {
            Py_DECREF(s);
            return 0;
        }
        *out = (Val){V_OBJ, {.o = s}};
        return 1;
    }
    case ']': return fld == F_FRAMES ? fast_frames(vm, f, out) : 0;
    default: return 0;
    }
}

/* The shortcut read an entry, up to in->pos, and charged it to the scan (from `before`):
   the scan goes on from there. Past a limit, the scan itself reads the entry again from
   `before`, to stop where it stops alone, at the same byte with the same estimate. */
static void scan_charged(Scan *sc, const ScanAt *before, Input *in) {
    ScanAt *at = &sc->at;
    at->pos = in->pos;
    at->extra = sc->c[C_MEMO_SLOT] * (uint64_t)(at->memo_top + 1) +
                sc->c[C_STACK_SLOT] * (uint64_t)at->peak;
    if (at->cost + at->extra > sc->lim || at->memo_top >= sc->memo_max) {
        *at = *before;
        scan_until(sc, in->pos);
    }
    in->len = in->pos;
}

/* Right after an entry's EMPTY_DICT: 1 the entry was read and pushed as a pending row;
   0 nothing happened (the machine reads it); -1 error. */
static int fast_entry(VM *vm) {
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

/* Pop the items above the top mark into a new tuple/list (reader objects refused). */
static PyObject *pop_mark_items(VM *vm, int as_tuple) {
    if (!vm->nmarks) {
        corrupt("could not find MARK");
        return NULL;
    }
    Py_ssize_t m = vm->marks[--vm->nmarks], n = vm->sp - m;
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

static const char *refused_name(int op) {
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
static int refuse(VM *vm, int op) {
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

#define NEED(n)                                                                                    \
    do {                                                                                           \
        if (in->len - in->pos < (size_t)(n)) {                                                     \
            int _r = input_need(in, (size_t)(n));                                                  \
            if (_r < 0) goto error;                                                                \
            if (_r > 0) goto truncated;                                                            \
        }                                                                                          \
    } while (0)

#define POP_CHECK(n)                                                                               \
    do {                                                                                           \
        if (vm->sp - fence(vm) < (n)) {                                                            \
            corrupt(vm->nmarks ? "unexpected MARK found" : "unpickling stack underflow");          \
            goto error;                                                                            \
        }                                                                                          \
    } while (0)

static PyObject *run(VM *vm) {
    Input *in = &vm->in;
    for (;;) {
        NEED(1);
        int op = in->buf[in->pos++];
        const unsigned char *p;
        switch (op) {
        case 0x80: /* PROTO */
            NEED(1);
            if (in->buf[in->pos] > 5) {
                corrupt("unsupported pickle protocol: %d", in->buf[in->pos]);
                goto error;
            }
            vm->proto = in->buf[in->pos++];
            break;
        case 0x95: { /* FRAME: a length hint; it must fit in what is left (scan() checks) */
            NEED(8);
            uint64_t flen = (uint64_t)rd_le(in->buf + in->pos, 8);
            in->pos += 8;
            if (flen > in->total - in->pos) goto truncated;
            break;
        }
        case '.': { /* STOP */
            POP_CHECK(1);
            Val top = vm->stack[--vm->sp];
            PyObject *result;
            if (top.tag == V_OBJ && top.v.o == vm->root && vm->root) {
                if (vm->columns_attached != vm->columns_made ||
                    (vm->dtlist && !vm->dtlist_attached) || vm->rows_live) {
                    discard(vm, &top);
                    fallback("trace lists or entries outside device_traces");
                    goto error;
                }
                result = top.v.o;
            } else {
                if (vm->columns_made || vm->dtlist || vm->rows_live || is_entry_val(vm, &top)) {
                    discard(vm, &top);
                    fallback("the top-level object is not the snapshot dict");
                    goto error;
                }
                result = val_object(vm, &top);
                discard(vm, &top);
                if (!result) goto error;
            }
            return result;
        }
        case '(': /* MARK */
            if (vm->nmarks == vm->marks_cap) {
                if (vm->marks_cap >= vm->max_marks) {
                    limit_hit("depth", (unsigned long long)vm->nmarks + 1,
                              (unsigned long long)vm->max_marks);
                    goto error;
                }
                Py_ssize_t ncap = vm->marks_cap * 2;
                if (ncap > vm->max_marks) ncap = vm->max_marks;
                Py_ssize_t *nm = realloc(vm->marks, (size_t)ncap * sizeof(Py_ssize_t));
                if (!nm) {
                    PyErr_NoMemory();
                    goto error;
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
        case '1': /* POP_MARK */
            if (!vm->nmarks) {
                corrupt("could not find MARK");
                goto error;
            }
            {
                Py_ssize_t m = vm->marks[--vm->nmarks];
                while (vm->sp > m) discard(vm, &vm->stack[--vm->sp]);
            }
            break;
        case '2': { /* DUP */
            POP_CHECK(1);
            Val v = vm->stack[vm->sp - 1];
            if (is_entry_val(vm, &v)) {
                fallback("DUP of a trace list or entry");
                goto error;
            }
            if (v.tag == V_OBJ) Py_INCREF(v.v.o);
            if (push(vm, v) < 0) goto error;
            break;
        }
        case 'J': /* BININT */
            NEED(4);
            p = in->buf + in->pos;
            in->pos += 4;
            if (push(vm, (Val){V_INT, {.i = (int32_t)(uint32_t)rd_le(p, 4)}}) < 0) goto error;
            break;
        case 'K': /* BININT1 */
            NEED(1);
            if (push(vm, (Val){V_INT, {.i = in->buf[in->pos++]}}) < 0) goto error;
            break;
        case 'M': /* BININT2 */
            NEED(2);
            p = in->buf + in->pos;
            in->pos += 2;
            if (push(vm, (Val){V_INT, {.i = rd_le(p, 2)}}) < 0) goto error;
            break;
        case 0x8a: { /* LONG1 */
            NEED(1);
            size_t n = in->buf[in->pos];
            NEED(1 + n);
            p = in->buf + in->pos + 1;
            in->pos += 1 + n;
            if (push_long(vm, p, n) < 0) goto error;
            break;
        }
        case 0x8b: { /* LONG4 */
            NEED(4);
            int32_t n = (int32_t)(uint32_t)rd_le(in->buf + in->pos, 4);
            if (n < 0) {
                corrupt("LONG pickle has negative byte count");
                goto error;
            }
            NEED(4 + (size_t)n);
            p = in->buf + in->pos + 4;
            in->pos += 4 + (size_t)n;
            if (push_long(vm, p, (size_t)n) < 0) goto error;
            break;
        }
        case 'N':
            Py_INCREF(Py_None);
            if (push_obj(vm, Py_None) < 0) goto error;
            break;
        case 0x88:
            Py_INCREF(Py_True);
            if (push_obj(vm, Py_True) < 0) goto error;
            break;
        case 0x89:
            Py_INCREF(Py_False);
            if (push_obj(vm, Py_False) < 0) goto error;
            break;
        case 'G': { /* BINFLOAT: big-endian IEEE double */
            NEED(8);
            p = in->buf + in->pos;
            in->pos += 8;
            uint64_t bits = 0;
            for (int i = 0; i < 8; i++) bits = (bits << 8) | p[i];
            double d;
            memcpy(&d, &bits, 8);
            if (push_obj(vm, PyFloat_FromDouble(d)) < 0) goto error;
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
                    goto error;
                }
                limit_hit("string", n, vm->max_string);
                goto error;
            }
            NEED((size_t)w + (size_t)n);
            p = in->buf + in->pos + w;
            in->pos += (size_t)w + (size_t)n;
            PyObject *s = make_str(vm, p, (size_t)n);
            if (!s) {
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                    PyErr_Clear();
                    corrupt("a string is not valid UTF-8");
                }
                goto error;
            }
            if (push_obj(vm, s) < 0) goto error;
            break;
        }
        case '}': { /* EMPTY_DICT */
            int role = role_for(vm, 1);
            if (role == R_ENTRY) {
                int fr = fast_entry(vm);
                if (fr < 0) goto error;
                if (fr > 0) break;
                Py_ssize_t r = row_alloc(vm);
                if (r < 0) goto error;
                if (push(vm, (Val){V_ENTRY, {.row = r}}) < 0) goto error;
            } else {
                PyObject *d = PyDict_New();
                if (!d) goto error;
                if (role == R_ROOT) {
                    Py_INCREF(d);
                    vm->root = d;
                }
                if (push_obj(vm, d) < 0) goto error;
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
            if (push_obj(vm, l) < 0) goto error;
            break;
        }
        case ')': /* EMPTY_TUPLE */
            if (push_obj(vm, PyTuple_New(0)) < 0) goto error;
            break;
        case 0x85: /* TUPLE1 */
        case 0x86: /* TUPLE2 */
        case 0x87: /* TUPLE3 */ {
            Py_ssize_t n = op - 0x84;
            POP_CHECK(n);
            PyObject *t = PyTuple_New(n);
            if (!t) goto error;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *o = val_object(vm, &vm->stack[vm->sp - n + i]);
                if (!o) {
                    Py_DECREF(t);
                    goto error;
                }
                PyTuple_SET_ITEM(t, i, o);
            }
            for (Py_ssize_t i = 0; i < n; i++) discard(vm, &vm->stack[--vm->sp]);
            if (push_obj(vm, t) < 0) goto error;
            break;
        }
        case 't': /* TUPLE */
            if (push_obj(vm, pop_mark_items(vm, 1)) < 0) goto error;
            break;
        case 'l': /* LIST */
            if (push_obj(vm, pop_mark_items(vm, 0)) < 0) goto error;
            break;
        case 'd': { /* DICT */
            PyObject *items = pop_mark_items(vm, 1);
            if (!items) goto error;
            Py_ssize_t n = PyTuple_GET_SIZE(items);
            if (n & 1) {
                Py_DECREF(items);
                corrupt("odd number of items for DICT");
                goto error;
            }
            PyObject *d = PyDict_New();
            for (Py_ssize_t i = 0; d && i < n; i += 2)
                if (PyDict_SetItem(d, PyTuple_GET_ITEM(items, i), PyTuple_GET_ITEM(items, i + 1)) <
                    0)
                    Py_CLEAR(d);
            Py_DECREF(items);
            if (!d) {
                if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                    PyErr_Clear();
                    fallback("an unhashable dict key");
                }
                goto error;
            }
            if (push_obj(vm, d) < 0) goto error;
            break;
        }
        case 'a': /* APPEND */
            POP_CHECK(2);
            {
                Val item = vm->stack[--vm->sp];
                if (append_to(vm, &vm->stack[vm->sp - 1], &item) < 0) {
                    discard(vm, &item);
                    goto error;
                }
            }
            break;
        case 'e': /* APPENDS */ {
            if (!vm->nmarks) {
                corrupt("could not find MARK");
                goto error;
            }
            Py_ssize_t m = vm->marks[--vm->nmarks];
            if (m <= fence(vm)) { /* the list is below the mark, above the fence: CPython's */
                corrupt(vm->nmarks ? "unexpected MARK found" : "unpickling stack underflow");
                goto error;
            }
            for (Py_ssize_t i = m; i < vm->sp; i++) {
                if (append_to(vm, &vm->stack[m - 1], &vm->stack[i]) < 0) {
                    while (vm->sp > m) discard(vm, &vm->stack[--vm->sp]);
                    goto error;
                }
            }
            vm->sp = m;
            break;
        }
        case 's': /* SETITEM */
            POP_CHECK(3);
            {
                Val value = vm->stack[--vm->sp];
                Val key = vm->stack[--vm->sp];
                if (setitem_to(vm, &vm->stack[vm->sp - 1], &key, &value) < 0) {
                    discard(vm, &key);
                    discard(vm, &value);
                    goto error;
                }
            }
            break;
        case 'u': /* SETITEMS */ {
            if (!vm->nmarks) {
                corrupt("could not find MARK");
                goto error;
            }
            Py_ssize_t m = vm->marks[--vm->nmarks];
            if (m <= fence(vm) || ((vm->sp - m) & 1)) { /* in CPython's order and words */
                corrupt(m > fence(vm) ? "odd number of items for SETITEMS"
                        : vm->nmarks  ? "unexpected MARK found"
                                      : "unpickling stack underflow");
                while (vm->sp > m && vm->sp > 0) discard(vm, &vm->stack[--vm->sp]);
                goto error;
            }
            for (Py_ssize_t i = m; i < vm->sp; i += 2) {
                if (setitem_to(vm, &vm->stack[m - 1], &vm->stack[i], &vm->stack[i + 1]) < 0) {
                    while (vm->sp > m) discard(vm, &vm->stack[--vm->sp]);
                    goto error;
                }
            }
            vm->sp = m;
            break;
        }
        case 0x94: /* MEMOIZE */
            POP_CHECK(1);
            if (memo_put(vm, vm->memo_count, &vm->stack[vm->sp - 1]) < 0) goto error;
            break;
        case 'q': /* BINPUT */
            NEED(1);
            POP_CHECK(1);
            if (memo_put(vm, in->buf[in->pos++], &vm->stack[vm->sp - 1]) < 0) goto error;
            break;
        case 'r': /* LONG_BINPUT */
            NEED(4);
            POP_CHECK(1);
            p = in->buf + in->pos;
            in->pos += 4;
            if (memo_put(vm, (size_t)(uint32_t)rd_le(p, 4), &vm->stack[vm->sp - 1]) < 0) goto error;
            break;
        case 'h': /* BINGET */
            NEED(1);
            if (memo_get(vm, in->buf[in->pos++]) < 0) goto error;
            break;
        case 'j': /* LONG_BINGET */
            NEED(4);
            p = in->buf + in->pos;
            in->pos += 4;
            if (memo_get(vm, (size_t)(uint32_t)rd_le(p, 4)) < 0) goto error;
            break;
        case 0x97: /* NEXT_BUFFER */
            corrupt("pickle stream refers to out-of-band data but no *buffers* argument was given");
            goto error;
        case 0x98: /* READONLY_BUFFER: a view of the bytes on top (never made here) */
            POP_CHECK(1);
            {
                PyObject *top = val_object(vm, &vm->stack[vm->sp - 1]);
                if (!top) goto error;
                corrupt("TypeError: memoryview: a bytes-like object is required, not '%s'",
                        Py_TYPE(top)->tp_name);
                Py_DECREF(top);
            }
            goto error;
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
        case 0x91: fallback("a pickle opcode of another protocol or type"); goto error;
        case 0x93: /* STACK_GLOBAL: CPython's checks of its operands first, in its words */
            POP_CHECK(2);
            if (vm->stack[vm->sp - 1].tag != V_OBJ || vm->stack[vm->sp - 2].tag != V_OBJ ||
                !PyUnicode_CheckExact(vm->stack[vm->sp - 1].v.o) ||
                !PyUnicode_CheckExact(vm->stack[vm->sp - 2].v.o)) {
                corrupt("STACK_GLOBAL requires str");
                goto error;
            }
            refuse(vm, op);
            goto error;
        default:
            if (refused_name(op)) {
                refuse(vm, op);
                goto error;
            }
            if (op >= 0x20 && op <= 0x7e && op != '\'' && op != '\\') /* as CPython words it */
                corrupt("invalid load key, '%c'", op);
            else
                corrupt("invalid load key, '\\x%02x'", op);
            goto error;
        }
    }
truncated:
    PyErr_SetString(Truncated, "the pickle ends before its STOP opcode");
error:
    return NULL;
}

/* ------------------------------------------------------------------ pre-scan */
/* prescan.py's pass over a whole pickle, in C: the same estimate of what CPython's
   unpickler would allocate, from the same costs (passed in from prescan.py, so there is
   one table), the same refusals and the same truncations, at the same positions
   (tests/hostile/test_prescan.py compares the two). */

static const char *scan_refused(int op) {
    switch (op) {
    case 'c':
    case 'i':
    case 0x93: return NULL; /* find_class refuses them, naming them */
    default: return refused_name(op);
    }
}

PyDoc_STRVAR(scan_doc, "scan(data, memory_limit, memo_limit, costs)\n--\n\n"
                       "(status, refused opcode name, estimated bytes, position): see "
                       "prescan.scan, which this is, in C.");

/* Costs from prescan.COSTS; -1 with an exception when they are not 14 ints. */
static int scan_costs(Scan *sc, PyObject *costs_obj) {
    if (!PyTuple_Check(costs_obj) || PyTuple_GET_SIZE(costs_obj) != NCOSTS) {
        PyErr_SetString(PyExc_ValueError, "costs: a tuple of 14 ints");
        return -1;
    }
    for (int j = 0; j < NCOSTS; j++) {
        sc->c[j] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(costs_obj, j));
        if (PyErr_Occurred()) return -1;
    }
    return 0;
}

/* The class of each opcode (its argument), and its effect on the stack. */
enum {
    CL_END,
    CL_STOP,
    CL_REFUSED,
    CL_LINES2,
    CL_FIXED,
    CL_COUNTED,
    CL_LINE,
    CL_MEMOIZE,
    CL_PLAIN
};
enum { EF_NONE, EF_PUSH, EF_MARK, EF_FROM_MARK, EF_POP };

/* The scan's tables, from its costs (sc->c), and its start. No Python API in the scan. */
static void scan_init(Scan *sc, const unsigned char *d, size_t n) {
    const uint64_t *c = sc->c;
    sc->d = d;
    sc->n = n;
    sc->lim = sc->limit ? sc->limit : (1ULL << 62);
    sc->memo_max =
        sc->memo_limit && sc->memo_limit < (1ULL << 62) ? (int64_t)sc->memo_limit : (1LL << 62);
    sc->at = (ScanAt){0};
    sc->at.memo_top = -1;
    sc->marks = NULL;
    sc->marks_cap = 0;
    sc->memo_named = 0;
    sc->done = 0;
    sc->status = "ok";
    sc->opname = "";
    unsigned char *cls = sc->cls, *wid = sc->wid, *eff = sc->eff, *txt = sc->txt;
    unsigned char *popk = sc->popk, *left = sc->left;
    uint64_t *made = sc->made, *per_item = sc->per_item;
    memset(cls, 0, 256), memset(wid, 0, 256), memset(eff, 0, 256), memset(txt, 0, 256);
    memset(popk, 0, 256), memset(left, 0, 256);
    memset(made, 0, 256 * sizeof *made), memset(per_item, 0, 256 * sizeof *per_item);
    /* every opcode the unpickler knows but the out-of-band buffers: anything else ends the
       scan where the unpickler must stop, and leaves it the words */
    const unsigned char known_ops[] = "().012BCFGIJKLMNPQRSTUVX]abcdeghijlopqrstu}";
    for (const unsigned char *z = known_ops; *z; z++) cls[*z] = CL_PLAIN;
    for (int j = 0x80; j < 0x97; j++) cls[j] = CL_PLAIN;
    cls['.'] = CL_STOP;
    cls[0x93] = CL_END; /* STACK_GLOBAL: find_class refuses it, naming it */
    cls['c'] = cls['i'] = CL_LINES2;
    const struct {
        const char *ops;
        unsigned char width;
    } fixed[] = {{"\x80Khq\x82", 1}, {"M\x83", 2}, {"Jjr\x84", 4}, {"G\x95", 8}},
      counted[] = {{"\x8c"
                    "CU\x8a",
                    1},
                   {"XBT\x8b", 4},
                   {"\x8d\x8e\x96", 8}};
    for (size_t g = 0; g < 4; g++)
        for (const unsigned char *z = (const unsigned char *)fixed[g].ops; *z; z++)
            cls[*z] = CL_FIXED, wid[*z] = fixed[g].width;
    for (size_t g = 0; g < 3; g++)
        for (const unsigned char *z = (const unsigned char *)counted[g].ops; *z; z++)
            cls[*z] = CL_COUNTED, wid[*z] = counted[g].width;
    txt[0x8c] = txt['X'] = txt[0x8d] = 1;
    for (const unsigned char *z = (const unsigned char *)"ILFSVgp"; *z; z++) cls[*z] = CL_LINE;
    cls[0x94] = CL_MEMOIZE;
    for (int j = 0; j < 256; j++) /* last: EXT1/2/4 have an argument, and are refused */
        if (scan_refused(j)) cls[j] = CL_REFUSED;
    /* effects: pushes (with what the value costs), MARK, from the innermost mark, pops */
    const struct {
        const char *ops;
        int cost;
    } pushes[] = {{"NKMhjg2)\x88\x89", -1}, {"}", C_DICT},          {"]", C_LIST},
                  {"\x8f", C_SET},          {"JIL\x8a\x8b", C_INT}, {"GF", C_FLOAT},
                  {"\x8cX\x8dVUTS", C_STR}, {"CB\x8e\x96", C_BYTES}};
    for (size_t g = 0; g < sizeof pushes / sizeof pushes[0]; g++)
        for (const unsigned char *z = (const unsigned char *)pushes[g].ops; *z; z++)
            eff[*z] = EF_PUSH, made[*z] = pushes[g].cost < 0 ? 0 : c[pushes[g].cost];
    eff['('] = EF_MARK;
    const struct {
        unsigned char op;
        int made, per, left;
        int half;
    } from_mark[] = {{'l', C_LIST, C_LIST_ITEM, 1, 0}, {'t', C_TUPLE, C_TUPLE_ITEM, 1, 0},
                     {'d', C_DICT, C_DICT_ITEM, 1, 1}, {0x91, C_SET, C_SET_ITEM, 1, 0},
                     {'e', -1, C_LIST_ITEM, 0, 0},     {'u', -1, C_DICT_ITEM, 0, 1},
                     {0x90, -1, C_SET_ITEM, 0, 0},     {'1', -1, -1, 0, 0}};
    for (size_t g = 0; g < sizeof from_mark / sizeof from_mark[0]; g++) {
        const unsigned char op = from_mark[g].op;
        eff[op] = EF_FROM_MARK;
        made[op] = from_mark[g].made < 0 ? 0 : c[from_mark[g].made];
        per_item[op] = from_mark[g].per < 0 ? 0 : c[from_mark[g].per] >> from_mark[g].half;
        left[op] = (unsigned char)from_mark[g].left;
    }
    const struct {
        unsigned char op, k, left;
        uint64_t add;
    } pops[] = {{'a', 2, 1, c[C_LIST_ITEM]},
                {'s', 3, 1, c[C_DICT_ITEM]},
                {'0', 1, 0, 0},
                {0x85, 1, 1, c[C_TUPLE] + c[C_TUPLE_ITEM]},
                {0x86, 2, 1, c[C_TUPLE] + 2 * c[C_TUPLE_ITEM]},
                {0x87, 3, 1, c[C_TUPLE] + 3 * c[C_TUPLE_ITEM]}};
    for (size_t g = 0; g < sizeof pops / sizeof pops[0]; g++) {
        const unsigned char op = pops[g].op;
        eff[op] = EF_POP, popk[op] = pops[g].k, left[op] = pops[g].left, made[op] = pops[g].add;
    }
}

/* Free what the scan holds (its MARK stack). */
static void scan_free(Scan *sc) {
    free(sc->marks);
    sc->marks = NULL;
    sc->marks_cap = 0;
}

/* Go on with the scan until it has passed byte `target` (it stops after an opcode) or has
   ended (sc->done). Its state lives in locals while it runs. */
static void scan_until(Scan *sc, size_t target) {
    const uint64_t *c = sc->c;
    const unsigned char *cls = sc->cls, *wid = sc->wid, *eff = sc->eff, *txt = sc->txt;
    const unsigned char *popk = sc->popk, *left = sc->left;
    const uint64_t *made = sc->made, *per_item = sc->per_item;
    const unsigned char *d = sc->d;
    const size_t n = sc->n;
    size_t pos = sc->at.pos, height = sc->at.height, peak = sc->at.peak;
    size_t nmarks = sc->at.nmarks, marks_cap = sc->marks_cap;
    size_t *marks = sc->marks;
    uint64_t cost = sc->at.cost, memo_len = sc->at.memo_len, extra = sc->at.extra;
    int64_t memo_top = sc->at.memo_top;
    const uint64_t lim = sc->lim;
    const int64_t memo_max = sc->memo_max;
    uint64_t memo_named = 0;
    const char *status = "ok", *opname = "";
    size_t frame_end = sc->at.frame_end;
#define TOTAL() (cost + extra)
#define EXTRA() (c[C_MEMO_SLOT] * (uint64_t)(memo_top + 1) + c[C_STACK_SLOT] * (uint64_t)peak)
#define SCAN_END(st)                                                                               \
    do {                                                                                           \
        status = (st);                                                                             \
        goto out;                                                                                  \
    } while (0)
#define MEMO_SET(idx, at)                                                                          \
    do {                                                                                           \
        if ((idx) > memo_top) {                                                                    \
            memo_top = (idx);                                                                      \
            extra = EXTRA();                                                                       \
        }                                                                                          \
        memo_len++;                                                                                \
        if (memo_top >= memo_max) {                                                                \
            memo_named = (uint64_t)memo_top + 1;                                                   \
            pos = (at);                                                                            \
            SCAN_END("memo");                                                                      \
        }                                                                                          \
    } while (0)
#define PUSH(made_)                                                                                \
    do {                                                                                           \
        cost += (made_);                                                                           \
        if (++height > peak) {                                                                     \
            peak = height;                                                                         \
            extra = EXTRA();                                                                       \
        }                                                                                          \
    } while (0)
#define MARK()                                                                                     \
    do {                                                                                           \
        if (nmarks == marks_cap) {                                                                 \
            size_t ncap = marks_cap ? marks_cap * 2 : 64;                                          \
            size_t *nm = realloc(marks, ncap * sizeof *nm);                                        \
            if (!nm) SCAN_END("nomem");                                                            \
            marks = nm;                                                                            \
            marks_cap = ncap;                                                                      \
        }                                                                                          \
        marks[nmarks++] = height;                                                                  \
        cost += c[C_STACK_SLOT];                                                                   \
    } while (0)
#define FROM_MARK(op_)                                                                             \
    do {                                                                                           \
        const size_t base = nmarks ? marks[--nmarks] : 0;                                          \
        cost += made[op_] + per_item[op_] * (height > base ? height - base : 0);                   \
        height = base + left[op_];                                                                 \
        if (height > peak) {                                                                       \
            peak = height;                                                                         \
            extra = EXTRA();                                                                       \
        }                                                                                          \
    } while (0)
    if (target > n) target = n;
    while (pos < target) {
        /* The opcodes snapshots are made of (gets, memoize, small ints, marks, dicts and
           lists), in one dispatch each, while the longest fixed argument (4 bytes) cannot
           cross the end of the frame or of the data: no bounds or frame checks per opcode.
           They charge what the general step below charges; anything else, a counted
           argument that reaches the edge, and the last bytes before it take that step. */
        const size_t edge = frame_end > pos ? frame_end : n;
        while (pos + 5 <= edge && pos < target) {
            const int op = d[pos];
            switch (op) {
            case 'h': /* BINGET, BININT1 */
            case 'K':
                pos += 2;
                PUSH(0);
                break;
            case 'j': /* LONG_BINGET */
                pos += 5;
                PUSH(0);
                break;
            case 'J':
                pos += 5;
                PUSH(c[C_INT]);
                break;
            case 'M': /* BININT2: past CPython's cached small ints */
                if ((d[pos + 1] | (d[pos + 2] << 8)) > 256) cost += c[C_INT];
                pos += 3;
                PUSH(0);
                break;
            case 0x8a: /* LONG1, SHORT_BINUNICODE */
            case 0x8c: {
                const size_t raw = d[pos + 1];
                if (raw > edge - pos - 2) goto general;
                cost += (op == 0x8c && !all_ascii(d + pos + 2, raw) ? 4 : 1) * (uint64_t)raw;
                pos += 2 + raw;
                PUSH(made[op]);
                break;
            }
            case 'X': { /* BINUNICODE */
                const size_t raw = ld32(d + pos + 1);
                if (raw > edge - pos - 5) goto general;
                cost += (all_ascii(d + pos + 5, raw) ? 1 : 4) * (uint64_t)raw;
                pos += 5 + raw;
                PUSH(made[op]);
                break;
            }
            case 'q': /* BINPUT, LONG_BINPUT */
                pos += 2;
                MEMO_SET((int64_t)d[pos - 1], pos - 2);
                break;
            case 'r':
                pos += 5;
                MEMO_SET((int64_t)ld32(d + pos - 4), pos - 5);
                break;
            case 0x94: /* MEMOIZE */
                pos += 1;
                MEMO_SET((int64_t)memo_len, pos - 1);
                break;
            case '(':
                pos += 1;
                MARK();
                break;
            case 'u': /* SETITEMS, APPENDS */
            case 'e':
                pos += 1;
                FROM_MARK(op);
                break;
            case 's': /* SETITEM, APPEND */
            case 'a':
                pos += 1;
                cost += made[op];
                height = (height > popk[op] ? height - popk[op] : 0) + left[op];
                break;
            case '}': /* EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, NONE, NEWTRUE, NEWFALSE */
            case ']':
            case ')':
            case 'N':
            case 0x88:
            case 0x89:
                pos += 1;
                PUSH(made[op]);
                break;
            default: goto general;
            }
            if (TOTAL() > lim) SCAN_END("memory");
        }
    general:
        if (pos >= target) break;
        const size_t start = pos;
        size_t new_frame = 0;
        const int op = d[pos++];
        switch (cls[op]) {
        case CL_PLAIN: break;
        case CL_FIXED: {
            const size_t width = wid[op];
            if (pos + width > n) SCAN_END("truncated");
            if (op == 0x95) { /* FRAME: it must fit, and may not start inside another */
                const uint64_t length = ld_le(d + pos, 8);
                if (length > n - pos - 8) {
                    pos += width;
                    SCAN_END("truncated");
                }
                if (start < frame_end) {
                    pos = start;
                    SCAN_END("frame");
                }
                new_frame = pos + 8 + (size_t)length;
            } else if (op == 'q' || op == 'r') {
                const int64_t idx = op == 'q' ? d[pos] : (int64_t)ld32(d + pos);
                MEMO_SET(idx, pos - 1);
            } else if (op == 'M' && (d[pos] | (d[pos + 1] << 8)) > 256) {
                cost += c[C_INT]; /* past CPython's cached small ints */
            }
            pos += width;
            break;
        }
        case CL_COUNTED: {
            const int lw = wid[op];
            if (pos + (size_t)lw > n) SCAN_END("truncated");
            const uint64_t raw = ld_le(d + pos, lw);
            pos += (size_t)lw;
            if ((op == 'T' || op == 0x8b) && (raw & 0x80000000u)) SCAN_END("truncated");
            if (raw > n - pos) SCAN_END("truncated");
            cost += (txt[op] && !all_ascii(d + pos, (size_t)raw) ? 4 : 1) * raw;
            pos += (size_t)raw;
            break;
        }
        case CL_LINE: {
            const unsigned char *nl = memchr(d + pos, '\n', n - pos);
            if (!nl) SCAN_END("truncated");
            const size_t len = (size_t)(nl - (d + pos));
            if (op == 'p') { /* PUT: plain digits only (int() would take " 1_0") */
                if (len == 0 || len > 18) SCAN_END("bad-put");
                int64_t idx = 0;
                for (size_t k = 0; k < len; k++) {
                    if (d[pos + k] < '0' || d[pos + k] > '9') SCAN_END("bad-put");
                    idx = idx * 10 + (d[pos + k] - '0');
                }
                MEMO_SET(idx, pos - 1);
            }
            cost += 4 * (uint64_t)len;
            pos += len + 1;
            break;
        }
        case CL_MEMOIZE: MEMO_SET((int64_t)memo_len, pos - 1); break;
        case CL_REFUSED:
            opname = scan_refused(op);
            pos--;
            SCAN_END("refused");
        case CL_LINES2: { /* GLOBAL, INST: their two lines may not cross a frame */
            const unsigned char *nl1 = memchr(d + pos, '\n', n - pos);
            const unsigned char *nl2 =
                nl1 ? memchr(nl1 + 1, '\n', n - (size_t)(nl1 + 1 - d)) : NULL;
            const unsigned char *last = nl2 ? nl2 : nl1;
            if (last && start < frame_end && frame_end <= (size_t)(last - d)) {
                pos = start;
                SCAN_END("frame");
            }
            goto out; /* find_class refuses them, naming them */
        }
        default: goto out; /* STOP, STACK_GLOBAL, or a byte the unpickler stops at */
        }
        if (frame_end) {
            if (start < frame_end && frame_end < pos) { /* the unpickler reads a frame whole */
                pos = start;
                SCAN_END("frame");
            }
            if (pos >= frame_end) frame_end = new_frame;
        } else {
            frame_end = new_frame;
        }
        switch (eff[op]) {
        case EF_PUSH: PUSH(made[op]); break;
        case EF_MARK: MARK(); break;
        case EF_FROM_MARK: FROM_MARK(op); break;
        case EF_POP:
            cost += made[op];
            height = (height > popk[op] ? height - popk[op] : 0) + left[op];
            break;
        default: break;
        }
        if (TOTAL() > lim) SCAN_END("memory");
    }
    sc->at = (ScanAt){pos, height, peak, nmarks, frame_end, cost, memo_len, extra, memo_top};
    sc->marks = marks;
    sc->marks_cap = marks_cap;
    if (pos < n) return; /* not at the end yet */
out:
    sc->at = (ScanAt){pos, height, peak, nmarks, frame_end, cost, memo_len, extra, memo_top};
    sc->marks = marks;
    sc->marks_cap = marks_cap;
    sc->memo_named = memo_named;
    sc->status = status;
    sc->opname = opname;
    sc->value = (unsigned long long)(memo_named ? memo_named : TOTAL());
    sc->pos = pos;
    sc->done = 1;
#undef MEMO_SET
#undef PUSH
#undef MARK
#undef FROM_MARK
#undef EXTRA
#undef TOTAL
#undef SCAN_END
}

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
             "     memory_limit, memo_limit, costs)\n"
             "--\n\n"
             "The top-level object of the pickle in `data` (bytes-like, checked by scan()),\n"
             "with every device trace list as a Columns.\n"
             "Raises ScanStop (args: the scan's result, as scan() returns it) when the scan\n"
             "refuses the file, whatever the reader met; else Fallback, Corrupt, Truncated,\n"
             "Refused or LimitHit.");

static PyObject *fr_read(PyObject *Py_UNUSED(mod), PyObject *args) {
    Py_buffer view;
    PyObject *known;
    unsigned long long max_memo, max_stack, max_depth, max_string, max_text;
    Scan sc = {0};
    PyObject *costs_obj;
    if (!PyArg_ParseTuple(args, "y*O!KKKKKKKO", &view, &PySet_Type, &known, &max_memo, &max_stack,
                          &max_depth, &max_string, &max_text, &sc.limit, &sc.memo_limit,
                          &costs_obj))
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

static struct PyModuleDef fr_module = {
    PyModuleDef_HEAD_INIT,
    "_fastreader",
    "Streaming reader of PyTorch memory-snapshot pickles into columns (see compiled.py).",
    -1,
    fr_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__fastreader(void) {
    if (PyType_Ready(&ChunkType) < 0 || PyType_Ready(&ColumnsType) < 0) return NULL;
    PyObject *os = PyImport_ImportModule("os");
    PyObject *rnd = os ? PyObject_CallMethod(os, "urandom", "i", 16) : NULL;
    Py_XDECREF(os);
    if (!rnd) return NULL;
    if (PyBytes_Check(rnd) && PyBytes_GET_SIZE(rnd) == 16)
        memcpy(hash_seed, PyBytes_AS_STRING(rnd), 16);
    Py_DECREF(rnd);
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
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0) {
        Py_DECREF(&ColumnsType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
