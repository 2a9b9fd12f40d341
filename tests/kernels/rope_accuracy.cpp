// RoPE through a build's ggml CPU backend against a long-double reference.
//
// For each case (mode, head size, rotated dims, YaRN, freq_factors, forward/backward, base,
// attention factor: the variants of every supported architecture) it rotates
// random inputs in [-1, 1] at positions from 0 to 2^20 and prints one line per case:
//   case <name> max_abs_err <e> at_pos <p>
// The reference computes theta = p * base^(-2i/n_dims) / ff_i (YaRN-blended as ggml's rope_yarn)
// and its cos and sin in long double, so the error is the build's, whatever its method.
// Built by tests/test_rope.py against each build's libggml; usage: rope_accuracy [threads]
#include "ggml.h"
#include "ggml-cpu.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

struct Case {
    std::string name;
    int mode, ne0, n_dims, n_head;
    float freq_scale, ext_factor;
    bool freq_factors, backward;
    float freq_base = 1000000.0f, attn_factor = 1.0f;
};

static const std::vector<int> POSITIONS = {0, 1, 2, 3, 7, 100, 511, 4095, 32767, 131071, 1 << 20};
static const float BETA_FAST = 32.0f, BETA_SLOW = 1.0f;
static const int N_CTX_ORIG = 32768;

static double run_case(const Case & c, int n_threads, int * worst_pos) {
    const int n_pos = (int) POSITIONS.size();
    ggml_init_params params = {64u << 20, nullptr, false};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, c.ne0, c.n_head, n_pos);
    ggml_tensor * pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_pos);
    ggml_tensor * ff = c.freq_factors ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, c.n_dims / 2) : nullptr;

    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f), ff_dist(1.0f, 8.0f);
    float * xd = (float *) x->data;
    for (int64_t i = 0; i < ggml_nelements(x); i++) xd[i] = uni(rng);
    for (int i = 0; i < n_pos; i++) ((int32_t *) pos->data)[i] = POSITIONS[i];
    if (ff) for (int i = 0; i < c.n_dims / 2; i++) ((float *) ff->data)[i] = ff_dist(rng);

    ggml_tensor * y = c.backward
        ? ggml_rope_ext_back(ctx, x, pos, ff, c.n_dims, c.mode, N_CTX_ORIG, c.freq_base, c.freq_scale, c.ext_factor,
                             c.attn_factor, BETA_FAST, BETA_SLOW)
        : ggml_rope_ext(ctx, x, pos, ff, c.n_dims, c.mode, N_CTX_ORIG, c.freq_base, c.freq_scale, c.ext_factor,
                        c.attn_factor, BETA_FAST, BETA_SLOW);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    if (ggml_graph_compute_with_ctx(ctx, gf, n_threads) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        exit(2);
    }

    float corr[2];
    ggml_rope_yarn_corr_dims(c.n_dims, N_CTX_ORIG, c.freq_base, BETA_FAST, BETA_SLOW, corr);
    long double mscale = c.attn_factor;
    if (c.ext_factor != 0.0f) mscale *= 1.0L + 0.1L * logl(1.0L / c.freq_scale);
    const long double sin_sign = c.backward ? -1.0L : 1.0L;
    const int half = c.n_dims / 2;
    const bool neox = c.mode == GGML_ROPE_TYPE_NEOX;

    double worst = 0.0;
    const float * yd = (const float *) y->data;
    for (int ip = 0; ip < n_pos; ip++) {
        for (int h = 0; h < c.n_head; h++) {
            const float * src = xd + ((int64_t) ip * c.n_head + h) * c.ne0;
            const float * dst = yd + ((int64_t) ip * c.n_head + h) * c.ne0;
            std::vector<long double> ref(src, src + c.ne0);  // channels past n_dims pass through
            for (int i = 0; i < half; i++) {
                long double theta = POSITIONS[ip] * powl(c.freq_base, -2.0L * i / c.n_dims);
                if (ff) theta /= ((const float *) ff->data)[i];
                long double mix = 0.0L;
                if (c.ext_factor != 0.0f) {
                    const long double ramp = (i - corr[0]) / fmaxl(0.001L, corr[1] - corr[0]);
                    mix = (1.0L - fminl(1.0L, fmaxl(0.0L, ramp))) * c.ext_factor;
                }
                theta *= c.freq_scale * (1.0L - mix) + mix;
                const long double cs = cosl(theta) * mscale, sn = sinl(theta) * mscale * sin_sign;
                const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
                ref[i0] = src[i0] * cs - src[i1] * sn;
                ref[i1] = src[i0] * sn + src[i1] * cs;
            }
            for (int i = 0; i < c.ne0; i++) {
                const double err = fabs((double) (dst[i] - ref[i]));
                if (err > worst || std::isnan(err)) {
                    worst = std::isnan(err) ? INFINITY : err;
                    *worst_pos = POSITIONS[ip];
                }
            }
        }
    }
    ggml_free(ctx);
    return worst;
}

