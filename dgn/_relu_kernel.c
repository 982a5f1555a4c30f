/* The encoder's ReLU layers, backward: one pass over a layer's (R, C) output gradient that
 * applies the ReLU's mask, sums the bias gradient and writes the masked gradient in the
 * layout each following matrix product wants (rows for the input gradient, transposed for
 * the weight gradient), where PyTorch's eager path makes a pass for the mask, one for the
 * bias sum and lets the weight-gradient product read a transposed operand. The last layer
 * may carry a linear head z = H w + b (the DGN's modular term): its gradient u = dL/dz
 * enters the same pass as the rank-one term u w^T, and the head's weight gradient H^T u is
 * summed there too. Built with _scmm_kernel.c into one library by dgn._kernels;
 * tests/test_kernels.py checks it against autograd through nn.Linear and nn.ReLU.
 *
 *   Z[r, c]     = 0 if Y[r, c] <= 0 else G[r, c] + u[r] w[c]  (Y: the ReLU's output;
 *                                                              u, w: the head, or none)
 *   out         = Z          (R, C), when out is not NULL (it may be G itself)
 *   outT        = Z^T        (C, R), when outT is not NULL
 *   db[c]       = sum_r Z[r, c]
 *   dw[c]       = sum_r Y[r, c] u[r]                           (with a head)
 */
#include "_kernel_common.h"

/* A tile is BW x BW floats (_kernel_common.h): BW rows of BW columns, one vector a row. */

/* Write the transpose of the tile v (row i = v[i]) at outT[j * R], j = 0..BW-1. */
static inline void store_transposed(vf *v, float *outT, int64_t R) {
#if defined(__AVX512F__)
    __m512 r[BW], t[BW];
    memcpy(r, v, sizeof r);
    /* interleave pairs of rows, then pairs of pairs: r[4i + j] holds, in its 128-bit lane
     * L, column 4L + j of rows 4i .. 4i + 3 */
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    /* gather lane L of the four row groups: column 4L + j */
    for (int j = 0; j < 4; j++) {
        const __m512 ab02 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        const __m512 ab13 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        const __m512 cd02 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        const __m512 cd13 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
        _mm512_storeu_ps(outT + (int64_t)j * R, _mm512_shuffle_f32x4(ab02, cd02, 0x88));
        _mm512_storeu_ps(outT + (int64_t)(8 + j) * R, _mm512_shuffle_f32x4(ab02, cd02, 0xdd));
        _mm512_storeu_ps(outT + (int64_t)(4 + j) * R, _mm512_shuffle_f32x4(ab13, cd13, 0x88));
        _mm512_storeu_ps(outT + (int64_t)(12 + j) * R, _mm512_shuffle_f32x4(ab13, cd13, 0xdd));
    }
#else
    float tile[BW][BW];
    memcpy(tile, v, sizeof tile);
    for (int j = 0; j < BW; j++) {
        vf col;
        for (int i = 0; i < BW; i++) col[i] = tile[i][j];
        store(outT + (int64_t)j * R, col);
    }
#endif
}

/* One element (the edges of the matrix, outside whole tiles). */
static inline void relu_grad_one(int64_t R, int64_t C, int64_t r, int64_t c, const float *G, const float *Y,
                                 const float *u, const float *w, float *out, float *outT, float *db, float *dw) {
    const float y = Y[r * C + c];
    const float g = u ? G[r * C + c] + u[r] * w[c] : G[r * C + c];
    const float z = y <= 0.0f ? 0.0f : g; /* a NaN output passes the gradient, as in torch */
    db[c] += z;
    if (u) dw[c] += y * u[r];
    if (out) out[r * C + c] = z;
    if (outT) outT[c * R + r] = z;
}

/* Rows are split over the OpenMP threads (torch's runtime) in blocks of BW; each thread
 * sums its bias (and head) gradient apart and the shares are added in thread order, so the
 * same number of threads gives the same bits. u, w and dw are NULL without a head. Returns
 * 0, or -1 when out of memory. */
