// The build's quantized dot products (ggml_vec_dot_*) against an exact reference.
//
// For each type, length and row count (nrc 1, and 2 where the type's kernel has a two-row form)
// it prints one line:
//   vec_dot <type> n=<n> nrc=<r> max_rel_err <e>
// The reference dequantizes both rows (every value d * q is exact in float) and sums the products
// in double, block by block (for q4_1, whose minimum term uses the fp16 sum s that q8_1 blocks
// carry, it uses that s as the kernels do); the error is taken relative to the sum of |block dot products|, the
// scale at which a kernel's float rounding shows. It does not use ggml's scalar _generic kernels:
// GCC 12 at -O3 with i8mm miscompiles ggml_vec_dot_q5_0_q8_0_generic (it vectorizes the signed
// products with USDOT, unsigned x signed). Lengths cover one block, odd block counts (vector
// tails) and long rows. Built by tests/test_vec_dot.py (x86, each build's shared libraries) and
// scripts/build-arm.sh (aarch64, static, run under QEMU).
#include "ggml.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

typedef void (*vec_dot_fn)(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc);

extern "C" {
#define DECLARE(name) void name(int, float *, size_t, const void *, size_t, const void *, size_t, int);
DECLARE(ggml_vec_dot_q4_0_q8_0)
DECLARE(ggml_vec_dot_q4_1_q8_1)
DECLARE(ggml_vec_dot_q5_0_q8_0)
DECLARE(ggml_vec_dot_q8_0_q8_0)
DECLARE(ggml_vec_dot_q4_K_q8_K)
DECLARE(ggml_vec_dot_q6_K_q8_K)
}

struct Case {
    const char * name;
    ggml_type type;
    vec_dot_fn fn;
};

static std::mt19937 rng(7);

static std::vector<float> random_row(int n) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> pick(0, n - 1);
    std::vector<float> v(n);
    for (auto & x : v) x = normal(rng);
    for (int i = 0; i < 1 + n / 256; i++) v[pick(rng)] *= 15.0f;  // outliers set the block scales
    return v;
}

// Values of a row of `type`; Q8_1 and Q8_K (activation types) have no to_float in ggml.
static std::vector<float> dequantize(ggml_type type, const uint8_t * q, int n) {
    std::vector<float> v(n);
    if (type == GGML_TYPE_Q8_1) {  // {fp16 d, fp16 s, int8 qs[32]}
        for (int b = 0; b < n / 32; b++) {
            const uint8_t * blk = q + b * 36;
            ggml_fp16_t d;
            memcpy(&d, blk, sizeof(d));
            for (int i = 0; i < 32; i++) v[b * 32 + i] = ggml_fp16_to_fp32(d) * (int8_t) blk[4 + i];
        }
    } else if (type == GGML_TYPE_Q8_K) {  // {float d, int8 qs[256], int16 bsums[16]}
        for (int b = 0; b < n / 256; b++) {
            const uint8_t * blk = q + b * ggml_type_size(GGML_TYPE_Q8_K);
            float d;
            memcpy(&d, blk, sizeof(d));
            for (int i = 0; i < 256; i++) v[b * 256 + i] = d * (int8_t) blk[4 + i];
        }
    } else {
        ggml_get_type_traits(type)->to_float(q, v.data(), n);
    }
    return v;
}

// q4_1 x q8_1: the kernels take a block's sum of y from its fp16 s, not from its values. Returns
// m_x * (s_y - sum(y)), what that changes in block b.
static double q4_1_min_correction(const uint8_t * x, const uint8_t * y, int b) {
    ggml_fp16_t m, dy, sy;
    memcpy(&m, x + b * 20 + 2, sizeof(m));   // block_q4_1: fp16 d, fp16 m, qs[16]
    memcpy(&dy, y + b * 36, sizeof(dy));     // block_q8_1: fp16 d, fp16 s, qs[32]
    memcpy(&sy, y + b * 36 + 2, sizeof(sy));
    double sum = 0.0;
    for (int i = 0; i < 32; i++) sum += (double) ggml_fp16_to_fp32(dy) * (int8_t) y[b * 36 + 4 + i];
    return ggml_fp16_to_fp32(m) * (ggml_fp16_to_fp32(sy) - sum);
}

static std::vector<uint8_t> quantize(ggml_type type, const std::vector<float> & rows, int n, int nrows) {
    std::vector<uint8_t> q(ggml_row_size(type, n) * nrows);
    const auto from_float = ggml_get_type_traits_cpu(type)->from_float;
    for (int r = 0; r < nrows; r++) from_float(rows.data() + r * n, q.data() + r * ggml_row_size(type, n), n);
    return q;
}

int main() {
    const Case cases[] = {
        {"q4_0", GGML_TYPE_Q4_0, ggml_vec_dot_q4_0_q8_0},
        {"q4_1", GGML_TYPE_Q4_1, ggml_vec_dot_q4_1_q8_1},
        {"q5_0", GGML_TYPE_Q5_0, ggml_vec_dot_q5_0_q8_0},
        {"q8_0", GGML_TYPE_Q8_0, ggml_vec_dot_q8_0_q8_0},
        {"q4_K", GGML_TYPE_Q4_K, ggml_vec_dot_q4_K_q8_K},
        {"q6_K", GGML_TYPE_Q6_K, ggml_vec_dot_q6_K_q8_K},
    };
    ggml_cpu_init();
    for (const Case & c : cases) {
        const auto * traits = ggml_get_type_traits_cpu(c.type);
        const ggml_type vdt = traits->vec_dot_type;
        const int blck = ggml_blck_size(c.type);
        for (int blocks : {1, 2, 3, 5, 7, 33, 128}) {
            if (blck == 256 && blocks > 16) continue;
            const int n = blocks * blck;
            for (int nrc = 1; nrc <= traits->nrows; nrc++) {
                std::vector<float> xf, yf;
                for (int r = 0; r < nrc; r++) {
                    const auto a = random_row(n), b = random_row(n);
                    xf.insert(xf.end(), a.begin(), a.end());
                    yf.insert(yf.end(), b.begin(), b.end());
                }
                const auto qx = quantize(c.type, xf, n, nrc), qy = quantize(vdt, yf, n, nrc);
                const size_t bx = ggml_row_size(c.type, n), by = ggml_row_size(vdt, n), bs = 4;
                std::vector<float> got(bs * nrc, NAN);
                c.fn(n, got.data(), bs, qx.data(), bx, qy.data(), by, nrc);

                double worst = 0.0;
                for (int i = 0; i < nrc; i++) {      // x row i
                    const auto xd = dequantize(c.type, qx.data() + i * bx, n);
                    for (int j = 0; j < nrc; j++) {  // y row j: result s[j*bs + i]
                        const auto yd = dequantize(vdt, qy.data() + j * by, n);
                        double ref = 0.0, scale = 1e-30;
                        for (int b = 0; b < blocks; b++) {
                            double part = 0.0;
                            for (int k = b * blck; k < (b + 1) * blck; k++) part += (double) xd[k] * yd[k];
                            if (c.type == GGML_TYPE_Q4_1) part += q4_1_min_correction(qx.data() + i * bx, qy.data() + j * by, b);
                            ref += part;
                            scale += fabs(part);
                        }
                        const double e = fabs(got[j * bs + i] - ref) / scale;
                        worst = std::isnan(e) ? INFINITY : std::max(worst, e);
                    }
                }
                printf("vec_dot %s n=%d nrc=%d max_rel_err %.3e\n", c.name, n, nrc, worst);
            }
        }
    }
    return 0;
}
