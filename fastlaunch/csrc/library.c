/* LIBCALL routines: batched BLAS gemm (gemv for a matrix-vector product) and small dense LAPACK (inv, solve, det, slogdet,
 * cholesky, eigh, svd, lstsq) over strided row-major operands.  The BLAS/LAPACK entry points are
 * scipy.linalg.cython_blas/cython_lapack's (Fortran LP64 conventions: every argument by
 * pointer, column-major), registered by name from Python (backends/cpu.py) before a program
 * that uses them is linked.  A row-major matrix is its transpose in column-major, which
 * every routine below uses instead of copying where it can (gemm computes C^T = B^T A^T).
 * Routines run without the GIL and return a status (library.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "library.h"

typedef void (*gemm_s)(char *, char *, int *, int *, int *, float *, float *, int *, float *,
                       int *, float *, float *, int *);
typedef void (*gemm_d)(char *, char *, int *, int *, int *, double *, double *, int *,
                       double *, int *, double *, double *, int *);
typedef void (*gemv_t)(char *, int *, int *, void *, void *, int *, void *, int *, void *,
                       void *, int *);
typedef void (*getrf_t)(int *, int *, void *, int *, int *, int *);
typedef void (*gesv_t)(int *, int *, void *, int *, int *, void *, int *, int *);
typedef void (*potrf_t)(char *, int *, void *, int *, int *);
typedef void (*syevd_t)(char *, char *, int *, void *, int *, void *, void *, int *, int *,
                        int *, int *);
typedef void (*gesdd_t)(char *, int *, int *, void *, int *, void *, void *, int *, void *,
                        int *, void *, int *, int *, int *);
typedef void (*gelsd_t)(int *, int *, int *, void *, int *, void *, int *, void *, void *,
                        int *, void *, int *, int *, int *);

/* entry points by name; index i*2 + (double) */
enum { E_GEMM, E_GETRF, E_GESV, E_POTRF, E_SYEVD, E_GESDD, E_GELSD, E_GEMV, E_COUNT };
static const char *entry_names[E_COUNT][2] = {
    {"sgemm", "dgemm"}, {"sgetrf", "dgetrf"}, {"sgesv", "dgesv"},
    {"spotrf", "dpotrf"}, {"ssyevd", "dsyevd"}, {"sgesdd", "dgesdd"}, {"sgelsd", "dgelsd"},
    {"sgemv", "dgemv"}};
static void *entries[E_COUNT][2];

/* ILP64 entry points (64-bit integers: NumPy's bundled scipy-openblas64), reached through
 * adapters with the LP64 signatures the routines call; Fortran's hidden CHARACTER lengths
 * are passed (1), which the C-implemented entries ignore and the Fortran ones expect. */
static void *ilp[E_COUNT][2];
typedef int64_t i64;

#define ADAPT_GEMM(D, T)                                                                     \
static void gemm_adapt_##D(char *ta, char *tb, int *m, int *n, int *k, T *al, T *a, int *lda, \
                           T *b, int *ldb, T *be, T *c, int *ldc) {                          \
    i64 M = *m, N = *n, K = *k, LA = *lda, LB = *ldb, LC = *ldc;                             \
    ((void (*)(char *, char *, i64 *, i64 *, i64 *, T *, T *, i64 *, T *, i64 *, T *, T *,   \
               i64 *, size_t, size_t))ilp[E_GEMM][D])(ta, tb, &M, &N, &K, al, a, &LA, b,     \
                                                      &LB, be, c, &LC, 1, 1);                \
}                                                                                            \
static void getrf_adapt_##D(int *m, int *n, void *a, int *lda, int *ipiv, int *info) {      \
    i64 M = *m, N = *n, LA = *lda, INFO = 0, small[64], r = M < N ? M : N;                   \
    i64 *p = r <= 64 ? small : malloc(sizeof(i64) * (size_t)r);                             \
    if (!p) { *info = -1000; return; }                                                       \
    ((void (*)(i64 *, i64 *, void *, i64 *, i64 *, i64 *))ilp[E_GETRF][D])(&M, &N, a, &LA,   \
                                                                           p, &INFO);        \
    for (i64 i = 0; i < r; i++) ipiv[i] = (int)p[i];                                         \
    *info = (int)INFO;                                                                       \
    if (p != small) free(p);                                                                 \
}                                                                                            \
static void gesv_adapt_##D(int *n, int *nrhs, void *a, int *lda, int *ipiv, void *b,        \
                           int *ldb, int *info) {                                            \
    i64 N = *n, R = *nrhs, LA = *lda, LB = *ldb, INFO = 0, small[64];                        \
    i64 *p = N <= 64 ? small : malloc(sizeof(i64) * (size_t)N);                              \
    if (!p) { *info = -1000; return; }                                                       \
    ((void (*)(i64 *, i64 *, void *, i64 *, i64 *, void *, i64 *, i64 *))ilp[E_GESV][D])(    \
        &N, &R, a, &LA, p, b, &LB, &INFO);                                                   \
    for (i64 i = 0; i < N; i++) ipiv[i] = (int)p[i];                                         \
    *info = (int)INFO;                                                                       \
    if (p != small) free(p);                                                                 \
}                                                                                            \
static void potrf_adapt_##D(char *uplo, int *n, void *a, int *lda, int *info) {             \
    i64 N = *n, LA = *lda, INFO = 0;                                                         \
    ((void (*)(char *, i64 *, void *, i64 *, i64 *, size_t))ilp[E_POTRF][D])(uplo, &N, a,    \
                                                                             &LA, &INFO, 1); \
    *info = (int)INFO;                                                                       \
}                                                                                            \
static void syevd_adapt_##D(char *jobz, char *uplo, int *n, void *a, int *lda, void *w,     \
                            void *work, int *lwork, int *iwork, int *liwork, int *info) {    \
    i64 N = *n, LA = *lda, LW = *lwork, LIW = *liwork, INFO = 0, small[64];                  \
    i64 cnt = LIW > 0 ? LIW : 1;                                                             \
    i64 *iw = cnt <= 64 ? small : malloc(sizeof(i64) * (size_t)cnt);                        \
    if (!iw) { *info = -1000; return; }                                                      \
    ((void (*)(char *, char *, i64 *, void *, i64 *, void *, void *, i64 *, i64 *, i64 *,    \
               i64 *, size_t, size_t))ilp[E_SYEVD][D])(jobz, uplo, &N, a, &LA, w, work, &LW, \
                                                       iw, &LIW, &INFO, 1, 1);               \
    if (*lwork == -1 || *liwork == -1) iwork[0] = (int)iw[0];                                \
    *info = (int)INFO;                                                                       \
    if (iw != small) free(iw);                                                               \
}                                                                                            \
/* gesdd, gelsd: the routines allocate iwork with 64-bit entries (IWORK64 below), which      \
 * either convention can use in place: no copy, no allocation per matrix */                  \
