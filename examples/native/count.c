/* A native program that counts to N, 20 ms a step, saving a checkpoint
 * every 10 steps through zorilla.h's native library; a worker that
 * replaces it after its node is lost resumes from the latest checkpoint.
 *
 *   gcc -O2 -I examples/include examples/native/count.c \
 *       sdk/native/zorilla_native.c -o count */
#include "zorilla.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100;
    long at = 0;
    if (zorilla_checkpoint_size() == (int32_t)sizeof at) zorilla_checkpoint_load(&at, sizeof at);
    printf("count rank=%d start=%ld\n", zorilla_rank(), at);
    fflush(stdout);
    for (long i = at; i < n; i++) {
        usleep(20000);
        if ((i + 1) % 10 == 0) {
            long done = i + 1;
            int copies = zorilla_checkpoint_save(&done, sizeof done);
            printf("count checkpoint=%ld copies=%d\n", done, copies);
            fflush(stdout);
        }
    }
    printf("count done=%ld\n", n);
    return 0;
}
