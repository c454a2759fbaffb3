/* Interning: values by equality, objects by identity, stacks (frames lists) by their
   items, and frames-list bodies by their bytes (keyed hashes). */
#include "reader.h"

int eq_init(EqTable *t) {
    *t = (EqTable){0};
    t->list = PyList_New(0);
    t->map = PyDict_New();
    return (t->list && t->map) ? 0 : -1;
}

void eq_clear(EqTable *t) {
    Py_CLEAR(t->list);
    Py_CLEAR(t->map);
    for (int k = 0; k < EQ_RECENT; k++) Py_CLEAR(t->recent[k]);
}

Py_ssize_t eq_index(EqTable *t, PyObject *v) {
    for (int k = 0; k < EQ_RECENT; k++)
        if (t->recent[k] == v) return t->recent_idx[k];
    PyObject *hit = PyDict_GetItemWithError(t->map, v);
    Py_ssize_t idx;
    if (hit) {
        idx = PyLong_AsSsize_t(hit);
    } else {
        if (PyErr_Occurred()) {
            if (take_error(PyExc_TypeError)) fallback("unhashable value in a trace entry");
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

int id_init(IdTable *t) {
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

void id_clear(IdTable *t) {
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
Py_ssize_t id_get(IdTable *t, PyObject *v) {
    size_t i = ptr_hash(v) & t->mask;
    while (t->keys[i]) {
        if (t->keys[i] == v) return t->vals[i];
        i = (i + 1) & t->mask;
    }
    return -2;
}

int id_put(IdTable *t, PyObject *v, int32_t idx) {
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

/* Keys for the stack and span hashes, set once per process from os.urandom at import: the
   bytes of a frames list come from an untrusted file, and with a fixed hash a crafted file
   could choose bodies that all land in one slot run (as it could addresses in the replay's
   table before it was keyed: tests/hostile/test_hash_flood.py). */
uint64_t hash_seed[2] = {0x9e3779b97f4a7c15ULL, 0x243f6a8885a308d3ULL};

static uint64_t items_hash(PyObject *const *items, size_t k) {
    uint64_t h = hash_seed[0] ^ k;
    for (size_t i = 0; i < k; i++) h = (h ^ ptr_hash(items[i])) * 0x100000001b3ULL;
    return h ^ (h >> 31);
}

void stackset_clear(StackSet *t) {
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

/* The two columns every interning table keys by, grown to `ncap` entries (off has one
   more: entry g spans off[g]..off[g + 1]); -1 when out of memory (what did grow is kept). */
static int grow_keys(size_t **off, uint64_t **hash, size_t ncap) {
    size_t *no = realloc(*off, (ncap + 1) * sizeof(size_t));
    if (no) *off = no;
    uint64_t *nh = realloc(*hash, ncap * sizeof(uint64_t));
    if (nh) *hash = nh;
    return no && nh ? 0 : -1;
}

static int stackset_grow_slots(StackSet *t) {
    if (slots_grow(&t->slots, &t->mask, t->hash, t->n) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* The stack made of items[0..k), added if new (*added set). -1 on error. */
Py_ssize_t stackset_index(StackSet *t, PyObject *const *items, size_t k, int *added) {
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
        const int keys = grow_keys(&t->off, &t->hash, ncap);
        PyObject **nr = realloc(t->rep, ncap * sizeof(PyObject *));
        if (nr) t->rep = nr;
        if (keys < 0 || !nr) {
            PyErr_NoMemory();
            return -1;
        }
        if (!t->cap) t->off[0] = 0;
        t->cap = ncap;
    }
    if (grow_objects(&t->items, &t->cap_items, t->n_items + k, 4096) < 0) return -1;
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

uint64_t bytes_hash(const unsigned char *p, size_t n) {
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

void spanset_clear(SpanSet *t) {
    free(t->bytes);
    free(t->off);
    free(t->hash);
    free(t->stack);
    free(t->n_items);
    free(t->slots);
    *t = (SpanSet){0};
}

/* The body's index, or -1. */
Py_ssize_t spanset_find(SpanSet *t, const unsigned char *p, size_t n, uint64_t h,
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
void spanset_add(SpanSet *t, const unsigned char *p, size_t n, uint64_t h, int32_t stack,
                 int32_t n_items) {
    if (n > SPAN_MAX_BYTES || t->n_bytes + n > SPAN_TOTAL_BYTES || t->n >= INT32_MAX - 1) return;
    if ((!t->slots || (t->n + 1) * 2 > t->mask) &&
        slots_grow(&t->slots, &t->mask, t->hash, t->n) < 0)
        return;
    if (t->n + 1 >= t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 256;
        const int keys = grow_keys(&t->off, &t->hash, ncap);
        int32_t *nst = realloc(t->stack, ncap * sizeof(int32_t));
        if (nst) t->stack = nst;
        int32_t *nk = realloc(t->n_items, ncap * sizeof(int32_t));
        if (nk) t->n_items = nk;
        if (keys < 0 || !nst || !nk) return;
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