static void gesdd_adapt_##D(char *jobz, int *m, int *n, void *a, int *lda, void *s, void *u, \
                            int *ldu, void *vt, int *ldvt, void *work, int *lwork,          \
                            int *iwork, int *info) {                                         \
    i64 M = *m, N = *n, LA = *lda, LU = *ldu, LV = *ldvt, LW = *lwork, INFO = 0;             \
    ((void (*)(char *, i64 *, i64 *, void *, i64 *, void *, void *, i64 *, void *, i64 *,    \
               void *, i64 *, i64 *, i64 *, size_t))ilp[E_GESDD][D])(                        \
        jobz, &M, &N, a, &LA, s, u, &LU, vt, &LV, work, &LW, (i64 *)(void *)iwork, &INFO, 1);\
    *info = (int)INFO;                                                                       \
}                                                                                            \
static void gelsd_adapt_##D(int *m, int *n, int *nrhs, void *a, int *lda, void *b, int *ldb, \
                            void *s, void *rcond, int *rank, void *work, int *lwork,         \
                            int *iwork, int *info) {                                         \
    /* a workspace query (lwork -1) returns liwork in iwork[0], an int for the caller */      \
    i64 M = *m, N = *n, R = *nrhs, LA = *lda, LB = *ldb, RANK = 0, LW = *lwork, INFO = 0;    \
    i64 q = 0, *iw = *lwork == -1 ? &q : (i64 *)(void *)iwork;                               \
    ((void (*)(i64 *, i64 *, i64 *, void *, i64 *, void *, i64 *, void *, void *, i64 *,     \
               void *, i64 *, i64 *, i64 *))ilp[E_GELSD][D])(                                \
        &M, &N, &R, a, &LA, b, &LB, s, rcond, &RANK, work, &LW, iw, &INFO);                  \
    if (*lwork == -1) iwork[0] = (int)q;                                                     \
    *rank = (int)RANK;                                                                       \
    *info = (int)INFO;                                                                       \
}
ADAPT_GEMM(0, float)
ADAPT_GEMM(1, double)

#define ADAPT_GEMV(D)                                                                        \
static void gemv_adapt_##D(char *t, int *m, int *n, void *al, void *a, int *lda, void *x,    \
                           int *incx, void *be, void *y, int *incy) {                       \
    i64 M = *m, N = *n, LA = *lda, IX = *incx, IY = *incy;                                   \
    ((void (*)(char *, i64 *, i64 *, void *, void *, i64 *, void *, i64 *, void *, void *,   \
               i64 *, size_t))ilp[E_GEMV][D])(t, &M, &N, al, a, &LA, x, &IX, be, y, &IY, 1);   \
}
ADAPT_GEMV(0)
ADAPT_GEMV(1)

static void *adapters[E_COUNT][2] = {
    {(void *)gemm_adapt_0, (void *)gemm_adapt_1}, {(void *)getrf_adapt_0, (void *)getrf_adapt_1},
    {(void *)gesv_adapt_0, (void *)gesv_adapt_1}, {(void *)potrf_adapt_0, (void *)potrf_adapt_1},
    {(void *)syevd_adapt_0, (void *)syevd_adapt_1}, {(void *)gesdd_adapt_0, (void *)gesdd_adapt_1},
    {(void *)gelsd_adapt_0, (void *)gelsd_adapt_1}, {(void *)gemv_adapt_0, (void *)gemv_adapt_1}};

/* name: the LP64 name (sgemm...); ilp64: fn takes 64-bit integers */
int fl_library_register(const char *name, void *fn, int ilp64) {
    for (int e = 0; e < E_COUNT; e++)
        for (int d = 0; d < 2; d++)
            if (strcmp(entry_names[e][d], name) == 0) {
                if (ilp64) {
                    ilp[e][d] = fn;
                    entries[e][d] = adapters[e][d];
                } else {
                    entries[e][d] = fn;
                }
                return 0;
            }
    return -1;
}

#define OP_B1 0
#define OP_B2 1
#define OP_M 2
#define OP_N 3
#define OP_K 4
#define ARR(a) (5 + 6 * (a))

typedef struct {
    char *base;       /* element 0 of batch item (0, 0) */
    int64_t sb1, sb2, s0, s1;
} arr_t;

