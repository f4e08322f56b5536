/* escape (misbehaving): tries to touch files outside its job directory.
 *
 * Usage: escape TOKEN
 *
 * Every attempt uses TOKEN in the file name so the host can check that
 * nothing was created. Prints one line per attempt, writes /outputs/ok.txt
 * (which is allowed), and exits with the number of attempts that succeeded:
 * 0 when the sandbox holds. */
#include <stdio.h>
#include <unistd.h>

static int escaped;

static void attempt(const char *path, const char *mode) {
    FILE *f = fopen(path, mode);
    printf("%s %s: %s\n", mode, path, f ? "ESCAPED" : "refused");
    if (f) {
        escaped++;
        fclose(f);
    }
}

int main(int argc, char **argv) {
    const char *token = argc > 1 ? argv[1] : "zorilla-escape";
    char path[512];
    snprintf(path, sizeof path, "/tmp/%s", token);
    attempt(path, "w");
    snprintf(path, sizeof path, "../%s", token);
    attempt(path, "w");
    snprintf(path, sizeof path, "/outputs/../%s", token);
    attempt(path, "w");
    snprintf(path, sizeof path, "/outputs/../../%s", token);
    attempt(path, "w");
    snprintf(path, sizeof path, "/inputs/%s", token);
    attempt(path, "w");
    attempt("/etc/passwd", "r");
    attempt("/inputs/../../../etc/passwd", "r");
    /* A symlink inside the outputs pointing outside must not be followable. */
    symlink("/tmp", "/outputs/link");
    snprintf(path, sizeof path, "/outputs/link/%s", token);
    attempt(path, "w");
    symlink("../..", "/outputs/up");
    snprintf(path, sizeof path, "/outputs/up/%s", token);
    attempt(path, "w");

    FILE *ok = fopen("/outputs/ok.txt", "w");
    if (ok) {
        fputs("inside\n", ok);
        fclose(ok);
    }
    printf("escape: %d attempts succeeded\n", escaped);
    return escaped;
}
