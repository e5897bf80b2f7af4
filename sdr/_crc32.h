/* CRC-32 of the zlib/IEEE polynomial, shared by the package's native modules
 * (sdr/_placement.c: the chunk checksums; backends/udp/_datapath.c: the RoCEv2 ICRC).
 *
 * Everything here is static: each module that includes it has its own tables and its own
 * choice of implementation, made once by crc32_setup() at module init (carry-less
 * multiplication where the CPU has it; SDR_CRC=pclmul|table picks a slower one for tests
 * and benchmarks). crc_raw() is the register without zlib's pre/post inversion; zlib's
 * crc32(data, v) is ~crc_raw(~v, data).
 */
#ifndef SDR_CRC32_H
#define SDR_CRC32_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#ifndef HAVE_X86
#define HAVE_X86 1
#endif
#endif

/* CRC-32 (reflected polynomial 0xEDB88320), "raw": no pre/post inversion. zlib's
 * crc32(data, v) is ~raw(~v, data).                                                    */

static uint32_t crc_table[8][256];

static void crc_init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_raw_table(uint32_t c, const uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if PY_BIG_ENDIAN
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c;
}

#ifdef HAVE_X86
/* Folding with carry-less multiplication (Intel, "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", 2009): four 128-bit lanes are folded forward across 512
 * bits, then into one lane, whose 16 bytes and the tail are finished by the tables (the
 * folded lane is congruent to everything before it, so a zero-state CRC over it gives the
 * same register). The constants are x^k mod P for the reflected polynomial. */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i
fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

__attribute__((target("pclmul,sse4.1"))) static uint32_t
crc_raw_pclmul(uint32_t c, const uint8_t *p, size_t n)
{
    if (n < 128)
        return crc_raw_table(c, p, n);
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k128 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)c));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x0 = _mm_xor_si128(fold(x0, k512), _mm_loadu_si128((const __m128i *)p));
        x1 = _mm_xor_si128(fold(x1, k512), _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = _mm_xor_si128(fold(x2, k512), _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = _mm_xor_si128(fold(x3, k512), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    __m128i x = _mm_xor_si128(fold(x0, k128), x1);
    x = _mm_xor_si128(fold(x, k128), x2);
    x = _mm_xor_si128(fold(x, k128), x3);
    while (n >= 16) {
        x = _mm_xor_si128(fold(x, k128), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint8_t lane[16];
    _mm_storeu_si128((__m128i *)lane, x);
    return crc_raw_table(crc_raw_table(0, lane, 16), p, n);
}

/* The same folding four 512-bit registers at a time (VPCLMULQDQ with AVX-512): each
 * 128-bit lane is folded across 2048 bits, the four registers into one across 512, its
 * four lanes into one across 128, then as above. */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) static inline __m512i
fold512(__m512i x, __m512i k)
{
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00),
                            _mm512_clmulepi64_epi128(x, k, 0x11));
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1"))) static uint32_t
crc_raw_vpclmul(uint32_t c, const uint8_t *p, size_t n)
{
    if (n < 512)
        return crc_raw_pclmul(c, p, n);
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1322d1430LL, 0x11542778aLL));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL));
    const __m128i k128 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m512i z0 = _mm512_loadu_si512((const void *)p);
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 192));
    z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
    p += 256;
    n -= 256;
    while (n >= 256) {
        z0 = _mm512_xor_si512(fold512(z0, k2048), _mm512_loadu_si512((const void *)p));
        z1 = _mm512_xor_si512(fold512(z1, k2048), _mm512_loadu_si512((const void *)(p + 64)));
        z2 = _mm512_xor_si512(fold512(z2, k2048), _mm512_loadu_si512((const void *)(p + 128)));
        z3 = _mm512_xor_si512(fold512(z3, k2048), _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    __m512i z = _mm512_xor_si512(fold512(z0, k512), z1);
    z = _mm512_xor_si512(fold512(z, k512), z2);
    z = _mm512_xor_si512(fold512(z, k512), z3);
    while (n >= 64) {
        z = _mm512_xor_si512(fold512(z, k512), _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    __m128i x = _mm512_extracti32x4_epi32(z, 0);
    x = _mm_xor_si128(fold(x, k128), _mm512_extracti32x4_epi32(z, 1));
    x = _mm_xor_si128(fold(x, k128), _mm512_extracti32x4_epi32(z, 2));
    x = _mm_xor_si128(fold(x, k128), _mm512_extracti32x4_epi32(z, 3));
    while (n >= 16) {
        x = _mm_xor_si128(fold(x, k128), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint8_t lane[16];
    _mm_storeu_si128((__m128i *)lane, x);
    return crc_raw_table(crc_raw_table(0, lane, 16), p, n);
}
#endif

static int use_pclmul, use_vpclmul;

static inline uint32_t crc_raw(uint32_t c, const uint8_t *p, size_t n)
{
#ifdef HAVE_X86
    if (use_vpclmul)
        return crc_raw_vpclmul(c, p, n);
    if (use_pclmul)
        return crc_raw_pclmul(c, p, n);
#endif
    return crc_raw_table(c, p, n);
}

static void crc32_setup(void)
{
    crc_init_tables();
#ifdef HAVE_X86
    __builtin_cpu_init();
    use_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    use_vpclmul = use_pclmul && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("vpclmulqdq");
    const char *want = getenv("SDR_CRC");
    if (want && strcmp(want, "pclmul") == 0)
        use_vpclmul = 0;
    else if (want && strcmp(want, "table") == 0)
        use_pclmul = use_vpclmul = 0;
#endif
}

/* Moving a register across zero bytes, and joining checksums. The raw register is linear
 * over GF(2): crc_raw(s, M) = shift(s, |M|) ^ crc_raw(0, M), where shift(s, n) is s times
 * x^(8n) modulo the polynomial (reflected: bit 31 is x^0). So the checksum of a payload
 * follows from a register that ran over a header and the payload, and zlib's CRC of A|B
 * from zlib's CRCs of A and B: crc(A|B) = shift(crc(A), |B|) ^ crc(B). */

/* a * b modulo the polynomial, both reflected. */
static inline uint32_t crc_mul(uint32_t a, uint32_t b)
{
    uint32_t product = 0;
    for (uint32_t bit = 0x80000000u; bit != 0; bit >>= 1) {
        if (a & bit)
            product ^= b;
        b = (b >> 1) ^ (0xEDB88320u & (0u - (b & 1u)));
    }
    return product;
}

/* x^(8n) modulo the polynomial (reflected): square and multiply from x^8. */
static uint32_t crc_x8n(uint64_t n)
{
    uint32_t result = 0x80000000u, power = 0x00800000u; /* x^0, x^8 */
    for (; n != 0; n >>= 1) {
        if (n & 1)
            result = crc_mul(result, power);
        power = crc_mul(power, power);
    }
    return result;
}

/* The name of the implementation crc_raw() runs. */
static inline const char *crc32_implementation(void)
{
    return use_vpclmul ? "vpclmul" : use_pclmul ? "pclmul" : "table";
}

#endif /* SDR_CRC32_H */