static arr_t arr(const int64_t *ops, const int64_t *slots, int a, int64_t itemsize) {
    const int64_t *d = ops + ARR(a);
    arr_t r;
    r.base = d[0] < 0 ? NULL : (char *)(intptr_t)slots[d[0]] + d[1] * itemsize;
    r.sb1 = d[2] * itemsize;
    r.sb2 = d[3] * itemsize;
    r.s0 = d[4];
    r.s1 = d[5];
    return r;
}

static inline char *item(const arr_t *a, int64_t i1, int64_t i2) {
    return a->base + i1 * a->sb1 + i2 * a->sb2;
}

/* A row-major r x c matrix with element strides (s0, s1), described for BLAS as its
 * transpose (c x r, column-major): trans 'N' with ld = s0 when rows are contiguous, 'T' with
 * ld = s1 when columns are.  Strides of a dimension of size 1 are never used.  The same rule
 * is in backends/cpu_schedule.py (blas_layout), which only emits layouts this accepts. */
static int blas_layout(int64_t r, int64_t c, int64_t s0, int64_t s1, char *t, int *ld) {
    if (c <= 1) s1 = 1;
    if (r <= 1) s0 = (s1 == 1) ? (c > 1 ? c : 1) : 1;
    if (s1 == 1 && s0 >= (c > 1 ? c : 1) && s0 <= INT32_MAX) {
        *t = 'N';
        *ld = (int)s0;
        return 0;
    }
    if (s0 == 1 && s1 >= (r > 1 ? r : 1) && s1 <= INT32_MAX) {
        *t = 'T';
        *ld = (int)s1;
        return 0;
    }
    return -1;
}

#define FITS(x) ((x) >= 0 && (x) <= INT32_MAX)

/* A product with one row or one column is a matrix-vector product: BLAS gemv (one pass over
 * the matrix, where gemm with n = 1 packs it first).  With C^T = B^T A^T as for gemm: for
 * n = 1, c = A b, the matrix A described as for gemm (ta, lda) and b, c as vectors with their
 * element strides; for m = 1, c^T = B^T a^T, on B. */
#define GEMV(NAME, T, IDX)                                                                    \
static int gemv_##NAME(int64_t b1, int64_t b2, int64_t m, int64_t n, int64_t k, arr_t *A,    \
                       arr_t *B, arr_t *C, char ta, int lda, char tb, int ldb) {             \
    gemv_t f = (gemv_t)entries[E_GEMV][IDX];                                                 \
    T one = 1, zero = 0;                                                                     \
    int ik = (int)k, rows, cols, incv, incc;                                                 \
    char t;                                                                                  \
    arr_t *mat, *vec;                                                                        \
    if (n == 1) {          /* A (m x k) as column-major: k x m ('N') or m x k ('T') */        \
        mat = A; vec = B; incv = (int)B->s0; incc = (int)C->s0;                              \
        t = ta == 'N' ? 'T' : 'N'; rows = ta == 'N' ? ik : (int)m;                           \
        cols = ta == 'N' ? (int)m : ik;                                                      \
    } else {               /* B (k x n) as column-major: n x k ('N') or k x n ('T') */        \
        mat = B; vec = A; incv = (int)A->s1; incc = (int)C->s1;                              \
        t = tb == 'N' ? 'N' : 'T'; rows = tb == 'N' ? (int)n : ik;                           \
        cols = tb == 'N' ? ik : (int)n;                                                      \
        lda = ldb;                                                                           \
    }                                                                                        \
    if (incv < 1 || incc < 1 || (n == 1 ? B->s0 : A->s1) > INT32_MAX ||                      \
        (n == 1 ? C->s0 : C->s1) > INT32_MAX) return -1;                                     \
    for (int64_t i1 = 0; i1 < b1; i1++)                                                      \
        for (int64_t i2 = 0; i2 < b2; i2++)                                                  \
            f(&t, &rows, &cols, &one, item(mat, i1, i2), &lda, item(vec, i1, i2), &incv,     \
              &zero, item(C, i1, i2), &incc);                                                \
    return 0;                                                                                \
}
GEMV(gemm_f32, float, 0)
GEMV(gemm_f64, double, 1)

#define GEMM(NAME, T, FN, IDX)                                                                \
static int NAME(const int64_t *ops, const int64_t *slots) {                                 \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M], n = ops[OP_N], k = ops[OP_K];   \
    arr_t A = arr(ops, slots, 0, sizeof(T)), B = arr(ops, slots, 1, sizeof(T));              \
    arr_t C = arr(ops, slots, 2, sizeof(T));                                                 \
    char ta, tb, tc;                                                                         \
    int lda, ldb, ldc, im = (int)m, in = (int)n, ik = (int)k;                                \
    T one = 1, zero = 0;                                                                     \
    FN f = (FN)entries[E_GEMM][IDX];                                                         \
    if (b1 == 0 || b2 == 0 || m == 0 || n == 0) return 0;                                    \
    if (!FITS(m) || !FITS(n) || !FITS(k) || f == NULL) return -1;                            \
    if (blas_layout(m, k, A.s0, A.s1, &ta, &lda) || blas_layout(k, n, B.s0, B.s1, &tb, &ldb) \
        || blas_layout(m, n, C.s0, C.s1, &tc, &ldc) || tc != 'N') return -1;                 \
    if ((n == 1 || m == 1) && k > 1 && entries[E_GEMV][IDX] != NULL)                          \
        return gemv_##NAME(b1, b2, m, n, k, &A, &B, &C, ta, lda, tb, ldb);                    \
    for (int64_t i1 = 0; i1 < b1; i1++)                                                      \
        for (int64_t i2 = 0; i2 < b2; i2++)                                                  \
            f(&tb, &ta, &in, &im, &ik, &one, (T *)item(&B, i1, i2), &ldb,                    \
              (T *)item(&A, i1, i2), &lda, &zero, (T *)item(&C, i1, i2), &ldc);              \
    return 0;                                                                                \
}
GEMM(gemm_f32, float, gemm_s, 0)
GEMM(gemm_f64, double, gemm_d, 1)

