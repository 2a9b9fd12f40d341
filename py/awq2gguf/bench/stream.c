// STREAM-style memory bandwidth: read (sum), copy and triad over arrays far larger than the
// caches, with OpenMP threads as set by OMP_NUM_THREADS. Prints best-of-N GB/s as JSON.
// Usage: stream N_ELEMENTS REPEATS
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static double now(void) { return omp_get_wtime(); }

int main(int argc, char ** argv) {
    const long n = argc > 1 ? atol(argv[1]) : 1L << 25;
    const int reps = argc > 2 ? atoi(argv[2]) : 10;
    double * a = malloc(n * sizeof(double));
    double * b = malloc(n * sizeof(double));
    double * c = malloc(n * sizeof(double));
    if (!a || !b || !c) { fprintf(stderr, "stream: out of memory\n"); return 1; }
    // First touch from the threads that later use each page.
    #pragma omp parallel for schedule(static)
    for (long i = 0; i < n; i++) { a[i] = 1.0; b[i] = 2.0; c[i] = 0.0; }

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
    printf("{\"threads\": %d, \"read_gbs\": %.3f, \"copy_gbs\": %.3f, \"triad_gbs\": %.3f, \"check\": %g}\n",
           omp_get_max_threads(), bytes / best_read / 1e9, 2 * bytes / best_copy / 1e9,
           3 * bytes / best_triad / 1e9, sink > 0 ? 1.0 : 0.0);
    free(a); free(b); free(c);
    return 0;
}
