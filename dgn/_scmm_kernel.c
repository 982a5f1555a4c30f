/* The relaxed greedy layers of a sqrt SCMM objective ("soft" relaxation) on float32: the
 * forward pass and the hand-derived backward pass, each one pass over a problem's (N, E)
 * features a layer, a batch of problems per call split over OpenMP threads. Built at
 * first use by dgn._kernels (a C compiler is needed, as for torch.compile) and called
 * through ctypes; tests/test_kernels.py checks it against autograd through the eager
 * layers of dgn.greedy.
 *
 * Layer k (coverage c, remaining mass r, available set A):
 *   g[n]   = sum_e alpha[e] (sqrt(c[e] + H[n,e]) - sqrt(c[e])) + beta[n]
 *   l[n]   = g[n] / tau + log(max(r[n], 1e-30))       on A, -inf elsewhere
 *   s      = softmax(l) over A
 *   c     += sum_n s[n] H[n,:];  r -= s;  A -= {argmax l}
 * The derivative of sqrt is taken at max(sqrt(x), sqrt(1e-3)), as dgn.objectives does.
 */
#include <float.h>
#include <math.h>

#include "_kernel_common.h"

#define FLOOR 0.031622776601683794f /* sqrt(1e-3) */
#define TINY 1e-30f

/* 1 / sqrt(max(x, 1e-30)) for x >= 0: a bit-level first guess and three Newton steps,
 * exact to a few ulp and, unlike sqrtf and a division, as cheap as a few multiplications
 * in a vector loop. x * rsqrt_newton(x) is sqrt(x), 0 at 0. */
static inline float rsqrt_newton(float x) {
    x = x > TINY ? x : TINY;
    union {
        float f;
        uint32_t i;
    } u = {x};
    u.i = 0x5f375a86u - (u.i >> 1);
    float y = u.f;
    const float hx = 0.5f * x;
    y = y * (1.5f - hx * y * y);
    y = y * (1.5f - hx * y * y);
    y = y * (1.5f - hx * y * y);
    return y;
}

/* Features are processed in blocks of BW (_kernel_common.h), each block's sums kept in
 * registers across the N rows; the last E % BW features one at a time. */
static inline vf splat(float x) { return (vf){0} + x; }

