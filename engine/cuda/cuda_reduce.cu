/*
 * cuda_reduce.cu - sum, max and argmax over the middle axis of a contiguous
 * [outer, n, inner] array.
 *
 * x is float32, float16 or bfloat16 (read widened). Sums accumulate in
 * double (the CPU backend sums rows in double too).
 * Max and argmax follow the CPU's sequential rule exactly: the first NaN
 * wins; otherwise the largest value, the first one on ties. As a combining
 * rule on (value, index) pairs that is associative, so any tree order gives
 * the sequential answer.
 */
#include "cuda_common.cuh"

/* a float32 result: rounded to rdt's precision, stored in odt (ld_kernels.h) */
__device__ __forceinline__ void red_store(void *out, int64_t c, float v, ld_dtype odt, ld_dtype rdt) {
    if (odt == LD_F16 || rdt == LD_F16) {
        uint16_t h = ld_f32_to_f16(v);
        if (odt == LD_F16) ((uint16_t *)out)[c] = h;
        else ((float *)out)[c] = ld_f16_to_f32(h);
    } else if (odt == LD_BF16 || rdt == LD_BF16) {
        uint16_t h = ld_f32_to_bf16(v);
        if (odt == LD_BF16) ((uint16_t *)out)[c] = h;
        else ((float *)out)[c] = ld_bf16_to_f32(h);
    } else {
        ((float *)out)[c] = v;
    }
}

struct vi {
    float v;
    int64_t i;
};

/* does b win over a? */
__device__ __forceinline__ bool vi_better(vi a, vi b) {
    bool an = isnan(a.v), bn = isnan(b.v);
    if (an || bn) return bn && (!an || b.i < a.i);
    if (b.v != a.v) return b.v > a.v;
    return b.i < a.i;
}
__device__ __forceinline__ vi vi_pick(vi a, vi b) { return vi_better(a, b) ? b : a; }

__device__ __forceinline__ vi vi_shfl(vi x, int o) {
    vi y;
    y.v = __shfl_xor_sync(0xffffffffu, x.v, o);
    y.i = __shfl_xor_sync(0xffffffffu, x.i, o);
    return y;
}

/* ---- inner == 1: one block per row of n contiguous values ---- */
template <int OP, typename T>
__global__ void k_reduce_rows(void *out, ld_dtype odt, ld_dtype rdt, const T *x, int64_t rows, int64_t n) {
    __shared__ double shs[32];
    __shared__ vi shv[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *p = x + r * n;
        if (OP == LD_RED_SUM) {
            double s = 0;
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += (double)cu_get(p[j]);
            s = cu_block_sum(s, shs);
            if (threadIdx.x == 0) red_store(out, r, (float)s, odt, rdt);
        } else {
            vi best = {-INFINITY, INT64_MAX};
            for (int64_t j = threadIdx.x; j < n; j += blockDim.x) best = vi_pick(best, vi{cu_get(p[j]), j});
            for (int o = 16; o > 0; o >>= 1) best = vi_pick(best, vi_shfl(best, o));
            __syncthreads();
            if (lane == 0) shv[wid] = best;
            __syncthreads();
            if (wid == 0) {
                best = lane < nw ? shv[lane] : vi{-INFINITY, INT64_MAX};
                for (int o = 16; o > 0; o >>= 1) best = vi_pick(best, vi_shfl(best, o));
                if (lane == 0) {
                    if (best.i == INT64_MAX) best = vi{-INFINITY, 0};   /* n == 0 (the op refuses it) */
                    if (OP == LD_RED_MAX) red_store(out, r, best.v, odt, rdt);
                    else ((int64_t *)out)[r] = best.i;
                }
            }
        }
    }
}

/* ---- inner > 1: a block of 32 x 8 threads per 32 neighbouring columns
   (c = o*inner + i); the 8 rows of threads split n and combine in shared memory ---- */
