/* RoPE on the CPU in one pass over x: each row's pairs read once, turned, written once (the
 * traffic of a copy). Built at first use by posenc_kernels/rope_cpu.py (cc -O3 -march=native)
 * and called through ctypes, one range of rows per thread; no OpenMP, so no second threading
 * runtime beside torch's.
 *
 * x, out: (B, H, L, D) through their strides (elements; the last stride is 1); out may be x.
 * Pairs: half-split (i, i + half) or interleaved (2i, 2i + 1), i < n_freq <= half, counted
 * from dim start (0, or D - 2 half where a head is [no position | rotary], DeepSeek-V4's); the
 * pairs i >= n_freq and the dims outside start .. start + 2 half - 1 pass through. Tables cos, sin (and xPos's scale) are
 * float32 rows of n_freq columns: row (b, l) at b * tb + p * tl, p = positions[b * pb + l * pl]
 * when positions is given, else offset + l. sign -1 turns by minus the angle (the backward);
 * the scale multiplies (divide 0: xPos's q) or divides (1: its k), forward and backward alike.
 * dtype 0: float32, 1: bfloat16 (rounded to nearest even), computed in float32.
 */
#include <stdint.h>
#include <string.h>

static inline float bf16_load(const uint16_t *p, int64_t i) {
    uint32_t u = (uint32_t)p[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void bf16_store(uint16_t *p, int64_t i, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    /* round to nearest even; a NaN stays a NaN (its quiet bit set) */
    u = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : u + 0x7fffu + ((u >> 16) & 1u);
    p[i] = (uint16_t)(u >> 16);
}

#define F32_LOAD(p, i) ((p)[i])
#define F32_STORE(p, i, v) ((p)[i] = (v))

/* One row's turned pairs: a loop the compiler vectorizes, one per dtype and pairing, the
 * scale's branch outside it. */
#define ROW(NAME, T, LOAD, STORE, IA, IB)                                                     \
    static void NAME(const T *restrict x, T *out, int64_t half, int64_t n_freq,              \
                     const float *restrict c, const float *restrict s,                       \
                     const float *restrict sc, int divide, float sign) {                     \
        if (!sc) {                                                                           \
            _Pragma("omp simd") for (int64_t i = 0; i < n_freq; ++i) {                       \
                float a = LOAD(x, IA), b = LOAD(x, IB), si = sign * s[i];                    \
                STORE(out, IA, a * c[i] - b * si);                                           \
                STORE(out, IB, b * c[i] + a * si);                                           \
            }                                                                                \
        } else {                                                                             \
            _Pragma("omp simd") for (int64_t i = 0; i < n_freq; ++i) {                       \
                float a = LOAD(x, IA), b = LOAD(x, IB), si = sign * s[i];                    \
                float m = divide ? 1.0f / sc[i] : sc[i];                                     \
                STORE(out, IA, (a * c[i] - b * si) * m);                                     \
                STORE(out, IB, (b * c[i] + a * si) * m);                                     \
            }                                                                                \
        }                                                                                    \
    }

ROW(row_f32_half, float, F32_LOAD, F32_STORE, i, i + half)
ROW(row_f32_pairs, float, F32_LOAD, F32_STORE, 2 * i, 2 * i + 1)
ROW(row_bf16_half, uint16_t, bf16_load, bf16_store, i, i + half)
ROW(row_bf16_pairs, uint16_t, bf16_load, bf16_store, 2 * i, 2 * i + 1)

/* What does not turn, copied as bytes, bit for bit as torch copies them (through float32 a
 * bfloat16 signalling NaN came back quiet): the pairs i >= n_freq (p-RoPE) and the dims past
 * 2 half (partial rotary). Half-split: [n_freq, half) and [half + n_freq, D); interleaved:
 * [2 n_freq, D). Not faster than the element loop it replaced at gemma-4's and Qwen3.5's
 * shapes (sweep=cpu_rope on a 2-core VM, one run each: within its run-to-run spread). */
static void pass_through(const char *x, char *out, int64_t D, int64_t half, int64_t n_freq,
                         int interleaved, int64_t size) {
    if (interleaved) {
        memcpy(out + 2 * n_freq * size, x + 2 * n_freq * size, (D - 2 * n_freq) * size);
        return;
    }
    memcpy(out + n_freq * size, x + n_freq * size, (half - n_freq) * size);
    memcpy(out + (half + n_freq) * size, x + (half + n_freq) * size, (D - half - n_freq) * size);
}

static void row(const void *x, void *out, int64_t D, int64_t start, int64_t half,
                int64_t n_freq, int interleaved, const float *c, const float *s,
                const float *sc, int divide, float sign, int dtype, int same) {
    int64_t size = dtype == 0 ? 4 : 2;
    if (!same && start) { /* the dims before the rotated ones */
        memcpy(out, x, start * size);
    }
    x = (const char *)x + start * size;
    out = (char *)out + start * size;
    D -= start;
    if (!same && !(n_freq == half && 2 * half == D))
        pass_through(x, out, D, half, n_freq, interleaved, size);
    if (dtype == 0 && !interleaved)
        row_f32_half(x, out, half, n_freq, c, s, sc, divide, sign);
    else if (dtype == 0)
        row_f32_pairs(x, out, half, n_freq, c, s, sc, divide, sign);
    else if (!interleaved)
        row_bf16_half(x, out, half, n_freq, c, s, sc, divide, sign);
    else
        row_bf16_pairs(x, out, half, n_freq, c, s, sc, divide, sign);
}

/* Rows [begin, end) of D elements in the collapsed (b, outer, inner) order: bshd (l outer, h
 * inner) walks memory in order when the heads' stride is the smaller, bhsd (h outer)
 * otherwise. Any range splits the work, at every layout, into pieces of whole rows. */
void rope_rows(int dtype, const void *x, void *out, const int64_t *shape, const int64_t *xs,
               const int64_t *os, const float *cos, const float *sin, const float *scale,
               int divide, int64_t tb, int64_t tl, const int64_t *positions, int64_t pb,
               int64_t pl, int64_t offset, int64_t start, int64_t half, int64_t n_freq,
               int interleaved, float sign, int64_t begin, int64_t end) {
    int64_t H = shape[1], L = shape[2], D = shape[3];
    int l_outer = xs[1] <= xs[2];
    int64_t n_outer = l_outer ? L : H, n_inner = l_outer ? H : L;
    int64_t size = dtype == 0 ? 4 : 2;
    int same = x == out && xs[0] == os[0] && xs[1] == os[1] && xs[2] == os[2];
    for (int64_t r = begin; r < end; ++r) {
        int64_t j = r % n_inner, o = (r / n_inner) % n_outer, b = r / (n_inner * n_outer);
        int64_t h = l_outer ? j : o, l = l_outer ? o : j;
        int64_t p = positions ? positions[b * pb + l * pl] : offset + l;
        int64_t t = b * tb + p * tl;
        const char *xr = (const char *)x + (b * xs[0] + h * xs[1] + l * xs[2]) * size;
        char *orow = (char *)out + (b * os[0] + h * os[1] + l * os[2]) * size;
        row(xr, orow, D, start, half, n_freq, interleaved, cos + t, sin + t,
            scale ? scale + t : 0, divide, sign, dtype, same);
    }
}
