/* What the C kernels of dgn._kernels share: the OpenMP runtime's thread count and index
 * (1 and 0 in a build without OpenMP), and blocks of BW floats as GCC/Clang vector types
 * (the compiler maps them onto the machine's registers: one AVX-512 register, two AVX
 * ones, four NEON ones), loaded and stored without alignment requirements. */
#ifndef DGN_KERNEL_COMMON_H
#define DGN_KERNEL_COMMON_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
static inline int max_threads(void) { return omp_get_max_threads(); }
static inline int thread_index(void) { return omp_get_thread_num(); }
#else
static inline int max_threads(void) { return 1; }
static inline int thread_index(void) { return 0; }
#endif

#define BW 16
typedef float vf __attribute__((vector_size(4 * BW)));
typedef int32_t vi __attribute__((vector_size(4 * BW)));

static inline vf load(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store(float *p, vf v) { memcpy(p, &v, sizeof v); }
#endif
