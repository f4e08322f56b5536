/* trap (misbehaving): prints a line, then executes `unreachable` inside
 * a function of its own, `explode`, so that the sentence about the crash
 * names the function that trapped. */
#include <stdio.h>

__attribute__((noinline)) static void explode(void) {
    __builtin_trap();
}

int main(void) {
    printf("about to trap\n");
    fflush(stdout);
    explode();
    return 0;
}
