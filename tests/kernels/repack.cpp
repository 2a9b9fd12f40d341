// Repacked weights (Q4_0, or the TYPE named) through a build's ggml CPU backend.
//
// Per weight shape it prints "layout K=<k> N=<n> <repacked|none>": whether the build has a repacked
// layout for the type on this CPU (with none, nothing else is printed for the shape). Then for each
// case one line:
//   kernel <gemm|gemv> K=<k> N=<n> M=<m> max_rel_err <e> hash <h>
//       (Q4_0) the build's ggml_gemm/gemv_q4_0_8x8_q8_0 against ggml's own scalar _generic kernel on the
//       same weights in the q4_0_8x8 layout (made here: the CPU may pick another layout) and the
//       same quantized activations. Integer block sums are exact in both, so
//       the error is float accumulation order only; relative to the row's largest |output|. The
//       hash of the kernel's output bits lets two builds be compared (inputs are seeded).
//   mul_mat K=<k> N=<n> M=<m> max_rel_err <e> hash <h>
//       MUL_MAT with the weight in a CPU_REPACK buffer (whatever layout the build picks for this
//       CPU) against the same weight in a plain buffer; hash: the repacked product's bits.
//   one_row K=<k> N=<n> M=<m> mismatches <count>
//       (M > 1) MUL_MAT of the last activation row alone, the decode case, against that row of the
//       M-row MUL_MAT: bit for bit where that row goes through the chunked GEMV (M not a multiple
//       of 4; in the patched build with AVX-512, every M under 16: batched decode).
//   mul_mat_add K=<k> N=<n> M=<m> <bias|residual> mismatches <count>
//       ADD(MUL_MAT(w, last row), bias) and ADD(residual, MUL_MAT(w, last row)) (patched: one fused
//       pass, every thread adding to its own columns) against the lone-row MUL_MAT's output plus
//       the addend, added here: bit for bit.
//   get_rows K=<k> N=<n> <unsupported | mismatches <count>>
//       GET_ROWS from the CPU_REPACK tensor against the plain one (bit for bit when supported).
// Built against each build's libggml and run by tests/test_q4_0_repack.py and test_k_quant_repack.py;
// usage: repack [threads] [q4_0|q4_K|q6_K]
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include "q4_0x8_layout.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>

static ggml_backend_buffer_type_t repack_buft(ggml_backend_t cpu) {
    ggml_backend_dev_t dev = ggml_backend_get_device(cpu);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * b = get_extra ? get_extra(dev) : nullptr; b && *b; b++) {
        if (std::string(ggml_backend_buft_name(*b)) == "CPU_REPACK") return *b;
    }
    fprintf(stderr, "no CPU_REPACK buffer type in this build\n");
    exit(2);
}

struct Weights {
    ggml_context * ctx;
    ggml_tensor * repacked, * plain;
    ggml_backend_buffer_t buf_repacked, buf_plain;
    std::vector<uint8_t> q4_0x8;  // Q4_0: the plain blocks in the q4_0_8x8 layout
};

static void free_weights(Weights * w) {
    ggml_backend_buffer_free(w->buf_repacked);
    ggml_backend_buffer_free(w->buf_plain);
    ggml_free(w->ctx);
    delete w;
}

// nullptr where the build has no repacked layout for the type on this CPU.
static Weights * make_weights(ggml_backend_t cpu, ggml_type type, int64_t k, int64_t n) {
    Weights * w = new Weights;
    ggml_init_params params = {2 * ggml_tensor_overhead(), nullptr, true};
    w->ctx = ggml_init(params);
    w->repacked = ggml_new_tensor_2d(w->ctx, type, k, n);
    w->plain    = ggml_new_tensor_2d(w->ctx, type, k, n);
    w->buf_repacked = ggml_backend_buft_alloc_buffer(repack_buft(cpu), ggml_nbytes(w->repacked));
    w->buf_plain    = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), ggml_nbytes(w->plain));
    ggml_backend_tensor_alloc(w->buf_repacked, w->repacked, ggml_backend_buffer_get_base(w->buf_repacked));
    ggml_backend_tensor_alloc(w->buf_plain, w->plain, ggml_backend_buffer_get_base(w->buf_plain));
    const bool repacked = w->repacked->extra != nullptr;  // the layout the build picked, if any
    printf("layout K=%lld N=%lld %s\n", (long long) k, (long long) n, repacked ? "repacked" : "none");
    if (!repacked) {
        free_weights(w);
        return nullptr;
    }

    const std::vector<float> f = random_matrix(n, k, 0.02f);
    std::vector<uint8_t> q(ggml_nbytes(w->plain));
    ggml_quantize_chunk(type, f.data(), q.data(), 0, n, k, nullptr);
    ggml_backend_tensor_set(w->plain, q.data(), 0, q.size());
    ggml_backend_tensor_set(w->repacked, q.data(), 0, q.size());  // repacks into the CPU's layout
    if (type == GGML_TYPE_Q4_0) {
        w->q4_0x8 = to_q4_0x8(q, k, n);
    }
    return w;
}

