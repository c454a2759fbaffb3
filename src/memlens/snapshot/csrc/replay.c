/* The replay of one device's trace (snapshot/replay/device.py) in one pass over the events.

   replay_device's numpy path computes the pairing of allocs and frees with a stable sort by
   address and then gathers row columns, builds the ghost rows, the active curve (scattered
   adds + cumsum) and the reserved curve (cumsum) with one array pass each. Here a hash map
   from address to its last alloc/free replaces the sort, and the same pass over the events
   writes the per-event row and version, the row columns and both curves straight into
   their final arrays (sized from a first pass that only counts actions), so the only
   other pass is the one adding the offsets that are known at the end: how many ghost and
   pre-existing rows come first, and the bytes they held from the start.

   The semantics are replay.py's (its docstring has them); tests/snapshot/test_fastreplay.py
   checks that both give the same columns to the byte. All arithmetic on sizes is unsigned
   (wraps like numpy's int64 sums, and no input can make it undefined): the loader's size
   checks keep real totals far from wrapping. No numpy C API: outputs are buffer objects
   that numpy views without a copy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* alloc_flags bits (PREEXISTING ...): generated from snapshot/model.py */
#include "contract.h"
#define OWNED_BUFFER_NAME "memlens.snapshot._fastreplay.Buffer"
#include "owned_buffer.h"
#include "urandom.h"

/* ------------------------------------------------------------------ memory handed to numpy */
/* Output memory, with the `used` bytes from `used_from` on (the part the pass writes)
   prefaulted in one call where the kernel can (MADV_POPULATE_WRITE, Linux 5.14+): a fault
   per 4 KiB page costs more over a few hundred MB than the pass that fills them. No
   transparent huge pages (numpy asks for them on its large arrays): measured in a cold
   process on the 2-core VM of docs/benchmarks.md, the first touch of huge pages cost four
   times the small pages' faults. */
static void *out_alloc(size_t bytes, size_t used_from, size_t used) {
    char *p = malloc(bytes ? bytes : 1);
#ifdef MADV_POPULATE_WRITE
    if (p && used >= ((size_t)1 << 20)) {
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t start = ((uintptr_t)p + used_from + page - 1) & ~(page - 1);
        uintptr_t end = ((uintptr_t)p + used_from + used) & ~(page - 1);
        if (end > start) (void)madvise((void *)start, end - start, MADV_POPULATE_WRITE);
    }
#else
    (void)used_from;
    (void)used;
#endif
    return p;
}

/* ------------------------------------------------------------------ address map */
/* Per address: the alloc row open there (or last opened), frees seen so far (the next
   allocation's version), what the last alloc/free was, whether an overwritten (never
   freed) row lives there, and the free_requested events waiting for an anchor. */
enum { USED = 1, LAST_ALLOC = 2, LAST_FREE = 4, HAS_OVERWRITTEN = 8 };

typedef struct {
    uint64_t addr;
    int32_t row; /* alloc ordinal of the last alloc here */
    int32_t frees;
    int32_t pend_head, pend_tail; /* waiting free_requested events, -1 none */
    uint8_t state;
} Slot; /* 32 bytes: two a cache line */

typedef struct {
    Slot *slots;
    size_t mask, used;
    uint64_t seed;      /* keys the hash: addresses come from an untrusted file */
    size_t longest;     /* longest probe run seen (reported, and tested) */
    int reseeds;
} AddrMap;

/* Set once per process from os.urandom at import. A fixed hash lets a crafted file choose
   addresses that all land in one slot run, making the replay quadratic (200k allocations:
   38 s instead of 0.1 s); a keyed one leaves nothing to aim at. */
/* `p` (an array of `*cap` items of `item` bytes) reallocated to twice as many (1024 at
   first), `*cap` updated; NULL when out of memory (`p` is then still the caller's). */
static void *grown(void *p, size_t *cap, size_t item) {
    const size_t ncap = *cap ? *cap * 2 : 1024;
    void *n = realloc(p, ncap * item);
    if (n) *cap = ncap;
    return n;
}

static uint64_t process_seed = 0x9e3779b97f4a7c15ULL;

