/* CRC-32C (Castagnoli) of a buffer, for the column cache's integrity check (cache.py).
 *
 * Why not zlib.crc32: a warm `memlens view` of a 4M-event file checks ~500 MB of columns
 * and indexes before its first paint, and zlib's table-driven CRC-32 runs at about 1 GB/s
 * here: half a second of a one-second budget. CRC-32C is a CRC of the same width and
 * class (every single-bit error and every burst of up to 32 bits is caught; its Hamming
 * distance is at least as good as CRC-32's at these lengths), and x86-64 (SSE4.2) and
 * ARMv8 compute it in hardware, several times faster. Where the instruction is missing
 * (checked at run time on x86-64), a slicing-by-8 table does the same arithmetic in
 * software, about as fast as zlib.
 *
 * crc32c(data, value=0, /) -> int, chained like zlib.crc32: crc32c(b, crc32c(a)) ==
 * crc32c(a + b). The GIL is released while it runs. _software(...) is the table path, for
 * the tests to check both paths agree.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u /* CRC-32C, reflected */

static uint32_t table[8][256];

static void init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
}

static uint32_t crc_software(uint32_t crc, const unsigned char *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* eight bytes at a time: the word's lowest byte is the first in the stream */
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = table[7][w & 0xFF] ^ table[6][(w >> 8) & 0xFF] ^ table[5][(w >> 16) & 0xFF] ^
              table[4][(w >> 24) & 0xFF] ^ table[3][(w >> 32) & 0xFF] ^ table[2][(w >> 40) & 0xFF] ^
              table[1][(w >> 48) & 0xFF] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
#endif
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_HARDWARE 1
#define HW_TARGET __attribute__((target("sse4.2")))
#define HW_U64(crc, w) ((uint32_t)_mm_crc32_u64((crc), (w)))
#define HW_U8(crc, b) _mm_crc32_u8((crc), (b))
static int hardware_ok(void) { return __builtin_cpu_supports("sse4.2") != 0; }
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define HAVE_HARDWARE 1
#define HW_TARGET
#define HW_U64(crc, w) __crc32cd((crc), (w))
#define HW_U8(crc, b) __crc32cb((crc), (b))
static int hardware_ok(void) { return 1; }
#endif

/* (a * b) mod P, polynomials in the reflected order (bit 31 is x^0) */
static uint32_t multmodp(uint32_t a, uint32_t b) {
    uint32_t m = (uint32_t)1 << 31, prod = 0;
    for (;;) {
        if (a & m) {
            prod ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return prod;
}

/* x^(8 * n) mod P: what a CRC register is multiplied by when n zero bytes follow */
static uint32_t x8nmodp(size_t n) {
    uint32_t p = (uint32_t)1 << 31, sq = (uint32_t)1 << 30; /* x^0, then x^(2^k) */
    for (int k = 0; k < 3; k++) sq = multmodp(sq, sq); /* x^8 */
    while (n) {
        if (n & 1) p = multmodp(sq, p);
        sq = multmodp(sq, sq);
        n >>= 1;
    }
    return p;
}

#ifdef HAVE_HARDWARE
/* The instruction's latency (3 cycles) is what bounds one stream: three streams over three
 * consecutive blocks run side by side, and the CRC being linear, the three registers are
 * joined by shifting each over the bytes after its block:
 * crc(A B C) = crc(A) * x^(16 BLOCK) + crc0(B) * x^(8 BLOCK) + crc0(C), mod P. */
#define BLOCK 4096
static uint32_t x_block; /* x^(8 BLOCK) mod P */

HW_TARGET static uint32_t crc_hardware(uint32_t crc, const unsigned char *p, size_t n) {
    while (n >= 3 * BLOCK) {
        uint32_t c0 = crc, c1 = 0, c2 = 0;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p + BLOCK + i, 8);
            memcpy(&w2, p + 2 * BLOCK + i, 8);
            c0 = HW_U64(c0, w0);
            c1 = HW_U64(c1, w1);
            c2 = HW_U64(c2, w2);
        }
        crc = multmodp(x_block, multmodp(x_block, c0) ^ c1) ^ c2;
        p += 3 * BLOCK;
        n -= 3 * BLOCK;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = HW_U64(crc, w);
        p += 8;
        n -= 8;
    }
    while (n--) crc = HW_U8(crc, *p++);
    return crc;
}
#endif

static int use_hardware = 0;

static PyObject *checksum(PyObject *args, int software) {
    Py_buffer buf;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &buf, &value)) return NULL;
    uint32_t crc = ~(uint32_t)value;
    const unsigned char *p = (const unsigned char *)buf.buf;
    size_t n = (size_t)buf.len;
    Py_BEGIN_ALLOW_THREADS
#ifdef HAVE_HARDWARE
        if (use_hardware && !software) crc = crc_hardware(crc, p, n);
    else
#endif
        crc = crc_software(crc, p, n);
    Py_END_ALLOW_THREADS PyBuffer_Release(&buf);
    return PyLong_FromUnsignedLong((unsigned long)~crc);
}

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    (void)self;
    return checksum(args, 0);
}

static PyObject *py_software(PyObject *self, PyObject *args) {
    (void)self;
    return checksum(args, 1);
}

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0, /) -> CRC-32C of data."},
    {"_software", py_software, METH_VARARGS, "The same, always with the table (tests)."},
    {NULL, NULL, 0, NULL},
};

/* the remaining slots (m_slots, traverse, clear, free) are unused: zero */
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_checksum",
                                    "CRC-32C for the column cache (see store/cache.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__checksum(void) {
    init_table();
#ifdef HAVE_HARDWARE
    use_hardware = hardware_ok();
    x_block = x8nmodp(BLOCK);
#endif
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "HARDWARE", use_hardware) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
