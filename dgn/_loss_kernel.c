/* The layer-wise cross entropy of dgn.losses on float32 logits: each problem's K layers
 * in one pass for the loss and one for its gradient, where the PyTorch composition makes
 * some twenty passes over the (B, K, N) logits. Built with the other kernels into one
 * library by dgn._kernels; tests/test_kernels.py checks it against that composition.
 *
 * Layer k of a problem (logits l over N candidates, -inf where unavailable; gold g; open
 * set O_k = gold items not picked by layers before k; pick p_k = the given index, else
 * the first argmax of l, -1 when every l is -inf):
 *   loss    += sum_{v in O_k} (lse(l) - l[v])      (+inf for an open item at -inf)
 *   dl[u]    = d (|O_k| softmax(l)[u] - [u in O_k])  when some l is finite, else 0
 * A layer with no finite logit adds +inf when it has an open item, as log_softmax gives.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The finite maximum of row (N), its first index, and whether any entry is finite. */
static inline int row_max(int64_t N, const float *row, float *max, int64_t *at) {
    float m = -INFINITY;
    int64_t i = -1;
    for (int64_t v = 0; v < N; v++)
        if (row[v] > m) {
            m = row[v];
            i = v;
        }
    *max = m;
    *at = i;
    return i >= 0;
}

static inline float row_lse(int64_t N, const float *row, float m) {
    float s = 0.0f;
    for (int64_t v = 0; v < N; v++) s += expf(row[v] - m);
    return m + logf(s);
}

/* Whether an entry of L (n floats) is NaN or +inf, which dgn.losses refuses. */
static int out_of_range(int64_t n, const float *L) {
    int bad = 0;
    for (int64_t i = 0; i < n; i++) bad |= !(L[i] < INFINITY); /* true for NaN too */
    return bad;
}

/* One problem's layers (L: (K, N), gold: (N) bytes, open: N bytes of work space). With
 * loss not NULL: writes *loss and the picks used (the given picks_in, else each layer's
 * argmax), or returns 1 without them where an entry of L is NaN or +inf. With dL not NULL:
 * writes the gradient dL (K, N) of d * loss, the picks read from picks_in. */
static int problem(int64_t K, int64_t N, const float *L, const uint8_t *gold, const int64_t *picks_in,
                   int64_t *picks, float *loss, float d, float *dL, uint8_t *open) {
    if (loss && out_of_range(K * N, L)) return 1;
    memcpy(open, gold, (size_t)N);
    float total = 0.0f;
    for (int64_t k = 0; k < K; k++) {
        const float *row = L + k * N;
        float m;
        int64_t best;
        const int finite = row_max(N, row, &m, &best);
        const float lse = finite ? row_lse(N, row, m) : 0.0f;
        float count = 0.0f;
        for (int64_t v = 0; v < N; v++) count += open[v];
        if (loss) {
            if (finite) {
                for (int64_t v = 0; v < N; v++)
                    if (open[v]) total += lse - row[v];
            } else if (count > 0.0f) {
                total = INFINITY;
            }
        }
        if (dL) {
            float *out = dL + k * N;
            if (finite)
                for (int64_t v = 0; v < N; v++) out[v] = d * (count * expf(row[v] - lse) - (float)open[v]);
            else
                memset(out, 0, sizeof(float) * (size_t)N);
        }
        const int64_t pick = picks_in ? picks_in[k] : best;
        if (picks) picks[k] = pick;
        if (pick >= 0) open[pick] = 0;
    }
    if (loss) *loss = total;
    return 0;
}

/* A batch of B problems split over OpenMP threads; loss, picks (forward) or dloss, dL
 * (backward) NULL as problem() takes them. Returns 0, -2 where the forward found an entry
 * NaN or +inf, or -1 when out of memory. */
static int64_t batch(int64_t B, int64_t K, int64_t N, const float *L, const uint8_t *gold,
                     const int64_t *picks_in, int64_t *picks, float *loss, const float *dloss, float *dL) {
    int64_t failed = 0, wrong = 0;
#pragma omp parallel reduction(+ : failed, wrong)
    {
        uint8_t *open = malloc((size_t)N + 1);
        if (!open) failed = 1;
#pragma omp for schedule(static)
        for (int64_t b = 0; b < B; b++) {
            if (!open) continue;
            wrong += problem(K, N, L + b * K * N, gold + b * N, picks_in ? picks_in + b * K : NULL,
                    picks ? picks + b * K : NULL, loss ? loss + b : NULL, dloss ? dloss[b] : 0.0f,
                    dL ? dL + b * K * N : NULL, open);
        }
        free(open);
    }
    return failed ? -1 : wrong ? -2 : 0;
}

/* Loss of each of B problems (L: (B, K, N); gold: (B, N) bytes; picks_in: (B, K) or NULL
 * for each layer's argmax). Writes loss (B) and the picks used, picks (B, K). Returns 0, -2
 * where an entry of L is NaN or +inf (the outputs are then not to be used), or -1 when out
 * of memory. */
int64_t layerwise_ce_forward(int64_t B, int64_t K, int64_t N, const float *L, const uint8_t *gold,
                             const int64_t *picks_in, int64_t *picks, float *loss) {
    return batch(B, K, N, L, gold, picks_in, picks, loss, NULL, NULL);
}

/* The gradient: dL (B, K, N) from dloss (B) and the picks of the forward pass. Returns 0,
 * or -1 when out of memory. */
int64_t layerwise_ce_backward(int64_t B, int64_t K, int64_t N, const float *L, const uint8_t *gold,
                              const int64_t *picks, const float *dloss, float *dL) {
    return batch(B, K, N, L, gold, picks, NULL, NULL, dloss, dL);
}
