/* flood (misbehaving): prints to stdout without end. A sandbox must end it at
 * its output limit. */
#include <stdio.h>

int main(void) {
    for (;;) fputs("All work and no play makes Jack a dull boy.\n", stdout);
}
