/* spin (misbehaving): prints one line, then loops for ever without calling
 * the host. A sandbox must end it at its CPU or wall-clock limit, or when it
 * is cancelled. */
#include <stdio.h>

static volatile unsigned long counter;

int main(void) {
    printf("spinning\n");
    fflush(stdout);
    for (;;) counter++;
}