/* copy a strided n x c matrix into a dense row-major one (dst[i*c + j]) and back */
#define COPIES(T)                                                                            \
static void load_##T(T *dst, const char *src, int64_t r, int64_t c, int64_t s0, int64_t s1) { \
    const T *p = (const T *)src;                                                             \
    for (int64_t i = 0; i < r; i++)                                                          \
        for (int64_t j = 0; j < c; j++) dst[i * c + j] = p[i * s0 + j * s1];                 \
}                                                                                            \
static void store_##T(char *dst, const T *src, int64_t r, int64_t c, int64_t s0, int64_t s1) { \
    T *p = (T *)dst;                                                                         \
    for (int64_t i = 0; i < r; i++)                                                          \
        for (int64_t j = 0; j < c; j++) p[i * s0 + j * s1] = src[i * c + j];                 \
}
COPIES(float)
COPIES(double)

/* Small matrices (m <= SMALL_M): an LU factorisation with partial pivoting written out here
 * (LAPACK's getf2: the first largest |pivot|, rows scaled by its reciprocal), because a
 * LAPACK call per 4x4 matrix costs more than the arithmetic.  w is dense row-major m x m;
 * piv[k] = the row swapped with k; returns 0 or k+1 for the first exactly zero pivot (the
 * factorisation goes on, as LAPACK's). */
#define SMALL_M 16
#define SMALL(T, SUFFIX)                                                                     \
static int small_lu_##SUFFIX(T *w, int64_t m, int *piv) {                                    \
    int info = 0;                                                                            \
    for (int64_t k = 0; k < m; k++) {                                                        \
        int64_t p = k;                                                                       \
        T best = w[k * m + k] < 0 ? -w[k * m + k] : w[k * m + k];                            \
        for (int64_t i = k + 1; i < m; i++) {                                                \
            T v = w[i * m + k] < 0 ? -w[i * m + k] : w[i * m + k];                           \
            if (v > best) { best = v; p = i; }                                               \
        }                                                                                    \
        piv[k] = (int)p;                                                                     \
        if (w[p * m + k] == 0) { if (!info) info = (int)k + 1; continue; }                   \
        if (p != k)                                                                          \
            for (int64_t j = 0; j < m; j++) {                                                \
                T t = w[k * m + j]; w[k * m + j] = w[p * m + j]; w[p * m + j] = t;           \
            }                                                                                \
        T r = 1 / w[k * m + k];                                                              \
        for (int64_t i = k + 1; i < m; i++) {                                                \
            T l = w[i * m + k] * r;                                                          \
            w[i * m + k] = l;                                                                \
            for (int64_t j = k + 1; j < m; j++) w[i * m + j] -= l * w[k * m + j];            \
        }                                                                                    \
    }                                                                                        \
    return info;                                                                             \
}                                                                                            \
/* x (dense row-major m x r) <- A^-1 x from small_lu's factors */                            \
static void small_solve_##SUFFIX(const T *w, const int *piv, int64_t m, T *x, int64_t r) {   \
    for (int64_t k = 0; k < m; k++)                                                          \
        if (piv[k] != k)                                                                     \
            for (int64_t j = 0; j < r; j++) {                                                \
                T t = x[k * r + j]; x[k * r + j] = x[piv[k] * r + j]; x[piv[k] * r + j] = t; \
            }                                                                                \
    for (int64_t i = 1; i < m; i++)                                                          \
        for (int64_t k = 0; k < i; k++) {                                                    \
            T l = w[i * m + k];                                                              \
            for (int64_t j = 0; j < r; j++) x[i * r + j] -= l * x[k * r + j];                \
        }                                                                                    \
    for (int64_t i = m - 1; i >= 0; i--) {                                                   \
        for (int64_t k = i + 1; k < m; k++) {                                                \
            T u = w[i * m + k];                                                              \
            for (int64_t j = 0; j < r; j++) x[i * r + j] -= u * x[k * r + j];                \
        }                                                                                    \
        for (int64_t j = 0; j < r; j++) x[i * r + j] /= w[i * m + i];                        \
    }                                                                                        \
}
SMALL(float, f32)
SMALL(double, f64)

/* the LAPACK routines: one batch item at a time through dense scratch (LAPACK overwrites its
 * input; the arguments stay untouched) */