static size_t addr_hash(uint64_t a, uint64_t seed) { /* splitmix64's finalizer, keyed */
    uint64_t h = a ^ seed;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    return (size_t)h;
}

/* A probe run this long at a load under one half is all but impossible by chance (about
   2^-40 per insert); seeing one means the seed was guessed or is unlucky: take a new one. */
enum { MAX_PROBE = 64, MAX_RESEEDS = 8 };

static int map_rebuild(AddrMap *m, size_t nmask) {
    Slot *ns = calloc(nmask + 1, sizeof(Slot));
    if (!ns) return -1;
    for (size_t j = 0; j <= m->mask; j++) {
        if (!m->slots[j].state) continue;
        size_t k = addr_hash(m->slots[j].addr, m->seed) & nmask;
        while (ns[k].state) k = (k + 1) & nmask;
        ns[k] = m->slots[j];
    }
    free(m->slots);
    m->slots = ns;
    m->mask = nmask;
    return 0;
}

/* The slot of `a`, made if new; NULL when out of memory. */
static Slot *map_slot(AddrMap *m, uint64_t a) {
    size_t i = addr_hash(a, m->seed) & m->mask, probes = 0;
    while (m->slots[i].state && m->slots[i].addr != a) {
        i = (i + 1) & m->mask;
        probes++;
    }
    if (probes > m->longest) m->longest = probes;
    if (m->slots[i].state) return &m->slots[i];
    const int crowded = probes > MAX_PROBE && m->reseeds < MAX_RESEEDS;
    if ((m->used + 1) * 2 > m->mask || crowded) { /* keep the load under one half */
        if (crowded) {
            m->reseeds++;
            m->seed = addr_hash(m->seed + (uint64_t)m->reseeds, process_seed);
        }
        if (map_rebuild(m, (m->used + 1) * 2 > m->mask ? m->mask * 2 + 1 : m->mask) < 0)
            return NULL;
        i = addr_hash(a, m->seed) & m->mask;
        while (m->slots[i].state) i = (i + 1) & m->mask;
    }
    m->used++;
    m->slots[i] = (Slot){a, -1, 0, -1, -1, USED};
    return &m->slots[i];
}

static const Slot *map_find(const AddrMap *m, uint64_t a) {
    size_t i = addr_hash(a, m->seed) & m->mask;
    while (m->slots[i].state) {
        if (m->slots[i].addr == a) return &m->slots[i];
        i = (i + 1) & m->mask;
    }
    return NULL;
}

/* ------------------------------------------------------------------ argument checks */
/* A 1-d C-contiguous native-order integer buffer of `itemsize` bytes and signedness
   (`is_signed`), e.g. a numpy column of the right dtype. */
static int get_column(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int is_signed,
                      const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=' || *f == '<') f++;
    int ok = view->ndim == 1 && view->itemsize == itemsize && f[0] && !f[1];
    if (ok) {
        const char *kinds = is_signed ? "bhilqn" : "BHILQN";
        ok = strchr(kinds, f[0]) != NULL;
    }
    if (!ok) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s must be a 1-d %s%d array", name,
                     is_signed ? "int" : "uint", (int)(itemsize * 8));
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the replay */
/* inputs: the events' columns, then the ghost candidates' */
enum {
    EV_ACTION,
    EV_ADDR,
    EV_SIZE,
    EV_STACK,
    EV_STREAM,
    GH_ADDR,
    GH_SIZE,
    GH_STACK,
    GH_STREAM,
    NIN
};
static const char *IN_NAMES[NIN] = {"action",     "addr",        "size",
                                    "stack",      "stream",      "ghost addr",
                                    "ghost size", "ghost stack", "ghost stream"};
static const Py_ssize_t IN_ITEM[NIN] = {1, 8, 8, 4, 4, 8, 8, 4, 4};
static const int IN_SIGNED[NIN] = {0, 0, 1, 1, 1, 0, 1, 1, 1};

