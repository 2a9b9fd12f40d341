// The patched tree's x86 Q4_0 GEMM/GEMV for the q4_0_8x8 layout (ggml-cpu/arch/x86/q4_0x8-*.h), on
// any x86 host, whichever of them its build runs. One source, three programs (native/CMakeLists.txt):
//   mode avx2:   the AVX2 kernels (q4_0x8-avx2.h), compiled at x86-64-v3;
//   mode native: the AVX-512 kernels, both flavours (VPDPBUSD with VNNI, VPMADDUBSW without),
//                compiled for a CPU with AVX-512 F/BW/VNNI;
//   mode simde:  the same AVX-512 code with -DQ4_0X8_SIMDE against SIMDe (portable implementations
//                of the intrinsics, emulated with AVX2) at x86-64-v3, on any x86 CPU.
//
// It prints "mode <mode>", then per case one line:
//   <avx2|avx512> <vnni|maddubs> <gemm|gemv|gemv_4_streams|gemv_rows> K=<k> N=<n> M=<m> max_rel_err <e> hash <h> build_hash <h>
// max_rel_err: against ggml's scalar _generic kernel (float accumulation order only; relative to
// the row's largest |output|). hash: the output bits; build_hash: the same inputs through the
// build's own ggml_gemm/gemv_q4_0_8x8_q8_0, which must give the same bits (every x86 kernel gives
// stock's). Built against the patched build; run by tests/test_q4_0x8_kernels.py.
#include "ggml.h"
#include "ggml-cpu.h"

#if defined(Q4_0X8_SIMDE)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
// SIMDe 0.7.4 (Debian 12) has no 512-bit int->float or fp16->float conversion: two 256-bit halves.
static inline __m512 q4_0x8_simde_cvtepi32_ps(__m512i v) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_cvtepi32_ps(_mm512_castsi512_si256(v))),
                              _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(v, 1)), 1);
}
static inline __m512 q4_0x8_simde_cvtph_ps(__m256i h) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_castsi256_si128(h))),
                              _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), 1);
}
#define _mm512_cvtepi32_ps q4_0x8_simde_cvtepi32_ps
#define _mm512_cvtph_ps q4_0x8_simde_cvtph_ps
// ... and its alias for _mm512_madd_epi16 takes the four arguments of the masked form.
#undef _mm512_madd_epi16
#define _mm512_madd_epi16 simde_mm512_madd_epi16
static const char * const MODE = "simde";
#elif defined(Q4_0X8_AVX2)
#include <immintrin.h>
#if defined(__AVX512F__) || !defined(__AVX2__) || !defined(__F16C__) || !defined(__FMA__)
#error "avx2 mode is built at -march=x86-64-v3: AVX2, F16C and FMA, no AVX-512"
#endif
static const char * const MODE = "avx2";
#else
#include <immintrin.h>
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VNNI__)
#error "native mode needs AVX-512 F/BW/VNNI: build with -march=native on such a CPU, or -DQ4_0X8_SIMDE"
#endif
static const char * const MODE = "native";
#endif

// The width's kernels, after the intrinsics (SIMDe's aliases) of the mode above.
#include "ggml-cpu/repack.h"
#if defined(Q4_0X8_AVX2)
#include "ggml-cpu/arch/x86/q4_0x8-avx2.h"
#else
#include "ggml-cpu/arch/x86/q4_0x8-avx512.h"
#endif

#include "../q4_0x8_layout.h"

#include <cstdio>

using gemm_fn = void (*)(int, float *, size_t, const void *, const void *, int, int);
using gemv_fn = void (*)(int, float *, const void *, const void *, int);

// One flavour of one width's kernels; nullptr for a kernel the width does not have.
struct kernels {
    const char * width;
    const char * flavour;
    gemm_fn gemm;
    gemv_fn gemv;
    gemv_fn gemv_4_streams;  // one row per call
    gemm_fn gemv_rows;       // all the rows in one call, as batched decode makes it
};

static void report(const kernels & ks, const char * kind, int64_t k, int64_t n, int64_t m, double err,
                   uint64_t hash, uint64_t build_hash) {
    printf("%s %s %s K=%lld N=%lld M=%lld max_rel_err %.3e hash %016llx build_hash %016llx\n", ks.width, ks.flavour,
           kind, (long long) k, (long long) n, (long long) m, err, (unsigned long long) hash,
           (unsigned long long) build_hash);
}

static void check_gemv(const kernels & ks, const char * kind, gemv_fn gemv, const std::vector<uint8_t> & w,
                       const std::vector<float> & x, int64_t k, int64_t n, int64_t m) {
    const auto from_float = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
    std::vector<uint8_t> row(ggml_row_size(GGML_TYPE_Q8_0, k));
    std::vector<float> got(n), ref(n), build(n);
    double worst = 0.0;
    uint64_t hash = 1469598103934665603ull, build_hash = hash;
    for (int64_t r = 0; r < m; r++) {
        from_float(x.data() + r * k, row.data(), k);
        gemv(k, got.data(), w.data(), row.data(), n);
        ggml_gemv_q4_0_8x8_q8_0_generic(k, ref.data(), n, w.data(), row.data(), 1, n);
        ggml_gemv_q4_0_8x8_q8_0(k, build.data(), n, w.data(), row.data(), 1, n);
        worst = std::max(worst, max_rel_err(got.data(), ref.data(), 1, n));
        hash = fnv1a(got.data(), n, hash);
        build_hash = fnv1a(build.data(), n, build_hash);
    }
    report(ks, kind, k, n, m, worst, hash, build_hash);
}

