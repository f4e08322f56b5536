/* trap (misbehaving): prints a line, then executes `unreachable`. */
#include <stdio.h>

int main(void) {
    printf("about to trap\n");
    fflush(stdout);
    __builtin_trap();
}
