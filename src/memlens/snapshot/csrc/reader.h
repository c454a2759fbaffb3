/*
 * The compiled reader's private header: the types every unit of it shares, and the
 * functions one unit calls in another. The units, one job each (the section banners of the
 * one file it was):
 *
 *   reader_module.c   the Python module: read(), scan(), exceptions, import
 *   reader_scan.c     the pre-scan (prescan.py's pass, in C), run in step with the reader
 *   reader_run.c      the opcode loop: one dispatch, the opcodes' families in reader_ops.c
 *   reader_ops.c      the opcodes, by family (stack, scalars, containers, memo and the rest)
 *   reader_fast.c     the trace-entry shortcut (reads a PyTorch entry in one go)
 *   reader_machine.c  the machine's stack, memo, values and roles
 *   reader_rows.c     a finished entry written into its device's columns
 *   reader_columns.c  the device columns (Columns, handed to numpy as OwnedBuffers)
 *   reader_intern.c   interning: by equality, by identity, stacks and frames-list bodies
 *
 * contract.h (generated from the Python) has the typed entry fields; owned_buffer.h the
 * buffer type shared with the replay.
 */
/*
 * memlens.snapshot._fastreader: a reader for PyTorch memory-snapshot pickles.
 *
 * It runs the pickle opcodes (protocols 2-5) of a whole pickle in memory (a buffer it is
 * given: reader.open_data maps the file or inflates a gzip stream; the pre-scan runs in the
 * same pass, one opcode ahead: reader_scan.c) itself and writes
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
#ifndef MEMLENS_READER_H
#define MEMLENS_READER_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "contract.h"

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
    C_WIDE_STR,
    C_WIDE_BYTE,
    C_LONG_BYTE,
    C_LINE_BYTE,
    C_READ_BYTE,
    C_BASE,
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
    /* a mapped file: its pages the reader has passed are given back as it goes (from
       `released` on, every RELEASE_STEP bytes); 0: not a mapping, nothing given back */
    size_t release_step, released;
} Input;

/* ------------------------------------------------------------------ growable buffers */
typedef struct {
    char *data;
    size_t n, cap, item;
} Buf;

/* ------------------------------------------------------------------ interning */
/* Intern by equality (dict semantics, as entries.coded does in Python): the distinct
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

/* Objects by identity -> an index the caller chose (frames values the fast path did not
   see being built). Holding a reference keeps an address from being reused by another
   object while it is a key. */
typedef struct {
    PyObject **keys;
    int32_t *vals;
    size_t mask, used;
    PyObject *list; /* the keys, kept alive */
} IdTable;

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

/* Entry fields the reader types; everything else entries.KNOWN_ENTRY_FIELDS names is
   skipped, and any other key is reported as unknown. */
/* (F_ACTION ... NF: contract.h) */
enum { F_KNOWN_SKIPPED = 100, F_UNKNOWN, F_LEGACY };

typedef struct {
    Val f[NF];
    unsigned set;
    int in_use;
    PyObject *unknown; /* list of unknown keys, or NULL */
    PyObject *skipped; /* list of known keys the columns do not keep, or NULL */
    long long frames_items; /* items of a frames list the fast path read for this entry */
} Row;

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
    C_POOL,
    C_DF_ROW,
    C_DF_VAL,
    NCOL
};

