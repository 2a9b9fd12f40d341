// A fixed Q4_0 matmul workload for `bench arm`: weights K x N in the CPU_REPACK buffer type when
// the build repacks Q4_0 on this CPU (as llama.cpp's loader would put them), else in a plain CPU
// buffer; activations M x K; computed REPS times on one thread.
// The instruction count of one matmul is (count(REPS=3) - count(REPS=1)) / 2, which cancels the
// set-up (random data, quantization, repacking) exactly.
// Usage: mul_mat_q4_0 K N M REPS
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s K N M REPS\n", argv[0]);
        return 2;
    }
    const int64_t k = atoll(argv[1]), n = atoll(argv[2]), m = atoll(argv[3]);
    const int reps = atoi(argv[4]);

    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_dev_t dev = ggml_backend_get_device(cpu);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t)
        ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts");
    ggml_backend_buffer_type_t repack = nullptr;
    for (ggml_backend_buffer_type_t * b = get_extra ? get_extra(dev) : nullptr; b && *b; b++) {
        if (std::string(ggml_backend_buft_name(*b)) == "CPU_REPACK") repack = *b;
    }
    if (!repack) {
        fprintf(stderr, "no CPU_REPACK buffer type\n");
        return 2;
    }

    // Does this build repack Q4_0 on this CPU? Ask with a throwaway weight in a CPU_REPACK buffer.
    bool repacked;
    {
        ggml_init_params probe_params = {3 * ggml_tensor_overhead(), nullptr, true};
        ggml_context * probe = ggml_init(probe_params);
        ggml_tensor * pw = ggml_new_tensor_2d(probe, GGML_TYPE_Q4_0, k, n);
        ggml_backend_buffer_t pbuf = ggml_backend_alloc_ctx_tensors_from_buft(probe, repack);
        repacked = ggml_backend_supports_op(cpu, ggml_mul_mat(probe, pw, ggml_new_tensor_2d(probe, GGML_TYPE_F32, k, m)));
        ggml_backend_buffer_free(pbuf);
        ggml_free(probe);
    }
    fprintf(stderr, "weights in %s\n", repacked ? "CPU_REPACK" : "CPU");

    ggml_init_params wparams = {ggml_tensor_overhead(), nullptr, true};
    ggml_context * wctx = ggml_init(wparams);
    ggml_tensor * w = ggml_new_tensor_2d(wctx, GGML_TYPE_Q4_0, k, n);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, repacked ? repack : ggml_backend_cpu_buffer_type());

    // Deterministic data: the same instructions run for the same shapes, whatever the values.
    std::vector<float> wf(k * n), xf(k * m);
    for (size_t i = 0; i < wf.size(); i++) wf[i] = (float) ((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    for (size_t i = 0; i < xf.size(); i++) xf[i] = (float) ((i * 40503u) % 997) / 498.5f - 1.0f;
    std::vector<uint8_t> wq(ggml_nbytes(w));
    ggml_quantize_chunk(GGML_TYPE_Q4_0, wf.data(), wq.data(), 0, n, k, nullptr);
    ggml_backend_tensor_set(w, wq.data(), 0, wq.size());

    ggml_init_params params = {8 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true};
    ggml_context * ctx = ggml_init(params);
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, m);
    ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    ggml_gallocr_alloc_graph(galloc, gf);
    ggml_backend_tensor_set(x, xf.data(), 0, ggml_nbytes(x));

    for (int r = 0; r < reps; r++) {
        if (ggml_backend_graph_compute(cpu, gf) != GGML_STATUS_SUCCESS) return 1;
    }
    float first;
    ggml_backend_tensor_get(y, &first, 0, sizeof(first));
    printf("y[0] %g\n", first);

    ggml_gallocr_free(galloc);
    ggml_free(ctx);
    ggml_backend_buffer_free(wbuf);
    ggml_free(wctx);
    ggml_backend_free(cpu);
    return 0;
}
