/* sum: the README's example worker. Every rank sends rank+1 to rank 0,
 * which adds them up and prints the sum (size*(size+1)/2). */
#include <stdio.h>
#include "zorilla.h"

int main(void) {
    int32_t rank = zorilla_rank(), size = zorilla_size();
    int64_t mine = rank + 1, sum = 0, part;
    if (rank != 0) return zorilla_send(0, &mine, sizeof mine) < 0;
    sum = mine;
    for (int i = 1; i < size; i++) {
        int32_t from;
        if (zorilla_recv(&from, &part, sizeof part, -1) < 0) return 1;
        sum += part;
    }
    printf("sum over %d ranks = %lld\n", size, (long long)sum);
    return 0;
}
