/* mandel [size] [iterations]: a floating-point workload. Counts the points
 * of a size x size grid over [-2, 1] x [-1.5, 1.5] that stay in the
 * Mandelbrot set for `iterations` steps (doubles throughout) and prints
 * that count and the total number of steps taken, which depend on every
 * float operation's exact result. For the compute benchmark of
 * deterministic workers (sandbox/benches/compute.rs), where NaN
 * canonicalization costs floating-point code most. Defaults: 600, 500. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int size = argc > 1 ? atoi(argv[1]) : 600;
    int iterations = argc > 2 ? atoi(argv[2]) : 500;
    if (size < 1 || iterations < 1) {
        fprintf(stderr, "mandel: size and iterations must be positive\n");
        return 2;
    }
    long long inside = 0, steps = 0;
    for (int y = 0; y < size; y++) {
        double ci = -1.5 + 3.0 * y / size;
        for (int x = 0; x < size; x++) {
            double cr = -2.0 + 3.0 * x / size;
            double zr = 0.0, zi = 0.0;
            int i = 0;
            while (i < iterations && zr * zr + zi * zi <= 4.0) {
                double t = zr * zr - zi * zi + cr;
                zi = 2.0 * zr * zi + ci;
                zr = t;
                i++;
            }
            steps += i;
            if (i == iterations) inside++;
        }
    }
    printf("mandel size=%d iterations=%d inside=%lld steps=%lld\n", size, iterations, inside, steps);
    return 0;
}
