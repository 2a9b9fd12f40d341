// STREAM-style memory bandwidth: read (sum), copy and triad over arrays far larger than the
// caches, with OpenMP threads as set by OMP_NUM_THREADS. Prints best-of-N GB/s as JSON.
// The arrays ask for transparent huge pages, as the patched ggml's weight buffers do (patch 0016):
// with 4 KiB pages the page walks cap one core's bandwidth, and the bound would be the page size's,
// not the memory's (bench/results/README.md, section "Zen 4 AVX-512 host").
// huge_page_kib says how much of the arrays the kernel put on huge pages.
// Usage: stream N_ELEMENTS REPEATS
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static double now(void) { return omp_get_wtime(); }

static double * alloc_huge(long n) {
    const size_t huge = 2u << 20, bytes = n * sizeof(double);
    void * p = NULL;
    if (posix_memalign(&p, huge, bytes) != 0) return NULL;
    madvise(p, bytes & ~(size_t) 4095, MADV_HUGEPAGE);
    return p;
}

static long anon_huge_kib(void) {
    FILE * f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "AnonHugePages:", 14) == 0) kib = atol(line + 14);
    }
    if (f) fclose(f);
    return kib;
}

int main(int argc, char ** argv) {
    const long n = argc > 1 ? atol(argv[1]) : 1L << 25;
    const int reps = argc > 2 ? atoi(argv[2]) : 10;
    double * a = alloc_huge(n);
    double * b = alloc_huge(n);
    double * c = alloc_huge(n);
    if (!a || !b || !c) { fprintf(stderr, "stream: out of memory\n"); return 1; }
    // First touch from the threads that later use each page.
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) { a[i] = 1.0; b[i] = 2.0; c[i] = 0.0; }
    const long huge_kib = anon_huge_kib();

    double best_read = 1e30, best_copy = 1e30, best_triad = 1e30, sink = 0.0;
    for (int r = 0; r < reps; r++) {
        double t = now(), s = 0.0;
        #pragma omp parallel for simd schedule(static) reduction(+:s)
        for (long i = 0; i < n; i++) s += a[i];
        t = now() - t; sink += s; if (t < best_read) best_read = t;

        t = now();
        #pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) c[i] = a[i];
        t = now() - t; if (t < best_copy) best_copy = t;

        t = now();
        #pragma omp parallel for schedule(static)
        for (long i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
        t = now() - t; if (t < best_triad) best_triad = t;
    }
    const double bytes = (double) n * sizeof(double);
    printf("{\"threads\": %d, \"read_gbs\": %.3f, \"copy_gbs\": %.3f, \"triad_gbs\": %.3f, "
           "\"huge_page_kib\": %ld, \"array_kib\": %ld, \"check\": %g}\n",
           omp_get_max_threads(), bytes / best_read / 1e9, 2 * bytes / best_copy / 1e9,
           3 * bytes / best_triad / 1e9, huge_kib, (long) (3 * bytes / 1024), sink > 0 ? 1.0 : 0.0);
    free(a); free(b); free(c);
    return 0;
}