// The q4_0_8x8 kernels straight.
static void check_kernels(const Weights & w, int64_t k, int64_t n, int64_t m) {
    const std::vector<float> x = random_matrix(m, k, 1.0f);
    std::vector<float> got(m * n), ref(m * n);
    if (m % 4 == 0) {
        const std::vector<uint8_t> xq = quantize_q8_0x4(x, k, m);
        ggml_gemm_q4_0_8x8_q8_0(k, got.data(), n, w.q4_0x8.data(), xq.data(), m, n);
        ggml_gemm_q4_0_8x8_q8_0_generic(k, ref.data(), n, w.q4_0x8.data(), xq.data(), m, n);
        printf("kernel gemm K=%lld N=%lld M=%lld max_rel_err %.3e hash %016llx\n", (long long) k, (long long) n,
               (long long) m, max_rel_err(got.data(), ref.data(), m, n), (unsigned long long) fnv1a(got.data(), m * n));
    }
    const auto from_float = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
    std::vector<uint8_t> row(ggml_row_size(GGML_TYPE_Q8_0, k));
    double worst = 0.0;
    uint64_t hash = 1469598103934665603ull;
    for (int64_t r = 0; r < m; r++) {
        from_float(x.data() + r * k, row.data(), k);
        ggml_gemv_q4_0_8x8_q8_0(k, got.data(), n, w.q4_0x8.data(), row.data(), 1, n);
        ggml_gemv_q4_0_8x8_q8_0_generic(k, ref.data(), n, w.q4_0x8.data(), row.data(), 1, n);
        worst = std::max(worst, max_rel_err(got.data(), ref.data(), 1, n));
        hash = fnv1a(got.data(), n, hash);
    }
    printf("kernel gemv K=%lld N=%lld M=%lld max_rel_err %.3e hash %016llx\n", (long long) k, (long long) n,
           (long long) m, worst, (unsigned long long) hash);
}

// MUL_MAT and GET_ROWS as graphs on the CPU backend, repacked weight against plain weight.
static void check_ops(ggml_backend_t cpu, const Weights & w, int64_t k, int64_t n, int64_t m) {
    ggml_init_params params = {64 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * x   = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, m);
    ggml_tensor * ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 2 * n + 1);
    ggml_tensor * bias = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n);
    ggml_tensor * residual = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, 1);
    ggml_backend_buffer_t inputs = ggml_backend_alloc_ctx_tensors(ctx, cpu);

    const std::vector<float> xf = random_matrix(m, k, 1.0f);
    ggml_backend_tensor_set(x, xf.data(), 0, ggml_nbytes(x));
    std::vector<int32_t> idv;
    for (int64_t i = 0; i < n; i++) idv.push_back((int32_t) i);            // every row once
    for (int64_t i = 0; i <= n; i++) idv.push_back((int32_t) ((i * 7919) % n));  // and repeats, out of order
    ggml_backend_tensor_set(ids, idv.data(), 0, ggml_nbytes(ids));
    const std::vector<float> bias_f = random_matrix(1, n, 1.0f), residual_f = random_matrix(1, n, 10.0f);
    ggml_backend_tensor_set(bias, bias_f.data(), 0, ggml_nbytes(bias));
    ggml_backend_tensor_set(residual, residual_f.data(), 0, ggml_nbytes(residual));

    ggml_tensor * mm_rep   = ggml_mul_mat(ctx, w.repacked, x);
    ggml_tensor * mm_plain = ggml_mul_mat(ctx, w.plain, x);
    ggml_tensor * x_last   = ggml_view_2d(ctx, x, k, 1, x->nb[1], (m - 1) * x->nb[1]);
    ggml_tensor * mm_last  = ggml_mul_mat(ctx, w.repacked, x_last);
    // Each product is used by its ADD alone, as Q/K/V with their biases and o/down with the residual.
    ggml_tensor * plus_bias     = ggml_add(ctx, ggml_mul_mat(ctx, w.repacked, x_last), bias);
    ggml_tensor * plus_residual = ggml_add(ctx, residual, ggml_mul_mat(ctx, w.repacked, x_last));
    ggml_tensor * gr_rep   = ggml_get_rows(ctx, w.repacked, ids);
    ggml_tensor * gr_plain = ggml_get_rows(ctx, w.plain, ids);
    const bool get_rows_ok = ggml_backend_supports_op(cpu, gr_rep);

    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, mm_rep);
    ggml_build_forward_expand(gf, mm_plain);
    ggml_build_forward_expand(gf, mm_last);
    ggml_build_forward_expand(gf, plus_bias);
    ggml_build_forward_expand(gf, plus_residual);
    ggml_build_forward_expand(gf, gr_plain);
    if (get_rows_ok) ggml_build_forward_expand(gf, gr_rep);
    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    ggml_gallocr_alloc_graph(galloc, gf);
    if (ggml_backend_graph_compute(cpu, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "graph compute failed\n");
        exit(2);
    }

    std::vector<float> a(m * n), b(m * n);
    ggml_backend_tensor_get(mm_rep, a.data(), 0, ggml_nbytes(mm_rep));
    ggml_backend_tensor_get(mm_plain, b.data(), 0, ggml_nbytes(mm_plain));
    printf("mul_mat K=%lld N=%lld M=%lld max_rel_err %.3e hash %016llx\n", (long long) k, (long long) n, (long long) m,
           max_rel_err(a.data(), b.data(), m, n), (unsigned long long) fnv1a(a.data(), m * n));
    std::vector<float> last(n);
    ggml_backend_tensor_get(mm_last, last.data(), 0, ggml_nbytes(mm_last));
    if (m > 1) {
        printf("one_row K=%lld N=%lld M=%lld mismatches %d\n", (long long) k, (long long) n, (long long) m,
               memcmp(last.data(), a.data() + (m - 1) * n, n * sizeof(float)) != 0);
    }
    for (auto [name, sum, addend] : {std::tuple{"bias", plus_bias, &bias_f}, std::tuple{"residual", plus_residual, &residual_f}}) {
        std::vector<float> got(n);
        ggml_backend_tensor_get(sum, got.data(), 0, ggml_nbytes(sum));
        int64_t mismatches = 0;
        for (int64_t i = 0; i < n; i++) {
            const float want = last[i] + (*addend)[i];
            mismatches += memcmp(&got[i], &want, sizeof(float)) != 0;
        }
        printf("mul_mat_add K=%lld N=%lld M=%lld %s mismatches %lld\n", (long long) k, (long long) n, (long long) m,
               name, (long long) mismatches);
    }

    if (!get_rows_ok) {
        printf("get_rows K=%lld N=%lld unsupported\n", (long long) k, (long long) n);
    } else {
        std::vector<float> g(ggml_nelements(gr_rep)), h(ggml_nelements(gr_plain));
        ggml_backend_tensor_get(gr_rep, g.data(), 0, ggml_nbytes(gr_rep));
        ggml_backend_tensor_get(gr_plain, h.data(), 0, ggml_nbytes(gr_plain));
        int64_t mismatches = 0;
        for (size_t i = 0; i < g.size(); i++) mismatches += memcmp(&g[i], &h[i], sizeof(float)) != 0;
        printf("get_rows K=%lld N=%lld mismatches %lld\n", (long long) k, (long long) n, (long long) mismatches);
    }
    ggml_gallocr_free(galloc);
    ggml_backend_buffer_free(inputs);
    ggml_free(ctx);
}