/* per-event outputs */
enum { E_ROW, E_VERSION, E_ACTIVE, E_RESERVED, NEV };
static const char *EV_NAMES[NEV] = {"alloc_row", "version", "active_after", "reserved_after"};
static const size_t EV_ITEM[NEV] = {4, 4, 8, 8};
/* per-row outputs */
enum { R_ALLOC, R_FREE, R_REQ, R_VERSION, R_ADDR, R_SIZE, R_STACK, R_STREAM, R_FLAGS, NROW };
static const char *ROW_NAMES[NROW] = {"alloc_event",   "free_event",   "free_requested_event",
                                      "alloc_version", "alloc_addr",   "alloc_size",
                                      "alloc_stack",   "alloc_stream", "alloc_flags"};
static const size_t ROW_ITEM[NROW] = {8, 8, 8, 4, 8, 8, 4, 4, 1};

enum { K_ALLOC = 1, K_FREE = 2, K_REQUEST = 3, K_PAIR = 3, K_GROW = 4, K_SHRINK = 8 };

typedef struct {
    int64_t event, request; /* an orphan free, and its first earlier free_requested */
    int32_t version;
} Orphan;

typedef struct {
    int32_t event, next;
} Pending;

PyDoc_STRVAR(
    replay_doc,
    "replay(*, action, addr, size, stack, stream, ghost_addr, ghost_size, ghost_stack,\n"
    "       ghost_stream, alloc_code, free_code, request_code, grow_codes, shrink_codes,\n"
    "       requests_as_frees, end_reserved)\n--\n\n"
    "One device's replay (snapshot/replay/device.py), keyword arguments only. The events: action\n"
    "uint8, addr uint64, size int64, stack int32, stream int32, of one length n; the ghost\n"
    "candidates (the final state's active_allocated blocks): ghost_addr uint64, ghost_size\n"
    "int64, ghost_stack int32, ghost_stream int32; the action codes of alloc, free and\n"
    "request (-1: none), and bytes of the segment-growing and -shrinking ones;\n"
    "requests_as_frees: when no free event is there, the requests are the frees;\n"
    "end_reserved: the final segments' total size, or None.\n"
    "Returns a dict of the DeviceTrace columns as buffers (alloc_row, version, active_after,\n"
    "reserved_after; alloc_event ... alloc_flags) and ints baseline_bytes,\n"
    "reserved_start_bytes, orphans, ghosts, overwritten and frees_from_requested (bool).\n"
    "Raises ValueError on arrays of the wrong type or length.");