static inline vf vselect(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

/* rsqrt_newton on a vector; with AVX-512, the hardware's 14-bit estimate and one Newton
 * step (the same accuracy in a third of the operations) */
static inline vf rsqrt_newton_v(vf x) {
#if defined(__AVX512F__)
    __m512 v;
    memcpy(&v, &x, sizeof v);
    v = _mm512_max_ps(v, _mm512_set1_ps(TINY));
    __m512 y = _mm512_rsqrt14_ps(v);
    const __m512 hx = _mm512_mul_ps(v, _mm512_set1_ps(0.5f));
    y = _mm512_mul_ps(y, _mm512_fnmadd_ps(hx, _mm512_mul_ps(y, y), _mm512_set1_ps(1.5f)));
    vf out;
    memcpy(&out, &y, sizeof out);
    return out;
#else
    x = vselect(x > TINY, x, splat(TINY));
    vf y = (vf)(0x5f375a86 - ((vi)x >> 1));
    const vf hx = 0.5f * x;
    y = y * (1.5f - hx * y * y);
    y = y * (1.5f - hx * y * y);
    y = y * (1.5f - hx * y * y);
    return y;
#endif
}

static inline float hsum(vf v) {
    float out = 0.0f;
    for (int j = 0; j < BW; j++) out += v[j];
    return out;
}

/* sum_e alpha[e] sqrt(c[e] + h[e]) */
static inline float root_sum(int64_t E, const float *alpha, const float *c, const float *h) {
    vf acc = {0};
    int64_t e = 0;
    for (; e + BW <= E; e += BW) {
        const vf x = load(c + e) + load(h + e);
        acc += load(alpha + e) * (x * rsqrt_newton_v(x));
    }
    float out = hsum(acc);
    for (; e < E; e++) {
        const float x = c[e] + h[e];
        out += alpha[e] * (x * rsqrt_newton(x));
    }
    return out;
}

/* c += sum_n s[n] H[n, :] */
static void cover(int64_t N, int64_t E, const float *H, const float *s, float *c) {
    int64_t e0 = 0;
    for (; e0 + BW <= E; e0 += BW) {
        vf a = load(c + e0);
        for (int64_t n = 0; n < N; n++) a += s[n] * load(H + n * E + e0);
        store(c + e0, a);
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t e = e0; e < E; e++) c[e] += s[n] * H[n * E + e];
}

/* One layer's backward pass over the features: adds into dH and dalpha, writes
 * dcn = sum_n dg[n] alpha/2 / max(sqrt(c + H[n]), sqrt(1e-3)). ha = alpha / 2. */
static void backward_features(int64_t N, int64_t E, const float *H, const float *c, const float *ha,
                              const float *dc, const float *dg, const float *s, float *dH, float *dalpha,
                              float *dcn) {
    int64_t e0 = 0;
    const vf floor_v = splat(FLOOR), inv_floor = splat(1.0f / FLOOR);
    for (; e0 + BW <= E; e0 += BW) {
        const vf ce = load(c + e0), he = load(ha + e0), dce = load(dc + e0);
        vf da = {0}, dn = {0};
        for (int64_t n = 0; n < N; n++) {
            const float d = dg[n];
            const vf x = ce + load(H + n * E + e0), y = rsqrt_newton_v(x), root = x * y;
            const vf t = d * he * vselect(root > floor_v, y, inv_floor);
            da += d * root;
            store(dH + n * E + e0, load(dH + n * E + e0) + t + s[n] * dce);
            dn += t;
        }
        store(dalpha + e0, load(dalpha + e0) + da);
        store(dcn + e0, dn);
    }
    for (int64_t e = e0; e < E; e++) {
        float da = 0.0f, dn = 0.0f;
        for (int64_t n = 0; n < N; n++) {
            const float x = c[e] + H[n * E + e], y = rsqrt_newton(x), root = x * y;
            const float t = dg[n] * ha[e] * (root > FLOOR ? y : 1.0f / FLOOR);
            da += dg[n] * root;
            dH[n * E + e] += t + s[n] * dc[e];
            dn += t;
        }
        dalpha[e] += da;
        dcn[e] = dn;
    }
}

/* Whether every H entry is finite and >= 0 and every beta entry finite (padding rows
 * too), as dgn._validation's checks ask; read just before the first layer reads H. */
static int inputs_in_range(int64_t N, int64_t E, const float *H, const float *beta) {
    const int64_t total = N * E;
    const vf zero = {0}, big = splat(FLT_MAX);
    vi ok = (vi){0} - 1;
    int64_t i = 0;
    for (; i + BW <= total; i += BW) {
        const vf v = load(H + i);
        ok &= (v >= zero) & (v <= big); /* false for NaN */
    }
    for (int j = 0; j < BW; j++)
        if (!ok[j]) return 0;
    for (; i < total; i++)
        if (!(H[i] >= 0.0f && H[i] <= FLT_MAX)) return 0;
    if (beta)
        for (int64_t n = 0; n < N; n++)
            if (!(fabsf(beta[n]) <= FLT_MAX)) return 0;
    return 1;
}

/* Returns 0, 1 when a layer's logits left float range (a tiny tau), or 2 when an entry of
 * H or beta is out of range (nothing is written then); on 1 or 2 the caller runs the
 * general path, which handles a tiny tau and reports bad entries. */
static int forward_one(int64_t N, int64_t E, int64_t K, float tau, const float *H, const float *beta,
                      const float *alpha, const uint8_t *valid, float *S, float *L, int64_t *P,
                      float *PG, uint8_t *OK, float *G, float *C, float *R, uint8_t *AV, float *c,
                      float *r, uint8_t *avail, float *g, const float *zeros) {
    if (!inputs_in_range(N, E, H, beta)) return 2;
    memset(c, 0, sizeof(float) * E);
    for (int64_t n = 0; n < N; n++) {
        r[n] = 1.0f;
        avail[n] = valid[n];
    }
    for (int64_t k = 0; k < K; k++) {
        float *s = S + k * N, *l = L + k * N;
        memcpy(C + k * E, c, sizeof(float) * E);
        memcpy(R + k * N, r, sizeof(float) * N);
        memcpy(AV + k * N, avail, N);
        /* sum_e alpha[e] sqrt(c[e]) through the gains' own root function, so that an all-zero
         * row gains exactly 0 */
        const float base = root_sum(E, alpha, c, zeros);
        for (int64_t n = 0; n < N; n++) {
            g[n] = root_sum(E, alpha, c, H + n * E) - base + (beta ? beta[n] : 0.0f);
            G[k * N + n] = valid[n] ? g[n] : 0.0f;
        }
        int64_t best = -1;
        float top = -INFINITY;
        for (int64_t n = 0; n < N; n++) {
            if (avail[n]) {
                l[n] = g[n] / tau + logf(r[n] > TINY ? r[n] : TINY);
                if (best < 0 || l[n] > top) {
                    top = l[n];
                    best = n;
                }
            } else {
                l[n] = -INFINITY;
            }
        }
        if (best < 0) { /* nothing left: an all-zero layer */
            memset(s, 0, sizeof(float) * N);
            P[k] = -1;
            PG[k] = 0.0f;
            OK[k] = 0;
            continue;
        }
        if (!isfinite(top)) return 1;
        float z = 0.0f;
        for (int64_t n = 0; n < N; n++) {
            s[n] = avail[n] ? expf(l[n] - top) : 0.0f;
            z += s[n];
        }
        const float inv_z = 1.0f / z;
        for (int64_t n = 0; n < N; n++) s[n] *= inv_z;
        P[k] = best;
        PG[k] = g[best];
        OK[k] = 1;
        for (int64_t n = 0; n < N; n++) r[n] -= s[n];
        cover(N, E, H, s, c);
        avail[best] = 0;
    }
    return 0;
}

/* dH (N, E) and dbeta (N) are written; dalpha (E) is accumulated into. dS, dL, dG (K, N)
 * and dPG (K) may be NULL (no gradient). Work space: dc, dcn, sqc, ha (E), dr, dg (N). */
static void backward_one(int64_t N, int64_t E, int64_t K, float tau, const float *H, const float *alpha,
                        const uint8_t *valid, const float *S, const float *C, const float *R,
                        const uint8_t *AV, const int64_t *P, const uint8_t *OK, const float *dS,
                        const float *dL, const float *dG, const float *dPG, float *dH, float *dbeta,
                        float *dalpha, float *dc, float *dcn, float *sqc, float *dr, float *dg, float *ha) {
    const float inv_tau = 1.0f / tau;
    memset(dH, 0, sizeof(float) * N * E);
    memset(dbeta, 0, sizeof(float) * N);
    memset(dc, 0, sizeof(float) * E);
    memset(dr, 0, sizeof(float) * N);
    for (int64_t k = K - 1; k >= 0; k--) {
        const float *s = S + k * N, *c = C + k * E, *r = R + k * N;
        const uint8_t *av = AV + k * N;
        /* ds = dS + H dc - dr, then the softmax's backward */
        float sd = 0.0f;
        for (int64_t n = 0; n < N; n++) {
            const float *h = H + n * E;
            float acc = 0.0f;
            for (int64_t e = 0; e < E; e++) acc += h[e] * dc[e];
            dg[n] = (dS ? dS[k * N + n] : 0.0f) + acc - dr[n]; /* ds for now */
            sd += s[n] * dg[n];
        }
        float sdg = 0.0f;
        for (int64_t n = 0; n < N; n++) {
            float dl = s[n] * (dg[n] - sd) + ((dL && av[n]) ? dL[k * N + n] : 0.0f);
            float d = dl * inv_tau;
            if (dG && valid[n]) d += dG[k * N + n];
            if (dPG && OK[k] && P[k] == n) d += dPG[k];
            if (r[n] >= TINY) dr[n] += dl / r[n]; /* clamp_min(r, 1e-30)'s gradient */
            dg[n] = d;
            dbeta[n] += d;
            sdg += d;
        }
        for (int64_t e = 0; e < E; e++) {
            sqc[e] = sqrtf(c[e]);
            dcn[e] = 0.0f;
            ha[e] = 0.5f * alpha[e];
        }
        backward_features(N, E, H, c, ha, dc, dg, s, dH, dalpha, dcn);
        for (int64_t e = 0; e < E; e++) {
            dalpha[e] -= sdg * sqc[e];
            dc[e] += dcn[e] - sdg * 0.5f * alpha[e] / (sqc[e] > FLOOR ? sqc[e] : FLOOR);
        }
    }
}

/* A batch of B problems, split over OpenMP threads when built with OpenMP (the runtime
 * torch itself uses, so no second pool competes for the cores). Layouts: H (B, N, E); beta,
 * valid (B, N); S, L, G, R, AV (B, K, N); P, PG, OK (B, K); C (B, K, E). beta may be NULL.
 * Returns the number of problems whose logits left float range (the outputs are then not
 * to be used), -2 where an H entry is negative or not finite or a beta entry not finite
 * (the outputs are not written), or -1 when out of memory. */
int64_t scmm_soft_forward(int64_t B, int64_t N, int64_t E, int64_t K, float tau, const float *H, const float *beta,
                          const float *alpha, const uint8_t *valid, float *S, float *L, int64_t *P, float *PG,
                          uint8_t *OK, float *G, float *C, float *R, uint8_t *AV) {
    int64_t bad = 0, wrong = 0;
#pragma omp parallel reduction(+ : bad, wrong)
    {
        /* c (E), r (N), g (N), zeros (E), then avail (N bytes) */
        float *work = calloc(1, sizeof(float) * (2 * E + 2 * N) + N);
        if (!work) bad = -B - 1;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            if (!work) continue;
            const int64_t kn = b * K * N;
            const int code = forward_one(N, E, K, tau, H + b * N * E, beta ? beta + b * N : NULL, alpha, valid + b * N,
                               S + kn, L + kn, P + b * K, PG + b * K, OK + b * K, G + kn, C + b * K * E, R + kn,
                               AV + kn, work, work + E, (uint8_t *)(work + 2 * E + 2 * N), work + E + N,
                               work + E + 2 * N);
            if (code == 2)
                wrong++;
            else
                bad += code;
        }
        free(work);
    }
    return bad < 0 ? -1 : wrong ? -2 : bad;
}