#define LAPACK(T, IDX, SUFFIX)                                                               \
static int inv_##SUFFIX(const int64_t *ops, const int64_t *slots) {                         \
    /* as NumPy's inv: gesv against the identity (not getri), for the same rounding */       \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M];                                 \
    arr_t A = arr(ops, slots, 0, sizeof(T)), X = arr(ops, slots, 1, sizeof(T));              \
    gesv_t gesv = (gesv_t)entries[E_GESV][IDX];                                              \
    int n = (int)m, info = 0, rc = 0;                                                        \
    if (b1 == 0 || b2 == 0 || m == 0) return 0;                                              \
    if (!FITS(m) || m > 46340 || !gesv) return -1;                                           \
    T *w = malloc(sizeof(T) * (size_t)(2 * m * m));                                          \
    int *piv = malloc(sizeof(int) * (size_t)m);                                              \
    if (!w || !piv) { free(w); free(piv); return -2; }                                       \
    for (int64_t i1 = 0; i1 < b1 && !rc; i1++)                                               \
        for (int64_t i2 = 0; i2 < b2 && !rc; i2++) {                                         \
            memset(w + m * m, 0, sizeof(T) * (size_t)(m * m));                               \
            if (m <= SMALL_M) {                                                              \
                for (int64_t i = 0; i < m; i++) w[m * m + i * m + i] = 1;                    \
                load_##T(w, item(&A, i1, i2), m, m, A.s0, A.s1);                             \
                if ((info = small_lu_##SUFFIX(w, m, piv)) > 0) { rc = info; break; }         \
                small_solve_##SUFFIX(w, piv, m, w + m * m, m);                               \
                store_##T(item(&X, i1, i2), w + m * m, m, m, X.s0, X.s1);                    \
                continue;                                                                    \
            }                                                                                \
            load_##T(w, item(&A, i1, i2), m, m, A.s1, A.s0);                                 \
            for (int64_t i = 0; i < m; i++) w[m * m + i * m + i] = 1;                        \
            gesv(&n, &n, w, &n, piv, w + m * m, &n, &info);                                  \
            if (info != 0) { rc = info > 0 ? info : -2; break; }                                              \
            store_##T(item(&X, i1, i2), w + m * m, m, m, X.s1, X.s0);                        \
        }                                                                                    \
    free(w); free(piv);                                                                      \
    return rc;                                                                               \
}                                                                                            \
static int solve_##SUFFIX(const int64_t *ops, const int64_t *slots) {                       \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M], r = ops[OP_N];                  \
    arr_t A = arr(ops, slots, 0, sizeof(T)), B = arr(ops, slots, 1, sizeof(T));              \
    arr_t X = arr(ops, slots, 2, sizeof(T));                                                 \
    gesv_t gesv = (gesv_t)entries[E_GESV][IDX];                                              \
    int n = (int)m, nrhs = (int)r, info = 0, rc = 0;                                         \
    if (b1 == 0 || b2 == 0 || m == 0 || r == 0) return 0;                                    \
    if (!FITS(m) || !FITS(r) || m > 46340 || !gesv) return -1;                               \
    T *w = malloc(sizeof(T) * (size_t)(m * m + m * r));                                      \
    int *piv = malloc(sizeof(int) * (size_t)m);                                              \
    if (!w || !piv) { free(w); free(piv); return -2; }                                       \
    for (int64_t i1 = 0; i1 < b1 && !rc; i1++)                                               \
        for (int64_t i2 = 0; i2 < b2 && !rc; i2++) {                                         \
            if (m <= SMALL_M) {                                                              \
                load_##T(w, item(&A, i1, i2), m, m, A.s0, A.s1);                             \
                load_##T(w + m * m, item(&B, i1, i2), m, r, B.s0, B.s1);                     \
                if ((info = small_lu_##SUFFIX(w, m, piv)) > 0) { rc = info; break; }         \
                small_solve_##SUFFIX(w, piv, m, w + m * m, r);                               \
                store_##T(item(&X, i1, i2), w + m * m, m, r, X.s0, X.s1);                    \
                continue;                                                                    \
            }                                                                                \
            /* column-major copies: A's (i, j) at i + j*m, B's at i + j*m */                 \
            load_##T(w, item(&A, i1, i2), m, m, A.s1, A.s0);                                 \
            load_##T(w + m * m, item(&B, i1, i2), r, m, B.s1, B.s0);                         \
            gesv(&n, &nrhs, w, &n, piv, w + m * m, &n, &info);                               \
            if (info != 0) { rc = info > 0 ? info : -2; break; }                                              \
            store_##T(item(&X, i1, i2), w + m * m, r, m, X.s1, X.s0);                        \
        }                                                                                    \
    free(w); free(piv);                                                                      \
    return rc;                                                                               \
}                                                                                            \
/* (sign, log|det|) from an LU factorisation, accumulated as NumPy does */                   \
static int lu_slogdet_##SUFFIX(T *w, int *piv, int64_t m, T *sign, T *logdet) {             \
    getrf_t getrf = (getrf_t)entries[E_GETRF][IDX];                                          \
    int n = (int)m, info = 0, base = 1;                                                      \
    if (m <= SMALL_M) { info = small_lu_##SUFFIX(w, m, piv); base = 0; }                     \
    else getrf(&n, &n, w, &n, piv, &info);                                                   \
    if (info > 0) { *sign = 0; *logdet = -INFINITY; return 0; }                              \
    T s = 1, l = 0;                                                                          \
    for (int64_t i = 0; i < m; i++) {                                                        \
        T d = w[i * m + i];                                                                  \
        if (piv[i] != i + base) s = -s;                                                      \
        if (d < 0) { s = -s; d = -d; }                                                       \
        l += log(d);                                                                         \
    }                                                                                        \
    *sign = s; *logdet = l;                                                                  \
    return 0;                                                                                \
}                                                                                            \
static int det_common_##SUFFIX(const int64_t *ops, const int64_t *slots, int logform) {     \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M];                                 \
    arr_t A = arr(ops, slots, 0, sizeof(T)), X = arr(ops, slots, 1, sizeof(T));              \
    T sign, logdet;                                                                          \
    if (b1 == 0 || b2 == 0) return 0;                                                        \
    if (!FITS(m) || m > 46340 || !entries[E_GETRF][IDX]) return -1;                          \
    T *w = malloc(sizeof(T) * (size_t)(m * m + 1));                                          \
    int *piv = malloc(sizeof(int) * (size_t)(m + 1));                                        \
    if (!w || !piv) { free(w); free(piv); return -2; }                                       \
    for (int64_t i1 = 0; i1 < b1; i1++)                                                      \
        for (int64_t i2 = 0; i2 < b2; i2++) {                                                \
            T *x = (T *)item(&X, i1, i2);                                                    \
            if (m == 0) { sign = 1; logdet = 0; }                                            \
            else {                                                                           \
                load_##T(w, item(&A, i1, i2), m, m, A.s0, A.s1);                             \
                lu_slogdet_##SUFFIX(w, piv, m, &sign, &logdet);                              \
            }                                                                                \
            if (logform) { x[0] = sign; x[X.s1] = logdet; }                                  \
            else x[0] = sign * (T)exp(logdet);                                               \
        }                                                                                    \
    free(w); free(piv);                                                                      \
    return 0;                                                                                \
}                                                                                            \
static int det_##SUFFIX(const int64_t *ops, const int64_t *slots) {                         \
    return det_common_##SUFFIX(ops, slots, 0);                                               \
}                                                                                            \
static int slogdet_##SUFFIX(const int64_t *ops, const int64_t *slots) {                     \
    return det_common_##SUFFIX(ops, slots, 1);                                               \
}                                                                                            \
static int cholesky_##SUFFIX(const int64_t *ops, const int64_t *slots) {                    \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M];                                 \
    arr_t A = arr(ops, slots, 0, sizeof(T)), X = arr(ops, slots, 1, sizeof(T));              \
    potrf_t potrf = (potrf_t)entries[E_POTRF][IDX];                                          \
    int n = (int)m, info = 0, rc = 0;                                                        \
    char uplo = 'L';      /* as NumPy: a column-major copy, its lower triangle   */             \
    if (b1 == 0 || b2 == 0 || m == 0) return 0;                                              \
    if (!FITS(m) || m > 46340 || !potrf) return -1;                                          \
    T *w = malloc(sizeof(T) * (size_t)(m * m));                                              \
    if (!w) return -2;                                                                       \
    for (int64_t i1 = 0; i1 < b1 && !rc; i1++)                                               \
        for (int64_t i2 = 0; i2 < b2 && !rc; i2++) {                                         \
            load_##T(w, item(&A, i1, i2), m, m, A.s1, A.s0);                                 \
            potrf(&uplo, &n, w, &n, &info);                                                  \
            if (info != 0) { rc = info > 0 ? info : -2; break; }                                              \
            for (int64_t i = 0; i < m; i++)                                                  \
                for (int64_t j = i + 1; j < m; j++) w[j * m + i] = 0;                        \
            store_##T(item(&X, i1, i2), w, m, m, X.s1, X.s0);                                \
        }                                                                                    \
    free(w);                                                                                 \
    return rc;                                                                               \
}                                                                                            \
static int eigh_##SUFFIX(const int64_t *ops, const int64_t *slots) {                        \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M];                                 \
    arr_t A = arr(ops, slots, 0, sizeof(T)), X = arr(ops, slots, 1, sizeof(T));              \
    syevd_t syevd = (syevd_t)entries[E_SYEVD][IDX];                                          \
    int n = (int)m, info = 0, rc = 0, lwork = -1, liwork = -1, iq = 0;                       \
    char jobz = 'V', uplo = 'L';    /* as NumPy: a column-major copy, its lower triangle */  \
    T q = 0;                                                                                 \
    if (b1 == 0 || b2 == 0 || m == 0) return 0;                                              \
    if (!FITS(m) || m > 46340 || !syevd) return -1;                                          \
    T *w = malloc(sizeof(T) * (size_t)(m * m + m));                                          \
    if (!w) return -2;                                                                       \
    syevd(&jobz, &uplo, &n, w, &n, w + m * m, &q, &lwork, &iq, &liwork, &info);              \
    lwork = (int)q + 1; liwork = iq + 1;                                                     \
    T *work = malloc(sizeof(T) * (size_t)lwork);                                             \
    int *iwork = malloc(sizeof(int) * (size_t)liwork);                                       \
    if (!work || !iwork) { free(w); free(work); free(iwork); return -2; }                    \
    for (int64_t i1 = 0; i1 < b1 && !rc; i1++)                                               \
        for (int64_t i2 = 0; i2 < b2 && !rc; i2++) {                                         \
            load_##T(w, item(&A, i1, i2), m, m, A.s1, A.s0);                                 \
            syevd(&jobz, &uplo, &n, w, &n, w + m * m, work, &lwork, iwork, &liwork, &info);  \
            if (info != 0) { rc = info > 0 ? info : -2; break; }                                              \
            T *x = (T *)item(&X, i1, i2);                                                    \
            for (int64_t j = 0; j < m; j++) x[j * X.s1] = w[m * m + j];                      \
            /* column j of the column-major result is eigenvector j: v[i, j] */              \
            for (int64_t i = 0; i < m; i++)                                                  \
                for (int64_t j = 0; j < m; j++) x[(i + 1) * X.s0 + j * X.s1] = w[i + j * m]; \
        }                                                                                    \
    free(w); free(work); free(iwork);                                                        \
    return rc;                                                                               \
}
LAPACK(float, 0, f32)
LAPACK(double, 1, f64)