int64_t relu_backward(int64_t R, int64_t C, const float *G, const float *Y, const float *u, const float *w,
                      float *out, float *outT, float *db, float *dw) {
    const int threads = max_threads();
    float *shares = calloc((size_t)threads * (size_t)C * 2, sizeof(float));
    if (!shares) return -1;
    const int64_t blocks = (R + BW - 1) / BW;
#pragma omp parallel
    {
        float *share = shares + (size_t)thread_index() * (size_t)C * 2;
        float *wshare = share + C;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t r0 = b * BW;
            if (r0 + BW > R) { /* the last rows */
                for (int64_t r = r0; r < R; r++)
                    for (int64_t c = 0; c < C; c++) relu_grad_one(R, C, r, c, G, Y, u, w, out, outT, share, wshare);
                continue;
            }
            int64_t c0 = 0;
            for (; c0 + BW <= C; c0 += BW) {
                vf z[BW];
                vf sum = load(share + c0);
                if (u) {
                    const vf wv = load(w + c0);
                    vf wsum = load(wshare + c0);
                    for (int i = 0; i < BW; i++) {
                        const int64_t at = (r0 + i) * C + c0;
                        const vf y = load(Y + at);
                        const vf g = load(G + at) + u[r0 + i] * wv;
                        z[i] = (vf)(~(y <= 0.0f) & (vi)g);
                        sum += z[i];
                        wsum += y * u[r0 + i];
                        if (out) store(out + at, z[i]);
                    }
                    store(wshare + c0, wsum);
                } else {
                    for (int i = 0; i < BW; i++) {
                        const int64_t at = (r0 + i) * C + c0;
                        z[i] = (vf)(~(load(Y + at) <= 0.0f) & (vi)load(G + at));
                        sum += z[i];
                        if (out) store(out + at, z[i]);
                    }
                }
                store(share + c0, sum);
                if (outT) store_transposed(z, outT + c0 * R + r0, R);
            }
            for (int64_t r = r0; r < r0 + BW; r++) /* the last columns */
                for (int64_t c = c0; c < C; c++) relu_grad_one(R, C, r, c, G, Y, u, w, out, outT, share, wshare);
        }
    }
    memset(db, 0, sizeof(float) * (size_t)C);
    if (dw) memset(dw, 0, sizeof(float) * (size_t)C);
    for (int t = 0; t < threads; t++)
        for (int64_t c = 0; c < C; c++) {
            db[c] += shares[(size_t)t * (size_t)C * 2 + c];
            if (dw) dw[c] += shares[(size_t)t * (size_t)C * 2 + C + c];
        }
    free(shares);
    return 0;
}

/* The last layer's output H (R, C) in place: rows r where valid[r] is 0 zeroed (valid
 * NULL: none); with a head (w not NULL), z[r] = b + sum_c H[r, c] w[c] after the zeroing. */
void last_layer(int64_t R, int64_t C, float *H, const uint8_t *valid, const float *w, float b, float *z) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < R; r++) {
        float *h = H + r * C;
        if (valid && !valid[r]) memset(h, 0, sizeof(float) * (size_t)C);
        if (!w) continue;
        vf acc = {0};
        int64_t c = 0;
        for (; c + BW <= C; c += BW) acc += load(h + c) * load(w + c);
        float dot = 0.0f;
        for (int j = 0; j < BW; j++) dot += acc[j];
        for (; c < C; c++) dot += h[c] * w[c];
        z[r] = b + dot;
    }
}

/* sum_i sum_j x_i[j]^2 over n float arrays (x_i at ptrs[i], lens[i] floats), in one serial
 * pass: squares summed in float vectors over blocks of at most 4096 floats, the blocks'
 * sums in double. Finite only where every entry is finite (NaN and inf carry through);
 * large finite entries can also give inf, as a square or a block's float sum leaves float
 * range (from 1.8e19 in size). The callers treat a non-finite result as "look closer":
 * the encoder's check of its weights declines the fused path, and dgn.train.clip_gradients
 * hands over to PyTorch. */
double sum_squares(int64_t n, const float *const *ptrs, const int64_t *lens) {
    double total = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const float *x = ptrs[i];
        for (int64_t start = 0; start < lens[i]; start += 4096) {
            int64_t end = start + 4096 < lens[i] ? start + 4096 : lens[i];
            vf acc = {0};
            int64_t j = start;
            for (; j + BW <= end; j += BW) {
                vf v = load(x + j);
                acc += v * v;
            }
            float block = 0.0f;
            for (int k = 0; k < BW; k++) block += acc[k];
            for (; j < end; j++) block += x[j] * x[j];
            total += (double)block;
        }
    }
    return total;
}
