/* The pre-scan: prescan.py's pass over a pickle's opcodes, in C, run one opcode ahead of
   the reader (input_need) or alone (scan()). */
#include "reader.h"
#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

/* The mapped file's pages from in->released to RELEASE_KEEP before the reader, unmapped
   from this process: mapped whole, a file adds its size to the peak RSS (pre-27 read it
   through a 1 MiB buffer). The mapping is a shared one of a file: a page read again
   (a frames list compared with an earlier one, the scan going back over an entry) is
   mapped again from the page cache, with the same bytes, so what either reader sees is
   unchanged (docs/security.md: one set of bytes for both). */
void input_release(Input *in) {
    const size_t upto = in->pos - RELEASE_KEEP;
#if defined(__linux__) && defined(MADV_DONTNEED)
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)in->buf + in->released + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)in->buf + upto) & ~(page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
#endif
    in->released = upto;
}

/* Run the scan over `need` unread bytes (it stops after the opcode that covers them). 0
   they are there; 1 the data ends before (truncated); -1 with ScanStop set when the scan
   refused the file before them (its answer is the reader's: the file is refused as the
   Python path would refuse it). */
int input_need(Input *in, size_t need) {
    input_passed(in);
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

/* Costs from prescan.COSTS; -1 with an exception when they are not NCOSTS ints. */
int scan_costs(Scan *sc, PyObject *costs_obj) {
    if (!PyTuple_Check(costs_obj) || PyTuple_GET_SIZE(costs_obj) != NCOSTS) {
        PyErr_SetString(PyExc_ValueError, "costs: a tuple of NCOSTS ints (prescan.COSTS)");
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
void scan_init(Scan *sc, const unsigned char *d, size_t n) {
    const uint64_t *c = sc->c;
    sc->d = d;
    sc->n = n;
    sc->lim = sc->limit ? sc->limit : (1ULL << 62);
    sc->memo_max =
        sc->memo_limit && sc->memo_limit < (1ULL << 62) ? (int64_t)sc->memo_limit : (1LL << 62);
    sc->at = (ScanAt){0};
    sc->at.memo_top = -1;
    sc->at.extra = c[C_BASE]; /* EXTRA() with nothing named and an empty stack */
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
                     {'e', C_LIST, -1, 0, 0},          {'u', -1, C_DICT_ITEM, 0, 1},
                     {0x90, -1, C_SET_ITEM, 0, 0},     {'1', -1, -1, 0, 0}};
    for (size_t g = 0; g < sizeof from_mark / sizeof from_mark[0]; g++) {
        const unsigned char op = from_mark[g].op;
        eff[op] = EF_FROM_MARK;
        made[op] = from_mark[g].made < 0 ? 0 : c[from_mark[g].made];
        per_item[op] = from_mark[g].per < 0 ? 0 : c[from_mark[g].per] >> from_mark[g].half;
        left[op] = (unsigned char)from_mark[g].left;
    }
    per_item['e'] = c[C_LIST_ITEM] + c[C_TUPLE_ITEM]; /* and a temporary list of the items */
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
void scan_free(Scan *sc) {
    free(sc->marks);
    sc->marks = NULL;
    sc->marks_cap = 0;
}

/* Go on with the scan until it has passed byte `target` (it stops after an opcode) or has
   ended (sc->done). Its state lives in locals while it runs. */
void scan_until(Scan *sc, size_t target) {
    const uint64_t *c = sc->c;
    const unsigned char *cls = sc->cls, *wid = sc->wid, *eff = sc->eff;
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
#define EXTRA()                                                                                    \
    (c[C_BASE] + c[C_MEMO_SLOT] * (uint64_t)(memo_top + 1) + c[C_STACK_SLOT] * (uint64_t)peak)
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
                cost += scan_arg_cost(sc, op, d + pos + 2, raw);
                pos += 2 + raw;
                PUSH(made[op]);
                break;
            }
            case 'X': { /* BINUNICODE */
                const size_t raw = ld32(d + pos + 1);
                if (raw > edge - pos - 5) goto general;
                cost += scan_arg_cost(sc, op, d + pos + 5, raw);
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
                cost += c[C_READ_BYTE] * length;
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
            cost += scan_arg_cost(sc, op, d + pos, raw);
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
            cost += c[C_WIDE_STR] + c[C_LINE_BYTE] * (uint64_t)len;
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