/* SVD and least squares: LAPACK gesdd / gelsd on a column-major copy, with NumPy's leading
 * dimensions and workspace sizes (the same algorithm paths, so the same bits as NumPy's when
 * the LAPACK is the same one).  The workspace is queried and allocated once per call, not
 * per matrix.  iwork gets 64-bit entries: enough for either integer convention (the ILP64
 * adapters pass it through as is). */
#define IWORK64(count) malloc(sizeof(int64_t) * (size_t)((count) > 0 ? (count) : 1))
#define DECOMP(T, IDX, SUFFIX)                                                               \
/* X[b] = (s; U; Vh), job k: 0 s only (X 1 x r), 1 reduced (U m x r, Vh r x n), 2 full       \
 * (U m x m, Vh n x n); X (1 + m + vrows) x max(ucols, n), r = min(m, n) */                  \
static int svd_##SUFFIX(const int64_t *ops, const int64_t *slots) {                         \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M], n = ops[OP_N], job = ops[OP_K]; \
    arr_t A = arr(ops, slots, 0, sizeof(T)), X = arr(ops, slots, 1, sizeof(T));              \
    gesdd_t gesdd = (gesdd_t)entries[E_GESDD][IDX];                                          \
    int64_t r = m < n ? m : n, ucols = job == 2 ? m : r, vrows = job == 2 ? n : r;           \
    if (job < 0 || job > 2) return -1;                                                       \
    if (b1 == 0 || b2 == 0) return 0;                                                        \
    if (r == 0) {      /* LAPACK leaves an empty matrix's U, Vh unset: identities, as NumPy */ \
        if (job == 2)                                                                        \
            for (int64_t i1 = 0; i1 < b1; i1++)                                              \
                for (int64_t i2 = 0; i2 < b2; i2++) {                                        \
                    T *x = (T *)item(&X, i1, i2);                                            \
                    for (int64_t i = 0; i < m; i++)                                          \
                        for (int64_t j = 0; j < m; j++) x[(1 + i) * X.s0 + j * X.s1] = i == j; \
                    for (int64_t i = 0; i < n; i++)                                          \
                        for (int64_t j = 0; j < n; j++)                                      \
                            x[(1 + m + i) * X.s0 + j * X.s1] = i == j;                       \
                }                                                                            \
        return 0;                                                                            \
    }                                                                                        \
    if (!FITS(m) || !FITS(n) || m * n > INT32_MAX || !gesdd) return -1;                      \
    char jobz = "NSA"[job];                                                                  \
    int im = (int)m, in = (int)n, ld = (int)m, ldvt = job && vrows > 1 ? (int)vrows : 1;       \
    int lwork = -1, info = 0, rc = 0;                                                        \
    size_t na = (size_t)(m * n), nu = job ? (size_t)(m * ucols) : 0;                         \
    size_t nv = job ? (size_t)(vrows * n) : 0;                                               \
    T q = 0, *w = malloc(sizeof(T) * (na + (size_t)r + nu + nv)), *work = NULL;              \
    int64_t *iwork = IWORK64(8 * r);                                                         \
    if (!w || !iwork) { free(w); free(iwork); return -2; }                                   \
    T *a = w, *s = w + na, *u = s + r, *vt = u + nu;                                         \
    gesdd(&jobz, &im, &in, a, &ld, s, u, &ld, vt, &ldvt, &q, &lwork, (int *)iwork, &info);   \
    if (info != 0 || !(q < (T)INT32_MAX)) { free(w); free(iwork); return -1; }               \
    lwork = (int)q > 0 ? (int)q : 1;                                                         \
    work = malloc(sizeof(T) * (size_t)lwork);                                                \
    if (!work) { free(w); free(iwork); return -2; }                                          \
    for (int64_t i1 = 0; i1 < b1 && !rc; i1++)                                               \
        for (int64_t i2 = 0; i2 < b2 && !rc; i2++) {                                         \
            load_##T(a, item(&A, i1, i2), n, m, A.s1, A.s0);                                 \
            gesdd(&jobz, &im, &in, a, &ld, s, u, &ld, vt, &ldvt, work, &lwork,               \
                  (int *)iwork, &info);                                                      \
            /* a NaN is an illegal argument to gesdd (info -4): NumPy reports every       \
             * failure as non-convergence, and so do we (positive: a LinAlgError) */        \
            if (info != 0) { rc = info > 0 ? info : 1 - info; break; }                       \
            T *x = (T *)item(&X, i1, i2);                                                    \
            for (int64_t j = 0; j < r; j++) x[j * X.s1] = s[j];                              \
            if (!job) continue;                                                              \
            for (int64_t i = 0; i < m; i++)                                                  \
                for (int64_t j = 0; j < ucols; j++) x[(1 + i) * X.s0 + j * X.s1] = u[i + j * m]; \
            for (int64_t i = 0; i < vrows; i++)                                              \
                for (int64_t j = 0; j < n; j++)                                              \
                    x[(1 + m + i) * X.s0 + j * X.s1] = vt[i + j * ldvt];                     \
        }                                                                                    \
    free(w); free(work); free(iwork);                                                        \
    return rc;                                                                               \
}                                                                                            \
/* lstsq: A = [a | b] (m x (n + k)), Y = rcond (1 x 1); X (n + 2) x max(k, r, 1): rows      \
 * 0..n-1 the solution x (n x k), row n the singular values, X[n+1, 0] the rank.  b is       \
 * copied into a max(m, n)-row block (gelsd writes x there); k = 0 solves one zero column,  \
 * as NumPy does. */                                                                         \