// All m rows in one call. The build takes them in one call too where it has AVX-512, else row by
// row: each row's bits must be the same.
static void check_gemv_rows(const kernels & ks, const std::vector<uint8_t> & w, const std::vector<float> & x,
                            int64_t k, int64_t n, int64_t m) {
    const auto from_float = ggml_get_type_traits_cpu(GGML_TYPE_Q8_0)->from_float;
    const size_t row_bytes = ggml_row_size(GGML_TYPE_Q8_0, k);
    std::vector<uint8_t> rows(m * row_bytes);
    for (int64_t r = 0; r < m; r++) {
        from_float(x.data() + r * k, rows.data() + r * row_bytes, k);
    }
    std::vector<float> got(m * n), ref(m * n), build(m * n);
    ks.gemv_rows(k, got.data(), n, w.data(), rows.data(), m, n);
    for (int64_t r = 0; r < m; r++) {
        ggml_gemv_q4_0_8x8_q8_0_generic(k, ref.data() + r * n, n, w.data(), rows.data() + r * row_bytes, 1, n);
        if (!ggml_cpu_has_avx512()) {
            ggml_gemv_q4_0_8x8_q8_0(k, build.data() + r * n, n, w.data(), rows.data() + r * row_bytes, 1, n);
        }
    }
    if (ggml_cpu_has_avx512()) {
        ggml_gemv_q4_0_8x8_q8_0(k, build.data(), n, w.data(), rows.data(), m, n);
    }
    report(ks, "gemv_rows", k, n, m, max_rel_err(got.data(), ref.data(), m, n), fnv1a(got.data(), m * n),
           fnv1a(build.data(), m * n));
}

static void check(const kernels & ks, int64_t k, int64_t n, int64_t m) {
    std::mt19937 seeded(k * 1000003 + n * 101 + m);  // the same inputs for every flavour
    rng = seeded;
    std::vector<uint8_t> q(n * (k / 32) * Q4_0_BLOCK_BYTES);
    const std::vector<float> f = random_matrix(n, k, 0.02f);
    ggml_quantize_chunk(GGML_TYPE_Q4_0, f.data(), q.data(), 0, n, k, nullptr);
    const std::vector<uint8_t> w = to_q4_0x8(q, k, n);
    const std::vector<float> x = random_matrix(m, k, 1.0f);
    std::vector<float> got(m * n), ref(m * n), build(m * n);

    if (m % 4 == 0) {
        const std::vector<uint8_t> xq = quantize_q8_0x4(x, k, m);
        ks.gemm(k, got.data(), n, w.data(), xq.data(), m, n);
        ggml_gemm_q4_0_8x8_q8_0_generic(k, ref.data(), n, w.data(), xq.data(), m, n);
        ggml_gemm_q4_0_8x8_q8_0(k, build.data(), n, w.data(), xq.data(), m, n);
        report(ks, "gemm", k, n, m, max_rel_err(got.data(), ref.data(), m, n), fnv1a(got.data(), m * n),
               fnv1a(build.data(), m * n));
    }
    // Every GEMV, whichever this CPU's build runs: each must give the build's bits.
    check_gemv(ks, "gemv", ks.gemv, w, x, k, n, m);
    if (ks.gemv_4_streams) {
        check_gemv(ks, "gemv_4_streams", ks.gemv_4_streams, w, x, k, n, m);
    }
    if (ks.gemv_rows) {
        check_gemv_rows(ks, w, x, k, n, m);
    }
}

#if defined(Q4_0X8_AVX2)
static const kernels KERNELS[] = {{"avx2", "maddubs", q4_0x8_avx2::gemm, q4_0x8_avx2::gemv, nullptr, nullptr}};
#else
// gemv_4_streams one row per call (bs = n: the outputs' row stride).
template <bool VNNI>
static void gemv_4_streams_one_row(int n, float * s, const void * vx, const void * vy, int nc) {
    q4_0x8_avx512::gemv_4_streams<VNNI, 1>(n, s, n, vx, vy, nc);
}
static const kernels KERNELS[] = {
    {"avx512", "vnni", q4_0x8_avx512::gemm<true>, q4_0x8_avx512::gemv<true>, gemv_4_streams_one_row<true>,
     q4_0x8_avx512::gemv_rows<true>},
    {"avx512", "maddubs", q4_0x8_avx512::gemm<false>, q4_0x8_avx512::gemv<false>, gemv_4_streams_one_row<false>,
     q4_0x8_avx512::gemv_rows<false>},
};
#endif

int main() {
    ggml_cpu_init();  // the fp16 tables the scalar reference and the quantizers use
    printf("mode %s\n", MODE);
    // K: one block, a Qwen2.5-0.5B hidden size, its ffn_down inner size, Gemma 3 270M's hidden size
    // (20 blocks). N: one column group (no partner for the 16-column pass), odd numbers of groups
    // (3: none for a 4-stream pass; 17: four passes and one group left over), even ones (4: one
    // 4-stream pass; 6: one, and two groups left over). M: decode, the 4-row and 8-row GEMM passes
    // and their mixes; for all rows at once, one pass of 1-8 rows, then 8 + 4, 8 + 8 + 4 and eight.
    const int64_t shapes[][2] = {{32, 8}, {896, 24}, {4864, 32}, {896, 136}, {640, 48}};
    const int64_t rows[] = {1, 3, 4, 8, 12, 20, 64};
    for (const auto & s : shapes) {
        for (int64_t m : rows) {
            for (const kernels & ks : KERNELS) {
                check(ks, s[0], s[1], m);
            }
        }
    }
    return 0;
}
