// What the repacked Q4_0 kernel tests share: seeded inputs, ggml's q4_0_8x8 layout made by hand,
// the kernels' C entry points, and how outputs are compared and hashed.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

extern "C" {
void ggml_quantize_mat_q8_0_4x8(const float * x, void * vy, int64_t k);
void ggml_gemm_q4_0_8x8_q8_0(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);
void ggml_gemm_q4_0_8x8_q8_0_generic(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);
void ggml_gemv_q4_0_8x8_q8_0(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);
void ggml_gemv_q4_0_8x8_q8_0_generic(int n, float * s, size_t bs, const void * vx, const void * vy, int nr, int nc);
}

// Sizes in bytes: block_q4_0 (fp16 d, 16 bytes of nibbles) and block_q8_0x4 (4 fp16 d, 4 x 32 int8).
constexpr int64_t Q4_0_BLOCK_BYTES = 18;
constexpr int64_t Q8_0X4_BLOCK_BYTES = 4 * 2 + 4 * 32;

static std::mt19937 rng(42);

// Gaussian values with a few large outliers per row, as in real weights and activations.
static std::vector<float> random_matrix(int64_t rows, int64_t cols, float scale) {
    std::normal_distribution<float> normal(0.0f, scale);
    std::uniform_int_distribution<int64_t> pick(0, cols - 1);
    std::vector<float> m(rows * cols);
    for (auto & v : m) v = normal(rng);
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < 3; i++) m[r * cols + pick(rng)] *= 20.0f;
    }
    return m;
}

static uint64_t fnv1a(const float * v, size_t n, uint64_t h = 1469598103934665603ull) {
    const uint8_t * p = (const uint8_t *) v;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static double max_rel_err(const float * got, const float * ref, int64_t rows, int64_t cols) {
    double worst = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        double scale = 1e-30;
        for (int64_t c = 0; c < cols; c++) scale = std::max(scale, (double) fabsf(ref[r * cols + c]));
        for (int64_t c = 0; c < cols; c++) {
            const double e = fabs((double) got[r * cols + c] - ref[r * cols + c]) / scale;
            worst = std::isnan(e) ? INFINITY : std::max(worst, e);
        }
    }
    return worst;
}

// ggml's q4_0_8x8 layout: per 8 rows and 32 K, the 8 fp16 scales, then the rows' 16 bytes of
// nibbles interleaved 8 bytes at a time (bytes 0-7 of rows 0..7, then bytes 8-15), XOR 0x88.
static std::vector<uint8_t> to_q4_0x8(const std::vector<uint8_t> & q, int64_t k, int64_t n) {
    const int64_t nb = k / 32;
    std::vector<uint8_t> out(q.size());
    uint8_t * dst = out.data();
    for (int64_t r0 = 0; r0 < n; r0 += 8) {
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t * rows[8];
            for (int i = 0; i < 8; i++) rows[i] = q.data() + ((r0 + i) * nb + b) * Q4_0_BLOCK_BYTES;
            for (int i = 0; i < 8; i++, dst += 2) memcpy(dst, rows[i], 2);
            for (int chunk = 0; chunk < 16; chunk++, dst += 8) {
                for (int j = 0; j < 8; j++) dst[j] = rows[chunk % 8][2 + (chunk / 8) * 8 + j] ^ 0x88;
            }
        }
    }
    return out;
}

// Activations x (m rows of k) quantized as the GEMM takes them: block_q8_0x4 per 4 rows and 32 K.
static std::vector<uint8_t> quantize_q8_0x4(const std::vector<float> & x, int64_t k, int64_t m) {
    const int64_t nb = k / 32;
    std::vector<uint8_t> xq(m / 4 * nb * Q8_0X4_BLOCK_BYTES);
    for (int64_t r = 0; r + 4 <= m; r += 4) {
        ggml_quantize_mat_q8_0_4x8(x.data() + r * k, xq.data() + r / 4 * nb * Q8_0X4_BLOCK_BYTES, k);
    }
    return xq;
}