static PyObject *fr_replay(PyObject *Py_UNUSED(mod), PyObject *args, PyObject *kwargs) {
    static char *names[] = {"action",
                            "addr",
                            "size",
                            "stack",
                            "stream",
                            "ghost_addr",
                            "ghost_size",
                            "ghost_stack",
                            "ghost_stream",
                            "alloc_code",
                            "free_code",
                            "request_code",
                            "grow_codes",
                            "shrink_codes",
                            "requests_as_frees",
                            "end_reserved",
                            NULL};
    PyObject *in[NIN], *end_obj;
    int alloc_code, free_code, req_code, requests_as_frees;
    const char *grow, *shrink;
    Py_ssize_t n_grow, n_shrink;
    if (PyTuple_GET_SIZE(args)) { /* sixteen values are named, never counted */
        PyErr_SetString(PyExc_TypeError, "replay() takes keyword arguments only");
        return NULL;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOOOiiiy#y#pO:replay", names,
                                     &in[EV_ACTION], &in[EV_ADDR], &in[EV_SIZE], &in[EV_STACK],
                                     &in[EV_STREAM], &in[GH_ADDR], &in[GH_SIZE], &in[GH_STACK],
                                     &in[GH_STREAM], &alloc_code, &free_code, &req_code, &grow,
                                     &n_grow, &shrink, &n_shrink, &requests_as_frees, &end_obj))
        return NULL;
    if (alloc_code < -1 || alloc_code > 255 || free_code < -1 || free_code > 255 || req_code < -1 ||
        req_code > 255) {
        PyErr_SetString(PyExc_ValueError, "action codes must be -1 (none) or 0..255");
        return NULL;
    }
    int has_end = end_obj != Py_None;
    int64_t end_reserved = 0;
    if (has_end) {
        if (!PyLong_Check(end_obj)) {
            PyErr_SetString(PyExc_ValueError, "end_reserved must be an int or None");
            return NULL;
        }
        int over = 0;
        end_reserved = PyLong_AsLongLongAndOverflow(end_obj, &over);
        if (over) {
            PyErr_SetString(PyExc_ValueError, "end_reserved is out of the int64 range");
            return NULL;
        }
        if (end_reserved == -1 && PyErr_Occurred()) return NULL;
    }

    Py_buffer v[NIN];
    int got = 0;
    PyObject *result = NULL;
    void *ev_mem[NEV] = {0}, *row_mem[NROW] = {0};
    AddrMap map = {NULL, 4095, 0, process_seed, 0, 0};
    Orphan *orphans = NULL;
    Pending *pend = NULL;
    int32_t *ghost_of = NULL;
    size_t n_orph = 0, cap_orph = 0, n_pend = 0, cap_pend = 0;
    for (; got < NIN; got++)
        if (get_column(in[got], &v[got], IN_ITEM[got], IN_SIGNED[got], IN_NAMES[got]) < 0)
            goto done;
    const Py_ssize_t n = v[EV_ACTION].shape[0], n_cand = v[GH_ADDR].shape[0];
    for (int j = EV_ADDR; j <= EV_STREAM; j++)
        if (v[j].shape[0] != n) {
            PyErr_Format(PyExc_ValueError, "%s has %zd entries, action %zd", IN_NAMES[j],
                         v[j].shape[0], n);
            goto done;
        }
    for (int j = GH_SIZE; j <= GH_STREAM; j++)
        if (v[j].shape[0] != n_cand) {
            PyErr_Format(PyExc_ValueError, "%s has %zd entries, ghost addr %zd", IN_NAMES[j],
                         v[j].shape[0], n_cand);
            goto done;
        }
    if (n >= INT32_MAX || n_cand >= INT32_MAX - n) { /* row numbers are int32 */
        PyErr_SetString(PyExc_ValueError, "too many events for int32 row numbers");
        goto done;
    }
    const uint8_t *action = v[EV_ACTION].buf;
    const uint64_t *addr = v[EV_ADDR].buf, *g_addr = v[GH_ADDR].buf;
    const int64_t *size = v[EV_SIZE].buf, *g_size = v[GH_SIZE].buf;
    const int32_t *stack = v[EV_STACK].buf, *stream = v[EV_STREAM].buf;
    const int32_t *g_stack = v[GH_STACK].buf, *g_stream = v[GH_STREAM].buf;

    /* --- first pass: counts per action, and the segment sums (segment events are few) --- */
    uint8_t kind[256] = {0};
    for (Py_ssize_t j = 0; j < n_grow; j++) kind[(uint8_t)grow[j]] = K_GROW;
    for (Py_ssize_t j = 0; j < n_shrink; j++) kind[(uint8_t)shrink[j]] = K_SHRINK; /* wins */
    size_t count[256] = {0};
    uint64_t seg_sum = 0;
    int64_t seg_min = 0; /* 0 included: it only matters through max(0, -min) */
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t a = action[i];
        count[a]++;
        if (kind[a]) {
            seg_sum += kind[a] == K_SHRINK ? -(uint64_t)size[i] : (uint64_t)size[i];
            if ((int64_t)seg_sum < seg_min) seg_min = (int64_t)seg_sum;
        }
    }
    /* reserved bytes before the first event: what the final segments hold less what the
       events added; with no final state, as low as the events allow without going below 0 */
    const uint64_t reserved_start = has_end       ? (uint64_t)end_reserved - seg_sum
                                    : seg_min < 0 ? -(uint64_t)seg_min
                                                  : 0;
    int from_requests = 0;
    if (requests_as_frees && req_code >= 0 && (free_code < 0 || !count[free_code]) &&
        count[req_code]) {
        free_code = req_code;
        req_code = -1;
        from_requests = 1;
    }
    /* precedence as in the numpy path's masks: alloc, then free, then request */
    if (req_code >= 0) kind[req_code] = (uint8_t)((kind[req_code] & ~K_PAIR) | K_REQUEST);
    if (free_code >= 0) kind[free_code] = (uint8_t)((kind[free_code] & ~K_PAIR) | K_FREE);
    if (alloc_code >= 0) kind[alloc_code] = (uint8_t)((kind[alloc_code] & ~K_PAIR) | K_ALLOC);
    const size_t n_alloc = alloc_code >= 0 ? count[alloc_code] : 0;
    const size_t n_free = free_code >= 0 && free_code != alloc_code ? count[free_code] : 0;
    /* room in front of the alloc rows for the ghost and orphan rows, which come first */
    const size_t front = (size_t)n_cand + n_free;

    for (int j = 0; j < NEV; j++) {
        const size_t bytes = (size_t)n * EV_ITEM[j];
        if (!(ev_mem[j] = out_alloc(bytes, 0, bytes))) goto nomem;
    }
    for (int j = 0; j < NROW; j++) {
        const size_t item = ROW_ITEM[j];
        if (!(row_mem[j] = out_alloc((front + n_alloc) * item, front * item, n_alloc * item)))
            goto nomem;
    }
    map.slots = calloc(map.mask + 1, sizeof(Slot));
    if (!map.slots) goto nomem;
    int32_t *erow = ev_mem[E_ROW], *ever = ev_mem[E_VERSION];
    int64_t *active = ev_mem[E_ACTIVE], *reserved = ev_mem[E_RESERVED];
    /* alloc row k at [k]; orphan r at [r - n_orph], ghost g at [g - n_orph - n_ghost] */
    int64_t *r_alloc = (int64_t *)row_mem[R_ALLOC] + front;
    int64_t *r_free = (int64_t *)row_mem[R_FREE] + front;
    int64_t *r_req = (int64_t *)row_mem[R_REQ] + front;
    int32_t *r_ver = (int32_t *)row_mem[R_VERSION] + front;
    uint64_t *r_addr = (uint64_t *)row_mem[R_ADDR] + front;
    int64_t *r_size = (int64_t *)row_mem[R_SIZE] + front;
    int32_t *r_stack = (int32_t *)row_mem[R_STACK] + front;
    int32_t *r_stream = (int32_t *)row_mem[R_STREAM] + front;
    uint8_t *r_flags = (uint8_t *)row_mem[R_FLAGS] + front;

    /* --- the pass: pairing (see replay/device.py), rows, both curves ------------------------- */
    uint64_t cur = 0, seg = reserved_start;
    int32_t n_rows_alloc = 0;
    size_t n_over = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t kd = kind[action[i]];
        int32_t row = -1, ver = -1;
        if (kd & K_PAIR) {
            Slot *st = map_slot(&map, addr[i]);
            if (!st) goto nomem;
            if ((kd & K_PAIR) == K_ALLOC) {
                if (st->state & LAST_ALLOC) { /* the open one stays alive to the end */
                    r_flags[st->row] |= OVERWRITTEN;
                    st->state |= HAS_OVERWRITTEN;
                    n_over++;
                }
                st->pend_head = st->pend_tail = -1; /* requests before an alloc: no row */
                const int32_t k = n_rows_alloc++;
                r_alloc[k] = i;
                r_free[k] = n;
                r_req[k] = -1;
                r_ver[k] = st->frees;
                r_addr[k] = addr[i];
                r_size[k] = size[i];
                r_stack[k] = stack[i];
                r_stream[k] = stream[i];
                r_flags[k] = LIVE_AT_END;
                st->row = k;
                st->state = (uint8_t)((st->state & ~LAST_FREE) | LAST_ALLOC);
                row = k;
                ver = st->frees;
                cur += (uint64_t)size[i];
            } else if ((kd & K_PAIR) == K_FREE) {
                if (st->state & LAST_ALLOC) { /* closes the open allocation */
                    const int32_t k = st->row;
                    r_free[k] = i;
                    r_flags[k] &= (uint8_t)~(LIVE_AT_END | PENDING_FREE);
                    row = k;
                    ver = r_ver[k];
                    cur -= (uint64_t)r_size[k];
                } else { /* an allocation from before the trace */
                    if (n_orph == cap_orph) {
                        Orphan *no = grown(orphans, &cap_orph, sizeof(Orphan));
                        if (!no) goto nomem;
                        orphans = no;
                    }
                    const int32_t r = (int32_t)n_orph++;
                    orphans[r] = (Orphan){i, -1, st->frees};
                    /* the requests since the last anchor are its; the first one counts */
                    for (int32_t p = st->pend_head; p >= 0; p = pend[p].next) {
                        if (orphans[r].request < 0) orphans[r].request = pend[p].event;
                        erow[pend[p].event] = -(r + 2);
                        ever[pend[p].event] = st->frees;
                    }
                    row = -(r + 2); /* made a row number below */
                    ver = st->frees;
                    cur -= (uint64_t)size[i];
                }
                st->pend_head = st->pend_tail = -1;
                st->frees++;
                st->state = (uint8_t)((st->state & ~LAST_ALLOC) | LAST_FREE);
            } else if (st->state & LAST_ALLOC) { /* a request for the open allocation */
                const int32_t k = st->row;
                if (r_req[k] < 0) {
                    r_req[k] = i;
                    r_flags[k] |= PENDING_FREE;
                }
                row = k;
                ver = r_ver[k];
            } else { /* a request with nothing open: waits for the next anchor here */
                if (n_pend == cap_pend) {
                    Pending *np_ = grown(pend, &cap_pend, sizeof(Pending));
                    if (!np_) goto nomem;
                    pend = np_;
                }
                const int32_t p = (int32_t)n_pend++;
                pend[p] = (Pending){(int32_t)i, -1};
                if (st->pend_tail >= 0)
                    pend[st->pend_tail].next = p;
                else
                    st->pend_head = p;
                st->pend_tail = p;
            }
        }
        if (kd & K_GROW)
            seg += (uint64_t)size[i];
        else if (kd & K_SHRINK)
            seg -= (uint64_t)size[i];
        erow[i] = row;
        ever[i] = ver;
        active[i] = (int64_t)cur;
        reserved[i] = (int64_t)seg;
    }

    /* --- ghosts: candidates at an address with no allocation alive at the end ----------- */
    if (!(ghost_of = malloc(n_cand ? (size_t)n_cand * sizeof(int32_t) : 1))) goto nomem;
    size_t n_ghost = 0;
    for (Py_ssize_t c = 0; c < n_cand; c++) {
        const Slot *st = map_find(&map, g_addr[c]);
        if (!st || !(st->state & (LAST_ALLOC | HAS_OVERWRITTEN))) ghost_of[n_ghost++] = (int32_t)c;
    }
    uint64_t baseline = 0;
    const ptrdiff_t first = -(ptrdiff_t)(n_orph + n_ghost);
    for (size_t g = 0; g < n_ghost; g++) {
        const int32_t c = ghost_of[g];
        const Slot *st = map_find(&map, g_addr[c]);
        const ptrdiff_t k = first + (ptrdiff_t)g;
        r_alloc[k] = -1;
        r_free[k] = n;
        r_req[k] = -1;
        r_ver[k] = st ? st->frees : 0; /* allocations at its address that ended in the trace */
        r_addr[k] = g_addr[c];
        r_size[k] = g_size[c];
        r_stack[k] = g_stack[c];
        r_stream[k] = g_stream[c];
        r_flags[k] = PREEXISTING | GHOST | LIVE_AT_END;
        baseline += (uint64_t)g_size[c];
    }
    for (size_t r = 0; r < n_orph; r++) {
        const ptrdiff_t k = (ptrdiff_t)r - (ptrdiff_t)n_orph;
        const int64_t e = orphans[r].event;
        r_alloc[k] = -1;
        r_free[k] = e;
        r_req[k] = orphans[r].request;
        r_ver[k] = orphans[r].version;
        r_addr[k] = addr[e];
        r_size[k] = size[e];
        r_stack[k] = stack[e];
        r_stream[k] = stream[e];
        r_flags[k] = PREEXISTING;
        baseline += (uint64_t)size[e];
    }
    /* --- row numbers past the rows in front, the active curve past their bytes --------- */
    const int32_t off_orph = (int32_t)n_ghost, off_alloc = (int32_t)(n_ghost + n_orph);
    if (off_alloc) {
        for (Py_ssize_t i = 0; i < n; i++) {
            const int32_t r = erow[i];
            if (r >= 0)
                erow[i] = r + off_alloc;
            else if (r <= -2)
                erow[i] = off_orph - (r + 2);
            active[i] = (int64_t)((uint64_t)active[i] + baseline);
        }
    }

    /* --- hand the columns over --------------------------------------------------------- */
    const size_t n_rows = n_ghost + n_orph + (size_t)n_rows_alloc;
    if (!(result = PyDict_New())) goto done;
    for (int j = 0; j < NEV + NROW; j++) {
        PyObject *b;
        if (j < NEV)
            b = owned_buffer_new(&ev_mem[j], ev_mem[j], (Py_ssize_t)((size_t)n * EV_ITEM[j]));
        else {
            const int c = j - NEV;
            char *data = (char *)row_mem[c] + (size_t)(first + (ptrdiff_t)front) * ROW_ITEM[c];
            b = owned_buffer_new(&row_mem[c], data, (Py_ssize_t)(n_rows * ROW_ITEM[c]));
        }
        if (!b || PyDict_SetItemString(result, j < NEV ? EV_NAMES[j] : ROW_NAMES[j - NEV], b) < 0) {
            Py_XDECREF(b);
            Py_CLEAR(result);
            goto done;
        }
        Py_DECREF(b);
    }
    struct {
        const char *name;
        PyObject *value;
    } scalars[] = {
        {"baseline_bytes", PyLong_FromLongLong((long long)(int64_t)baseline)},
        {"reserved_start_bytes", PyLong_FromLongLong((long long)(int64_t)reserved_start)},
        {"orphans", PyLong_FromSize_t(n_orph)},
        {"ghosts", PyLong_FromSize_t(n_ghost)},
        {"overwritten", PyLong_FromSize_t(n_over)},
        {"frees_from_requested", PyBool_FromLong(from_requests)},
        {"longest_probe", PyLong_FromSize_t(map.longest)},
    };
    for (size_t j = 0; j < sizeof scalars / sizeof scalars[0]; j++) {
        if (result && (!scalars[j].value ||
                       PyDict_SetItemString(result, scalars[j].name, scalars[j].value) < 0))
            Py_CLEAR(result);
        Py_XDECREF(scalars[j].value);
    }
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    free(map.slots);
    free(orphans);
    free(pend);
    free(ghost_of);
    for (int j = 0; j < NEV; j++) free(ev_mem[j]);
    for (int j = 0; j < NROW; j++) free(row_mem[j]);
    for (int j = 0; j < got; j++) PyBuffer_Release(&v[j]);
    return result;
}

