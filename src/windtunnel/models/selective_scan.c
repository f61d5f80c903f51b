/* The selective scan of models/scans.py, compiled: h_t = exp(delta_t A) h_{t-1} + du_t B_t, y_t = C_t . h_t, fused
 * over t in one pass per sequence (no per-step tensors), and its backward, which recomputes the states chunk by chunk
 * from the checkpoints the forward kept. Built and loaded at run time by models/scan_kernel.py (ctypes; no torch
 * headers), one function per dtype.
 *
 * Layouts, row-major and contiguous: dt (delta), du (delta u) (B,T,D); Bm, Cm (B,T,N); A2 = A^T log2(e) and At = A^T
 * (N,D); a state is (N,D), n-major, so every inner loop runs over d and vectorises. */
#include <math.h>
#include <stdint.h>
#include <string.h>

/* 2^x in float32, to about 1e-7 relative: 2^round(x) from the exponent bits times e^(f ln 2), f = x - round(x) in
 * [-0.5, 0.5], by its degree-7 Taylor polynomial (remainder < 6e-9). Branch-free so that the loops calling it
 * vectorise. x is clamped to [-126, 126]: below, 2^-126 (~1e-38) stands for the denormal or 0 that exp2f gives. */
static inline float exp2_f32(float x) {
    x = x < -126.0f ? -126.0f : (x > 126.0f ? 126.0f : x);
    const float xi = floorf(x + 0.5f);
    const float z = (x - xi) * 0.6931471805599453f;
    const float p =
        1.0f +
        z * (1.0f + z * (0.5f + z * (1.0f / 6 + z * (1.0f / 24 + z * (1.0f / 120 + z * (1.0f / 720 + z / 5040))))));
    const int32_t bits = ((int32_t)xi + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* scan_forward_<dtype>: y (B,T,D); S (B,ceil(T/K),N,D) the state entering each chunk of K steps; h (N,D) work.
 *
 * scan_backward_<dtype>: with g_t = dL/dh_t = C_t gy_t + exp(delta_{t+1} A) g_{t+1},
 *   gdu_t[d] = sum_n B_t[n] g_t[n,d] (dL/d(delta u));  gB_t[n] = sum_d du_t[d] g_t[n,d];  gC_t[n] = sum_d gy_t[d] h_t[n,d];
 *   q_t = g_t exp(delta_t A) h_{t-1} (dL/d(delta_t A)):  gdt_t[d] = sum_n q_t[n,d] A[n,d];  gA += q_t delta_t (summed
 *   over b and t into gA, which the caller zeroes). Work: g (N,D); hb (K+1,N,D) a chunk's states from the one entering
 *   it; ab (K,N,D) its exp(delta A). */
#define SCAN_KERNELS(REAL, SUFFIX, EXP2)                                                                               \
    void scan_forward_##SUFFIX(int64_t B, int64_t T, int64_t N, int64_t D, int64_t K, const REAL *restrict dt,       \
                               const REAL *restrict du, const REAL *restrict Bm, const REAL *restrict Cm,             \
                               const REAL *restrict A2, REAL *restrict y, REAL *restrict S, REAL *restrict h) {       \
        const int64_t nch = (T + K - 1) / K, ND = N * D;                                                             \
        for (int64_t b = 0; b < B; b++) {                                                                            \
            memset(h, 0, sizeof(REAL) * ND);                                                                         \
            for (int64_t t = 0; t < T; t++) {                                                                        \
                const int64_t row = b * T + t;                                                                       \
                if (t % K == 0) memcpy(S + (b * nch + t / K) * ND, h, sizeof(REAL) * ND);                            \
                const REAL *restrict dtr = dt + row * D, *restrict dur = du + row * D;                               \
                REAL *restrict yr = y + row * D;                                                                     \
                for (int64_t d = 0; d < D; d++) yr[d] = 0;                                                           \
                for (int64_t n = 0; n < N; n++) {                                                                    \
                    const REAL bn = Bm[row * N + n], cn = Cm[row * N + n];                                           \
                    const REAL *restrict a2 = A2 + n * D;                                                            \
                    REAL *restrict hn = h + n * D;                                                                   \
                    for (int64_t d = 0; d < D; d++) {                                                                \
                        const REAL v = EXP2(dtr[d] * a2[d]) * hn[d] + dur[d] * bn;                                   \
                        hn[d] = v;                                                                                   \
                        yr[d] += cn * v;                                                                             \
                    }                                                                                                \
                }                                                                                                    \
            }                                                                                                        \
        }                                                                                                            \
    }                                                                                                                \
                                                                                                                     \
    void scan_backward_##SUFFIX(int64_t B, int64_t T, int64_t N, int64_t D, int64_t K, const REAL *restrict dt,      \
                                const REAL *restrict du, const REAL *restrict Bm, const REAL *restrict Cm,            \
                                const REAL *restrict A2, const REAL *restrict At, const REAL *restrict S,             \
                                const REAL *restrict gy, REAL *restrict gdu, REAL *restrict gdt, REAL *restrict gA,   \
                                REAL *restrict gB, REAL *restrict gC, REAL *restrict g, REAL *restrict hb,            \
                                REAL *restrict ab) {                                                                  \
        const int64_t nch = (T + K - 1) / K, ND = N * D;                                                             \
        for (int64_t b = 0; b < B; b++) {                                                                            \
            memset(g, 0, sizeof(REAL) * ND);                                                                         \
            for (int64_t k = nch - 1; k >= 0; k--) {                                                                 \
                const int64_t c0 = k * K, L = (T - c0 < K) ? T - c0 : K;                                             \
                memcpy(hb, S + (b * nch + k) * ND, sizeof(REAL) * ND);                                               \
                for (int64_t i = 0; i < L; i++) { /* the chunk's states again, and their exp(delta A) */            \
                    const int64_t row = b * T + c0 + i;                                                              \
                    const REAL *restrict dtr = dt + row * D, *restrict dur = du + row * D;                           \
                    for (int64_t n = 0; n < N; n++) {                                                                \
                        const REAL bn = Bm[row * N + n];                                                             \
                        const REAL *restrict a2 = A2 + n * D, *restrict hp = hb + i * ND + n * D;                    \
                        REAL *restrict a = ab + i * ND + n * D, *restrict hn = hb + (i + 1) * ND + n * D;            \
                        for (int64_t d = 0; d < D; d++) {                                                            \
                            a[d] = EXP2(dtr[d] * a2[d]);                                                             \
                            hn[d] = a[d] * hp[d] + dur[d] * bn;                                                      \
                        }                                                                                            \
                    }                                                                                                \
                }                                                                                                    \
                for (int64_t i = L - 1; i >= 0; i--) {                                                               \
                    const int64_t row = b * T + c0 + i;                                                              \
                    const REAL *restrict dtr = dt + row * D, *restrict dur = du + row * D, *restrict gyr = gy + row * D; \
                    REAL *restrict gdur = gdu + row * D, *restrict gdtr = gdt + row * D;                             \
                    for (int64_t d = 0; d < D; d++) gdur[d] = gdtr[d] = 0;                                           \
                    for (int64_t n = 0; n < N; n++) {                                                                \
                        const REAL bn = Bm[row * N + n], cn = Cm[row * N + n];                                       \
                        const REAL *restrict hc = hb + (i + 1) * ND + n * D, *restrict hp = hb + i * ND + n * D;     \
                        const REAL *restrict a = ab + i * ND + n * D, *restrict at = At + n * D;                     \
                        REAL *restrict gn = g + n * D, *restrict gan = gA + n * D;                                   \
                        REAL sc = 0, sb = 0;                                                                         \
                        for (int64_t d = 0; d < D; d++) {                                                            \
                            const REAL gh = gn[d] + cn * gyr[d]; /* dL/dh_t */                                       \
                            sc += gyr[d] * hc[d];                                                                    \
                            sb += dur[d] * gh;                                                                       \
                            gdur[d] += bn * gh;                                                                      \
                            const REAL q = gh * a[d] * hp[d]; /* dL/d(delta_t A) */                                  \
                            gan[d] += q * dtr[d];                                                                    \
                            gdtr[d] += q * at[d];                                                                    \
                            gn[d] = gh * a[d]; /* the carry to t-1 */                                                \
                        }                                                                                            \
                        gC[row * N + n] = sc;                                                                        \
                        gB[row * N + n] = sb;                                                                        \
                    }                                                                                                \
                }                                                                                                    \
            }                                                                                                        \
        }                                                                                                            \
    }

SCAN_KERNELS(float, float32, exp2_f32)
SCAN_KERNELS(double, float64, exp2)