template <int OP, typename T>
__global__ void k_reduce_cols(void *out, ld_dtype odt, ld_dtype rdt, const T *x, int64_t outer, int64_t n,
                              int64_t inner) {
    __shared__ double shs[8][33];
    __shared__ vi shv[8][33];
    int64_t cols = outer * inner;
    for (int64_t c0 = (int64_t)blockIdx.x * 32; c0 < cols; c0 += (int64_t)gridDim.x * 32) {
        int64_t c = c0 + threadIdx.x;
        int64_t o = c < cols ? c / inner : 0, i = c < cols ? c - o * inner : 0;
        const T *p = x + o * n * inner + i;
        if (OP == LD_RED_SUM) {
            double s = 0;
            if (c < cols)
                for (int64_t j = threadIdx.y; j < n; j += 8) s += (double)cu_get(p[j * inner]);
            shs[threadIdx.y][threadIdx.x] = s;
            __syncthreads();
            if (threadIdx.y == 0 && c < cols) {
                double t = 0;
                for (int y = 0; y < 8; y++) t += shs[y][threadIdx.x];
                red_store(out, c, (float)t, odt, rdt);
            }
        } else {
            vi best = {-INFINITY, INT64_MAX};
            if (c < cols)
                for (int64_t j = threadIdx.y; j < n; j += 8) best = vi_pick(best, vi{cu_get(p[j * inner]), j});
            shv[threadIdx.y][threadIdx.x] = best;
            __syncthreads();
            if (threadIdx.y == 0 && c < cols) {
                for (int y = 1; y < 8; y++) best = vi_pick(best, shv[y][threadIdx.x]);
                if (best.i == INT64_MAX) best = vi{-INFINITY, 0};
                if (OP == LD_RED_MAX) red_store(out, c, best.v, odt, rdt);
                else ((int64_t *)out)[c] = best.i;
            }
        }
        __syncthreads();   /* shared memory is reused by the next tile */
    }
}

/* ---- sums over a long axis with few columns (a bias gradient over a big
   batch): the axis is split into chunks, each block sums one chunk of 32
   columns into `part` [chunks, cols], and a second pass adds the chunks in
   order (deterministic, unlike atomics) ---- */
template <int OP, typename T>
__global__ void k_sum_cols_part(double *part, const T *x, int64_t outer, int64_t n, int64_t inner,
                                int64_t chunk) {
    __shared__ double shs[8][33];
    int64_t cols = outer * inner;
    int64_t c = (int64_t)blockIdx.x * 32 + threadIdx.x;
    int64_t j0 = (int64_t)blockIdx.y * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
    double s = 0;
    if (c < cols) {
        int64_t o = c / inner, i = c - o * inner;
        const T *p = x + o * n * inner + i;
        for (int64_t j = j0 + threadIdx.y; j < j1; j += 8) s += (double)cu_get(p[j * inner]);
    }
    shs[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        double t = 0;
        for (int y = 0; y < 8; y++) t += shs[y][threadIdx.x];
        part[blockIdx.y * cols + c] = t;
    }
}

__global__ void k_sum_parts(void *out, ld_dtype odt, ld_dtype rdt, const double *part, int64_t cols, int chunks) {
    CU_LOOP(c, cols) {
        double t = 0;
        for (int k = 0; k < chunks; k++) t += part[k * cols + c];
        red_store(out, c, (float)t, odt, rdt);
    }
}

/* ---- sums over whole long rows (a tensor summed over all its axes: the
   loss, a gradient checked for infs): one block per row ran a 19M-value
   gradient on one multiprocessor; each row is split into chunks, a block
   sums one chunk into part[chunk][row], and k_sum_parts adds each row's
   chunks in order (deterministic) ---- */
template <int OP, typename T>
__global__ void k_sum_rows_part(double *part, const T *x, int64_t rows, int64_t n, int64_t chunk) {
    __shared__ double shs[32];
    int64_t r = blockIdx.y, j0 = (int64_t)blockIdx.x * chunk, j1 = j0 + chunk < n ? j0 + chunk : n;
    const T *p = x + r * n;
    double s = 0;
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) s += (double)cu_get(p[j]);
    s = cu_block_sum(s, shs);
    if (threadIdx.x == 0) part[blockIdx.x * rows + r] = s;
}

