/* links (misbehaving): leaves links to its node's files in /outputs, for
 * the node to follow when it sends the outputs home (it must not).
 *
 * On a node the worker's /outputs is STATE/jobs/JOB/RANK/outputs, so
 * "../../../../identity.ed25519" is the node's private key. The guest
 * itself cannot follow these links (the sandbox refuses), but it may make
 * them. In /outputs it makes:
 *   up1 .. up8     -> ../identity.ed25519 .. ../../../../../../../../identity.ed25519
 *   passwd, environ, zero -> enough "../" to reach / then etc/passwd,
 *                     proc/self/environ, dev/zero
 *   abs-passwd, abs-environ, abs-zero -> the same, absolute (WASI refuses)
 *   state          -> ../../../.. (the node's state directory)
 *   self           -> self
 *   sub/key        -> ../../../../../identity.ed25519
 *   sub/deep.txt   an ordinary file in a subdirectory: "deep\n"
 *   ok.txt         an ordinary file: "inside\n"
 * A FIFO it cannot make: WASI has no mkfifo.
 *
 * Prints one line per link, "made NAME" or "refused NAME", then
 * "links: N made", and exits 0. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int made;

static void link_to(const char *target, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "/outputs/%s", name);
    if (symlink(target, path) == 0) {
        made++;
        printf("made %s\n", name);
    } else {
        printf("refused %s\n", name);
    }
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void) {
    char target[512];
    char name[32];
    for (int depth = 1; depth <= 8; depth++) {
        target[0] = '\0';
        for (int i = 0; i < depth; i++) {
            strcat(target, "../");
        }
        strcat(target, "identity.ed25519");
        snprintf(name, sizeof name, "up%d", depth);
        link_to(target, name);
    }
    /* 40 levels up is / on any node: ".." of / is / itself. */
    char root[160] = "";
    for (int i = 0; i < 40; i++) {
        strcat(root, "../");
    }
    const char *files[][2] = {
        {"passwd", "etc/passwd"},
        {"environ", "proc/self/environ"},
        {"zero", "dev/zero"},
    };
    for (int i = 0; i < 3; i++) {
        snprintf(target, sizeof target, "%s%s", root, files[i][1]);
        link_to(target, files[i][0]);
        snprintf(target, sizeof target, "/%s", files[i][1]);
        snprintf(name, sizeof name, "abs-%s", files[i][0]);
        link_to(target, name);
    }
    link_to("../../../..", "state");
    link_to("self", "self");
    mkdir("/outputs/sub", 0755);
    link_to("../../../../../identity.ed25519", "sub/key");
    write_file("/outputs/sub/deep.txt", "deep\n");
    write_file("/outputs/ok.txt", "inside\n");
    printf("links: %d made\n", made);
    return 0;
}