static int lstsq_##SUFFIX(const int64_t *ops, const int64_t *slots) {                       \
    int64_t b1 = ops[OP_B1], b2 = ops[OP_B2], m = ops[OP_M], n = ops[OP_N], k = ops[OP_K];   \
    arr_t AB = arr(ops, slots, 0, sizeof(T)), R = arr(ops, slots, 1, sizeof(T));             \
    arr_t X = arr(ops, slots, 2, sizeof(T));                                                 \
    gelsd_t gelsd = (gelsd_t)entries[E_GELSD][IDX];                                          \
    int64_t r = m < n ? m : n, mx = m > n ? m : n, nb = k > 0 ? k : 1;                       \
    if (b1 == 0 || b2 == 0) return 0;                                                        \
    if (r == 0) {                      /* as NumPy: x = 0, rank 0, no singular values */     \
        for (int64_t i1 = 0; i1 < b1; i1++)                                                  \
            for (int64_t i2 = 0; i2 < b2; i2++) {                                            \
                T *x = (T *)item(&X, i1, i2);                                                \
                for (int64_t i = 0; i < n; i++)                                              \
                    for (int64_t j = 0; j < k; j++) x[i * X.s0 + j * X.s1] = 0;              \
                x[(n + 1) * X.s0] = 0;                                                       \
            }                                                                                \
        return 0;                                                                            \
    }                                                                                        \
    if (!FITS(m) || !FITS(n) || !FITS(k) || m * n > INT32_MAX || mx * nb > INT32_MAX ||      \
        !gelsd) return -1;                                                                   \
    int im = (int)m, in = (int)n, inb = (int)nb, lda = (int)m, ldb = (int)mx, rank = 0;      \
    int lwork = -1, liwork = 0, info = 0, rc = 0;                                            \
    size_t na = (size_t)(m * n), nbb = (size_t)(mx * nb);                                    \
    T q = 0, rcond = 0, *w = malloc(sizeof(T) * (na + nbb + (size_t)r)), *work = NULL;       \
    int64_t *iwork = NULL;                                                                   \
    if (!w) return -2;                                                                       \
    T *a = w, *bb = w + na, *s = bb + nbb;                                                   \
    gelsd(&im, &in, &inb, a, &lda, bb, &ldb, s, &rcond, &rank, &q, &lwork, &liwork, &info);  \
    if (info != 0 || !(q < (T)INT32_MAX)) { free(w); return -1; }                            \
    lwork = (int)q > 0 ? (int)q : 1;                                                         \
    work = malloc(sizeof(T) * (size_t)lwork);                                                \
    iwork = IWORK64(liwork);                                                                 \
    if (!work || !iwork) { free(w); free(work); free(iwork); return -2; }                    \
    for (int64_t i1 = 0; i1 < b1 && !rc; i1++)                                               \
        for (int64_t i2 = 0; i2 < b2 && !rc; i2++) {                                         \
            const T *ab = (const T *)item(&AB, i1, i2);                                      \
            load_##T(a, (const char *)ab, n, m, AB.s1, AB.s0);                               \
            memset(bb, 0, sizeof(T) * nbb);                                                  \
            for (int64_t j = 0; j < k; j++)                                                  \
                for (int64_t i = 0; i < m; i++) bb[i + j * mx] = ab[i * AB.s0 + (n + j) * AB.s1]; \
            rcond = *(const T *)item(&R, i1, i2);                                            \
            gelsd(&im, &in, &inb, a, &lda, bb, &ldb, s, &rcond, &rank, work, &lwork,         \
                  (int *)iwork, &info);                                                      \
            if (info != 0) { rc = info > 0 ? info : 1 - info; break; }    /* as svd's */    \
            T *x = (T *)item(&X, i1, i2);                                                    \
            for (int64_t i = 0; i < n; i++)                                                  \
                for (int64_t j = 0; j < k; j++) x[i * X.s0 + j * X.s1] = bb[i + j * mx];     \
            for (int64_t j = 0; j < r; j++) x[n * X.s0 + j * X.s1] = s[j];                   \
            x[(n + 1) * X.s0] = (T)rank;                                                     \
        }                                                                                    \
    free(w); free(work); free(iwork);                                                        \
    return rc;                                                                               \
}
DECOMP(float, 0, f32)
DECOMP(double, 1, f64)