int main(int argc, char ** argv) {
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, argc > 1 ? atoi(argv[1]) : 2);
    const std::string type_name = argc > 2 ? argv[2] : "q4_0";
    // Q4_0, K: one block, a Qwen2.5-0.5B hidden size, its ffn_down inner size, Gemma 3 270M's
    // hidden size (20 blocks). Q4_K and Q6_K (256-value super-blocks), K: one super-block, Qwen2.5-1.5B's
    // hidden size and its ffn_down inner size, Qwen2.5-0.5B's ffn_down (19 super-blocks). N: one
    // column tile, a few, and an odd number of tiles. M: decode (1), below/at/above the 4-row GEMM
    // groups, prefill.
    const std::vector<std::array<int64_t, 2>> shapes = type_name == "q4_0"
        ? std::vector<std::array<int64_t, 2>>{{32, 8}, {896, 24}, {4864, 16}, {896, 136}, {640, 40}}
        : std::vector<std::array<int64_t, 2>>{{256, 8}, {1536, 24}, {8960, 16}, {1536, 136}, {4864, 40}};
    const ggml_type type = type_name == "q4_0" ? GGML_TYPE_Q4_0
                         : type_name == "q4_K" ? GGML_TYPE_Q4_K
                         : type_name == "q6_K" ? GGML_TYPE_Q6_K
                                               : GGML_TYPE_COUNT;
    if (type == GGML_TYPE_COUNT) {
        fprintf(stderr, "repack: unknown type %s (q4_0, q4_K, q6_K)\n", type_name.c_str());
        return 2;
    }
    const int64_t rows[] = {1, 3, 4, 5, 8, 13, 64};
    for (const auto & s : shapes) {
        Weights * w = make_weights(cpu, type, s[0], s[1]);
        if (!w) {
            continue;
        }
        for (int64_t m : rows) {
            if (type == GGML_TYPE_Q4_0) {
                check_kernels(*w, s[0], s[1], m);
            }
            check_ops(cpu, *w, s[0], s[1], m);
        }
        free_weights(w);
    }
    ggml_backend_free(cpu);
    return 0;
}