/* The backward pass of a batch (layouts as the forward's; dS, dL, dG (B, K, N) and dPG
 * (B, K) may be NULL). Writes dH (B, N, E), dbeta (B, N) and dalpha (E). Returns 0, or -1
 * when out of memory. */
int64_t scmm_soft_backward(int64_t B, int64_t N, int64_t E, int64_t K, float tau, const float *H,
                           const float *alpha, const uint8_t *valid, const float *S, const float *C,
                           const float *R, const uint8_t *AV, const int64_t *P, const uint8_t *OK,
                           const float *dS, const float *dL, const float *dG, const float *dPG, float *dH,
                           float *dbeta, float *dalpha) {
    int64_t failed = 0;
    /* each thread's share of dalpha, added up in thread order afterwards: the same bits
     * for the same number of threads */
    const int threads = max_threads();
    float *shares = calloc((size_t)threads * (size_t)E, sizeof(float));
    if (!shares) return -1;
#pragma omp parallel reduction(+ : failed)
    {
        float *work = malloc(sizeof(float) * (4 * E + 2 * N));
        float *da = shares + (size_t)thread_index() * (size_t)E;
        if (!work) failed = 1;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            if (!work) continue;
            const int64_t kn = b * K * N;
            backward_one(N, E, K, tau, H + b * N * E, alpha, valid + b * N, S + kn, C + b * K * E, R + kn, AV + kn,
                         P + b * K, OK + b * K, dS ? dS + kn : NULL, dL ? dL + kn : NULL, dG ? dG + kn : NULL,
                         dPG ? dPG + b * K : NULL, dH + b * N * E, dbeta + b * N, da, work, work + E,
                         work + 2 * E, work + 3 * E, work + 3 * E + N, work + 3 * E + 2 * N);
        }
        free(work);
    }
    memset(dalpha, 0, sizeof(float) * E);
    for (int t = 0; t < threads; t++)
        for (int64_t e = 0; e < E; e++) dalpha[e] += shares[(size_t)t * (size_t)E + e];
    free(shares);
    return failed ? -1 : 0;
}
