/* api: exercises every call of the zorilla host API and checks its
 * documented behaviour. Used by the sandbox's tests.
 *
 * Usage: api [watch]
 *
 * Prints one line per check ("ok ..." or "FAIL ...") and exits with the
 * number of failed checks. With "watch", it then waits for one membership
 * change and one message, and prints them:
 *   membership kind=K rank=R size=S
 *   message from R: TEXT
 */
#include <stdio.h>
#include <string.h>
#include "zorilla.h"

static int failures;

static void expect(const char *what, long long got, long long want) {
    if (got == want) {
        printf("ok %s\n", what);
    } else {
        printf("FAIL %s: got %lld, want %lld\n", what, got, want);
        failures++;
    }
}

int main(int argc, char **argv) {
    int32_t rank = zorilla_rank(), size = zorilla_size();
    int32_t src = -1;
    char buf[64];

    expect("send to a rank outside the job", zorilla_send(size, "x", 1), ZORILLA_EBADRANK);
    expect("send to a negative rank", zorilla_send(-1, "x", 1), ZORILLA_EBADRANK);
    expect("send from outside memory", zorilla_send(rank, (void *)0xFFFFFFF0u, 64), ZORILLA_EFAULT);
    expect("send larger than the maximum", zorilla_send(rank, buf, ZORILLA_MAX_MESSAGE + 1), ZORILLA_ETOOBIG);
    expect("recv with nothing waiting", zorilla_recv(&src, buf, sizeof buf, 0), ZORILLA_ETIMEDOUT);
    expect("recv with a 20 ms timeout", zorilla_recv(&src, buf, sizeof buf, 20), ZORILLA_ETIMEDOUT);
    expect("recv into memory outside", zorilla_recv(&src, (void *)0xFFFFFFF0u, 64, 0), ZORILLA_EFAULT);

    expect("send to self", zorilla_send(rank, "hello world", 11), ZORILLA_OK);
    memset(buf, 0, sizeof buf);
    expect("recv into a small buffer reports the length", zorilla_recv(&src, buf, 4, -1), 11);
    expect("nothing copied into the small buffer", buf[0], 0);
    expect("recv again with room", zorilla_recv(&src, buf, sizeof buf, -1), 11);
    expect("message intact", memcmp(buf, "hello world", 11), 0);
    expect("source is self", src, rank);
    expect("message consumed", zorilla_recv(&src, buf, sizeof buf, 0), ZORILLA_ETIMEDOUT);
    expect("send a byte to self", zorilla_send(rank, "x", 1), ZORILLA_OK);
    expect("recv with the longest timeout", zorilla_recv(&src, buf, sizeof buf, INT64_MAX), 1);
    expect("barrier", zorilla_barrier(), ZORILLA_OK);
    struct zorilla_membership ev;
    expect("no membership change yet", zorilla_membership_next(&ev), 0);
    expect("watch_membership returns the old setting", zorilla_watch_membership(0), 0);

    if (argc > 1 && strcmp(argv[1], "watch") == 0) {
        zorilla_watch_membership(1);
        printf("waiting\n");
        fflush(stdout);
        expect("recv interrupted by a membership change", zorilla_recv(&src, buf, sizeof buf, -1),
               ZORILLA_EMEMBERSHIP);
        if (zorilla_membership_next(&ev) == 1)
            printf("membership kind=%d rank=%d size=%d\n", ev.kind, ev.rank, ev.size);
        expect("size follows the change", zorilla_size(), ev.size);
        int32_t n = zorilla_recv(&src, buf, sizeof buf - 1, -1);
        if (n >= 0) {
            buf[n] = '\0';
            printf("message from %d: %s\n", src, buf);
        } else {
            expect("recv after the change", n, 0);
        }
    }
    printf("api: %d failures\n", failures);
    return failures;
}