static PyMethodDef fr_methods[] = {
    {"replay", (PyCFunction)(void (*)(void))fr_replay, METH_VARARGS | METH_KEYWORDS, replay_doc},
    {NULL, NULL, 0, NULL},
};

/* the remaining slots (m_slots, traverse, clear, free) are unused: zero */
static struct PyModuleDef fr_module = {
    PyModuleDef_HEAD_INIT, "_fastreplay",
    "One-pass replay of a device's trace into allocation rows and curves (see replay/device.py).",
    -1, fr_methods};

PyMODINIT_FUNC PyInit__fastreplay(void) {
    if (PyType_Ready(&OwnedBufferType) < 0 || urandom_fill(&process_seed, 8) < 0) return NULL;
    PyObject *m = PyModule_Create(&fr_module);
    if (!m) return NULL;
    /* the alloc_flags bits (contract.h), for the test that they are the Python's */
    PyObject *flags =
        Py_BuildValue("{sisisisisi}", "PREEXISTING", PREEXISTING, "GHOST", GHOST, "LIVE_AT_END",
                      LIVE_AT_END, "PENDING_FREE", PENDING_FREE, "OVERWRITTEN", OVERWRITTEN);
    if (!flags || PyModule_AddObject(m, "ALLOC_FLAGS", flags) < 0) {
        Py_XDECREF(flags);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
