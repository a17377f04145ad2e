/* C remove(): files, empty and non-empty directories, missing names; rotation code
 * that treats ENOENT as "already gone" must see the file really go. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *root;

static void path(char *b, const char *rel) { snprintf(b, 4096, "%s/%s", root, rel); }

static void try_remove(const char *rel) {
    char p[4096];
    path(p, rel);
    errno = 0;
    int r = remove(p);
    struct stat st;
    printf("remove %s = %d %s; exists after: %d\n", rel, r, r ? strerror(errno) : "ok",
           stat(p, &st) == 0);
}

int main(int argc, char **argv) {
    root = argv[1];
    char p[4096];
    for (int i = 0; i < 5; i++) {
        snprintf(p, sizeof p, "%s/ckpt.%d", root, i);
        FILE *f = fopen(p, "w");
        fprintf(f, "checkpoint %d\n", i);
        fclose(f);
        if (i >= 2) { /* keep the two newest */
            snprintf(p, sizeof p, "ckpt.%d", i - 2);
            try_remove(p);
        }
    }
    path(p, "d");
    mkdir(p, 0755);
    path(p, "d/e");
    mkdir(p, 0755);
    path(p, "d/e/f");
    fclose(fopen(p, "w"));
    try_remove("d");       /* ENOTEMPTY */
    try_remove("d/e/f");   /* file */
    try_remove("d/e");     /* empty directory */
    try_remove("missing"); /* ENOENT */
    try_remove("d/e/x");   /* ENOENT below a missing directory */
    return 0;
}