template <int OP, typename T>
static void launch_reduce(cu_dev *cd, void *out, ld_dtype odt, ld_dtype rdt, const T *x, int64_t outer, int64_t n,
                          int64_t inner) {
    int64_t tiles = (outer * inner + 31) / 32;
    /* below 512 tiles the one-pass kernel has too few blocks for a large GPU
       (a bias gradient of 2048 columns over 8192 rows: 64 blocks, each thread
       1024 loads in a row); split the long axis into chunks, about 512 blocks */
    if (OP == LD_RED_SUM && inner == 1 && outer < 512 && n >= 65536) {   /* 3 to 128 chunks a row */
        int chunks = (int)((1024 + outer - 1) / outer);
        if ((int64_t)chunks * 8192 > n) chunks = (int)(n / 8192);
        int64_t chunk = (n + chunks - 1) / chunks;
        size_t bytes = (size_t)chunks * (size_t)outer * sizeof(double);
        double *part = (double *)cu_scratch(cd, bytes);
        if (part) {
            k_sum_rows_part<OP, T><<<dim3((unsigned)chunks, (unsigned)outer), 256, 0, cd->stream>>>(part, x, outer, n, chunk);
            cu_launched(cd, "reduce kernel (partial sums of long rows)");
            k_sum_parts<<<cu_grid(outer, 256), 256, 0, cd->stream>>>(out, odt, rdt, part, outer, chunks);
            cu_launched(cd, "reduce kernel (sum of the rows' partial sums)");
            cu_scratch_free(cd, part, bytes);
            return;
        }
        cu_host->clear_error();   /* no scratch: the one-pass kernel below needs none */
    }
    if (OP == LD_RED_SUM && inner > 1 && tiles < 512 && n >= 2048) {
        int64_t cols = outer * inner;
        int chunks = (int)((512 + tiles - 1) / tiles);
        if ((int64_t)chunks * 256 > n) chunks = (int)(n / 256);
        int64_t chunk = (n + chunks - 1) / chunks;
        size_t bytes = (size_t)chunks * (size_t)cols * sizeof(double);
        double *part = (double *)cu_scratch(cd, bytes);
        if (part) {
            k_sum_cols_part<OP, T><<<dim3((unsigned)tiles, (unsigned)chunks), dim3(32, 8), 0, cd->stream>>>(
                part, x, outer, n, inner, chunk);
            cu_launched(cd, "reduce kernel (partial sums)");
            k_sum_parts<<<cu_grid(cols, 256), 256, 0, cd->stream>>>(out, odt, rdt, part, cols, chunks);
            cu_launched(cd, "reduce kernel (sum of partial sums)");
            cu_scratch_free(cd, part, bytes);
            return;
        }
        cu_host->clear_error();   /* no scratch: the one-pass kernel below needs none */
    }
    if (inner == 1) {
        int threads = n >= 2048 ? 512 : n >= 256 ? 128 : 32;
        unsigned grid = (unsigned)(outer < 65536 ? outer : 65536);
        k_reduce_rows<OP, T><<<grid, threads, 0, cd->stream>>>(out, odt, rdt, x, outer, n);
    } else {
        unsigned grid = (unsigned)(tiles < 65536 ? tiles : 65536);
        k_reduce_cols<OP, T><<<grid, dim3(32, 8), 0, cd->stream>>>(out, odt, rdt, x, outer, n, inner);
    }
    cu_launched(cd, "reduce kernel");
}

void cu_reduce(ld_device *d, ld_reduce_op op, void *out, ld_dtype odt, ld_dtype rdt, const void *x, ld_dtype xdt,
               int64_t outer, int64_t n, int64_t inner) {
    if (outer <= 0 || inner <= 0) return;
    cu_dev *cd = cu_begin(d);
    if (!cd) return;
    if (op == LD_RED_ARGMAX) odt = rdt = LD_F32;   /* int64 indices */
    if (n == 0 && op == LD_RED_SUM) {   /* a sum over nothing is 0 */
        size_t es = odt == LD_F32 ? sizeof(float) : 2;
        cudaError_t e = cudaMemsetAsync(out, 0, (size_t)(outer * inner) * es, cd->stream);
        if (e != cudaSuccess) cu_record(cd, "cudaMemsetAsync", e);
        return;
    }
    switch (op) {
    case LD_RED_SUM: CU_FLOAT_TYPES(xdt, T, launch_reduce<LD_RED_SUM>(cd, out, odt, rdt, (const T *)x, outer, n, inner)); break;
    case LD_RED_MAX: CU_FLOAT_TYPES(xdt, T, launch_reduce<LD_RED_MAX>(cd, out, odt, rdt, (const T *)x, outer, n, inner)); break;
    case LD_RED_ARGMAX:
        CU_FLOAT_TYPES(xdt, T, launch_reduce<LD_RED_ARGMAX>(cd, out, odt, rdt, (const T *)x, outer, n, inner));
        break;
    default: cu_record_msg(cd, "reduce: unknown op"); break;
    }
}