typedef struct {
    PyObject_HEAD Py_ssize_t n;
    size_t room; /* rows every per-entry column has room for (0: look again) */
    Buf col[NCOL];
    int has_col[NCOL]; /* optional columns exist once their key was seen */
    EqTable actions, streams, cc, um, ff;
    EqTable pools; /* distinct pool_id values (pairs of ints, or None), first use order */
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
    PyObject *known;    /* set: entries.KNOWN_ENTRY_FIELDS */
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

enum { R_NONE, R_ROOT, R_DTLIST, R_DEVLIST, R_ENTRY };

/* ------------------------------------------------------------------ shared objects */
extern PyObject *Truncated; /* the pickle ends before STOP */
extern PyObject *Refused;   /* args (opcode name, protocol, module or None, name or None) */
extern PyObject *ScanStop;  /* the scan refused the file: args (the scan's result) */
extern uint64_t hash_seed[2];
extern PyTypeObject ColumnsType;
extern const char *FIELD_NAMES[NF];
int columns_ready(void);

/* ------------------------------------------------------------------ opcodes */
/* What an opcode's handler answers (reader_ops.c, dispatched by run()). */
enum { OP_OK = 0, OP_ERROR = -1, OP_TRUNCATED = -2 };
typedef int (*OpHandler)(VM *vm, int op);
int op_stack(VM *vm, int op);
int op_scalar(VM *vm, int op);
int op_container(VM *vm, int op);
int op_other(VM *vm, int op);
extern const OpHandler OP_HANDLERS[256];

/* ------------------------------------------------------------------ across units */
int fallback(const char *why);
int corrupt(const char *fmt, ...);
int limit_hit(const char *name, unsigned long long value, unsigned long long limit);
/* Whether the pending exception is a `type`, cleared if so: the reader then says the failure
   in its own words (corrupt, fallback); any other (MemoryError...) is passed on as it is. */
static inline int take_error(PyObject *type) {
    if (!PyErr_ExceptionMatches(type)) return 0;
    PyErr_Clear();
    return 1;
}
int input_need(Input *in, size_t need);
void input_release(Input *in);
/* How far behind the reader the pages of a mapped file stay mapped. */
#define RELEASE_KEEP ((size_t)1 << 20)
/* Called as the reader goes (input_need, an entry read by the shortcut): every
   release_step bytes, the pages of a mapped file it has passed go back (input_release). */
static inline void input_passed(Input *in) {
    if (in->release_step && in->pos >= in->released + in->release_step + RELEASE_KEEP)
        input_release(in);
}
int scan_costs(Scan *sc, PyObject *costs_obj);
void scan_init(Scan *sc, const unsigned char *d, size_t n);
void scan_free(Scan *sc);
void scan_until(Scan *sc, size_t target);
int eq_init(EqTable *t);
void eq_clear(EqTable *t);
Py_ssize_t eq_index(EqTable *t, PyObject *v);
int id_init(IdTable *t);
void id_clear(IdTable *t);
Py_ssize_t id_get(IdTable *t, PyObject *v);
int id_put(IdTable *t, PyObject *v, int32_t idx);
void stackset_clear(StackSet *t);
Py_ssize_t stackset_index(StackSet *t, PyObject *const *items, size_t k, int *added);
uint64_t bytes_hash(const unsigned char *p, size_t n);
void spanset_clear(SpanSet *t);
Py_ssize_t spanset_find(SpanSet *t, const unsigned char *p, size_t n, uint64_t h,
                        unsigned long long generation);
void spanset_add(SpanSet *t, const unsigned char *p, size_t n, uint64_t h, int32_t stack,
                 int32_t n_items);
int buf_reserve(Buf *b, size_t n);
Columns *columns_new(void);
int push_grow(VM *vm, Val v);
int push_obj(VM *vm, PyObject *o);
void row_free(VM *vm, Py_ssize_t r);
void discard(VM *vm, Val *v);
int is_entry_val(VM *vm, Val *v);
Py_ssize_t row_alloc(VM *vm);
PyObject *val_object(VM *vm, Val *v);
int field_of(VM *vm, PyObject *key);
int row_set(VM *vm, Row *row, PyObject *key, Val *value);
int append_to(VM *vm, Val *target, Val *item);
int setitem_to(VM *vm, Val *target, Val *key, Val *value);
int role_for(VM *vm, int is_dict);
void memo_store(VM *vm, size_t idx, PyObject *o);
int memo_room(VM *vm, size_t idx);
int memo_put(VM *vm, size_t idx, Val *top);
int memo_get(VM *vm, size_t idx);
PyObject *make_str(VM *vm, const unsigned char *s, size_t n);
int push_long(VM *vm, const unsigned char *p, size_t n);
int finish_row(VM *vm, Columns *ct, Row *row);
int finish_dict(VM *vm, Columns *ct, PyObject *d);
int fast_entry(VM *vm);
const char *refused_name(int op);
int refuse(VM *vm, int op);
PyObject *run(VM *vm);

/* ------------------------------------------------------------------ small helpers */

/* Called for every value of every entry (millions of times a file), across units: kept
   inline here, as they were in the one-file reader (out of line they cost ~8 ms at x50). */
static inline void val_release(Val *v) {
    if (v->tag == V_OBJ) Py_XDECREF(v->v.o);
    v->tag = V_INT;
    v->v.i = 0;
}

static inline void memo_release(PyObject *o) {
    if (o && !MEMO_IS_STACK(o)) Py_DECREF(o);
}

static inline int is_role(VM *vm, PyObject *o) {
    return o == vm->root || o == vm->dtlist || Py_IS_TYPE(o, &ColumnsType);
}

/* Push v (owned); the stack grows, or meets its limit, out of line (push_grow). */
static inline int push(VM *vm, Val v) {
    if (vm->sp == vm->stack_cap) return push_grow(vm, v);
    vm->stack[vm->sp++] = v;
    return 0;
}

static inline Py_ssize_t fence(VM *vm) { return vm->nmarks ? vm->marks[vm->nmarks - 1] : 0; }

/* Room for `need` pointers in *items, of capacity *cap (doubled, from `first`, until it
   holds them): 0, or -1 with MemoryError set and *items as it was. */
static inline int grow_objects(PyObject ***items, size_t *cap, size_t need, size_t first) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap * 2 : first;
    while (ncap < need) ncap *= 2;
    PyObject **grown = realloc(*items, ncap * sizeof(PyObject *));
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    *items = grown;
    *cap = ncap;
    return 0;
}

/* Little-endian loads of pickle arguments (whatever the host's byte order). A byte loop,
   not a memcpy of n bytes into a uint64_t: that one is stored byte by byte and read back
   whole, a store-forwarding stall on every LONG1 (a sixth of the entry shortcut's time). */
static inline uint64_t ld_le(const unsigned char *p, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = (x << 8) | p[i];
    return x;
}

/* ld_le(p, n) for n <= 8 where 8 bytes can be read at p: one load, masked. */
static inline uint64_t ld_le_in8(const unsigned char *p, int n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t x;
    memcpy(&x, p, 8);
    return n >= 8 ? x : x & ((1ULL << (8 * n)) - 1);
#else
    return ld_le(p, n);
#endif
}

static inline uint32_t ld32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline int64_t rd_le(const unsigned char *p, int n) { return (int64_t)ld_le(p, n); }

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
static inline int all_ascii(const unsigned char *p, size_t n) {
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

/* What a counted argument's `raw` bytes at p cost beyond its value's own header (its copy
   out of the stream, and its characters or digits): prescan.arg_cost. */
static inline uint64_t scan_arg_cost(const Scan *sc, int op, const unsigned char *p, uint64_t raw) {
    const uint64_t *c = sc->c;
    if (sc->txt[op] && !all_ascii(p, (size_t)raw))
        return c[C_READ_BYTE] * raw + c[C_WIDE_STR] + c[C_WIDE_BYTE] * raw;
    return (c[C_READ_BYTE] + (op == 0x8a || op == 0x8b ? c[C_LONG_BYTE] : 1)) * raw;
}

#endif