int main(int argc, char ** argv) {
    const int n_threads = argc > 1 ? atoi(argv[1]) : 2;
    const int NORMAL = GGML_ROPE_TYPE_NORMAL, NEOX = GGML_ROPE_TYPE_NEOX;
    const std::vector<Case> cases = {
        {"neox-64",                  NEOX,   64,  64, 14, 1.0f,  0.0f, false, false},  // Qwen2.5-0.5B
        {"neox-128",                 NEOX,  128, 128,  8, 1.0f,  0.0f, false, false},  // Qwen2.5-1.5B+, Qwen3
        {"normal-64",                NORMAL, 64,  64,  4, 1.0f,  0.0f, false, false},
        {"neox-40-tail",             NEOX,   40,  40,  3, 1.0f,  0.0f, false, false},  // 20 pairs: vector tails
        {"normal-6-tail",            NORMAL,  6,   6,  3, 1.0f,  0.0f, false, false},
        {"neox-partial-32-of-96",    NEOX,   96,  32,  2, 1.0f,  0.0f, false, false},
        {"normal-partial-32-of-96",  NORMAL, 96,  32,  2, 1.0f,  0.0f, false, false},
        {"neox-64-yarn",             NEOX,   64,  64,  2, 0.25f, 1.0f, false, false},
        {"neox-64-freq-factors",     NEOX,   64,  64,  2, 1.0f,  0.0f, true,  false},
        {"neox-64-backward",         NEOX,   64,  64,  2, 1.0f,  0.0f, false, true},
        {"normal-64-yarn-backward",  NORMAL, 64,  64,  2, 0.5f,  1.0f, true,  true},
        // Gemma 3 (head 256): sliding-window layers at base 10^4, global layers at 10^6, one model
        {"gemma3-local-neox-256",    NEOX,  256, 256,  1, 1.0f,  0.0f, false, false, 10000.0f},
        {"gemma3-global-neox-256",   NEOX,  256, 256,  1, 1.0f,  0.0f, false, false, 1000000.0f},
        // Llama 3.x: rope_freqs from its llama3 scaling, base 5 x 10^5
        {"llama3-normal-128-freq-factors", NORMAL, 128, 128, 1, 1.0f, 0.0f, true, false, 500000.0f},
        // Phi-3 longrope (head 96) and Phi-4-mini (96 of 128 rotated): factors and attention factor
        {"phi3-neox-96-longrope",    NEOX,   96,  96,  2, 1.0f,  0.0f, true,  false, 10000.0f, 1.19f},
        {"phi4-neox-96-of-128-longrope", NEOX, 128, 96, 2, 1.0f, 0.0f, true,  false, 10000.0f, 1.19f},
    };
    for (const Case & c : cases) {
        int at = -1;
        const double err = run_case(c, n_threads, &at);
        printf("case %s max_abs_err %.3e at_pos %d\n", c.name.c_str(), err, at);
    }
    return 0;
}
