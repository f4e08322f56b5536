/* hello: the smallest useful Zorilla job.
 *
 * Reads a name from /inputs/name.txt (the job's read-only inputs), writes a
 * greeting to /outputs/greeting.txt (the job's writable outputs) and prints
 * it, with this worker's arguments and its GREETING environment variable,
 * then notes on stderr what it wrote.
 * Exits 2 if the input is missing, 3 if the output cannot be written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    char name[256];
    FILE *in = fopen("/inputs/name.txt", "r");
    if (!in) {
        fprintf(stderr, "hello: cannot open /inputs/name.txt\n");
        return 2;
    }
    if (!fgets(name, sizeof name, in)) name[0] = '\0';
    fclose(in);
    name[strcspn(name, "\r\n")] = '\0';

    const char *greeting = getenv("GREETING");
    if (!greeting) greeting = "Hello";

    FILE *out = fopen("/outputs/greeting.txt", "w");
    if (!out) {
        fprintf(stderr, "hello: cannot create /outputs/greeting.txt\n");
        return 3;
    }
    fprintf(out, "%s, %s!\n", greeting, name);
    fclose(out);

    printf("%s, %s!\n", greeting, name);
    for (int i = 1; i < argc; i++) printf("arg %d: %s\n", i, argv[i]);
    fflush(stdout);
    fprintf(stderr, "hello: wrote /outputs/greeting.txt\n");
    return 0;
}