static const fl_library_fn routines[] = {
    gemm_f32, gemm_f64, inv_f32, inv_f64, solve_f32, solve_f64, det_f32, det_f64,
    slogdet_f32, slogdet_f64, cholesky_f32, cholesky_f64, eigh_f32, eigh_f64, svd_f32, svd_f64,
    lstsq_f32, lstsq_f64};
/* the entry points each routine needs (for a clear error at link time) */
static const int needs[][2] = {
    {E_GEMM, E_GEMM}, {E_GESV, E_GESV}, {E_GESV, E_GESV}, {E_GETRF, E_GETRF},
    {E_GETRF, E_GETRF}, {E_POTRF, E_POTRF}, {E_SYEVD, E_SYEVD}, {E_GESDD, E_GESDD},
    {E_GELSD, E_GELSD}};

fl_library_fn fl_library_routine(int routine) {
    if (routine < 0 || routine >= (int)(sizeof(routines) / sizeof(routines[0]))) return NULL;
    return routines[routine];
}

const char *fl_library_missing(int routine) {
    if (fl_library_routine(routine) == NULL) return "?";
    for (int j = 0; j < 2; j++) {
        int e = needs[routine / 2][j];
        if (entries[e][routine % 2] == NULL) return entry_names[e][routine % 2];
    }
    return NULL;
}
