/* mdtest-style small files: mdtest_small ROOT N DIRS SIZE PHASE
 *
 * Files ROOT/dK/fI (I = 0..N-1, K = I % DIRS) of SIZE bytes each, contents a function of
 * I (every file differs). PHASE is one of:
 *   create  mkdir ROOT and its DIRS directories; create, write (one write) and close
 *           every file
 *   check   stat every file (regular, SIZE bytes), count each directory's entries, open,
 *           read and close every file comparing its bytes (and that it ends at SIZE)
 *   remove  unlink every file, rmdir the directories and ROOT (a leftover fails rmdir)
 *   all     the three in one process
 * Prints one line per phase: "PHASE N SECONDS RATE" (files per second). Any failure
 * prints what failed with errno and exits 1. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *root;
static long n, dirs;
static size_t size;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what, const char *path) {
    fprintf(stderr, "%s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

static void path_of(char *buf, long i) { snprintf(buf, 4096, "%s/d%ld/f%ld", root, i % dirs, i); }

static void fill(unsigned char *b, long i) {
    uint64_t x = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(i + 1) * 0xbf58476d1ce4e5b9ULL;
    for (size_t k = 0; k < size; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b[k] = (unsigned char)(x >> 24);
    }
}

static void report(const char *phase, double t0) {
    double s = now() - t0;
    printf("%s %ld %.6f %.0f\n", phase, n, s, n / s);
    fflush(stdout);
}

static void create(unsigned char *data) {
    char p[4096];
    if (mkdir(root, 0755)) die("mkdir", root);
    for (long k = 0; k < dirs; k++) {
        snprintf(p, sizeof p, "%s/d%ld", root, k);
        if (mkdir(p, 0755)) die("mkdir", p);
    }
    double t0 = now();
    for (long i = 0; i < n; i++) {
        path_of(p, i);
        fill(data, i);
        int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) die("open", p);
        if (write(fd, data, size) != (ssize_t)size) die("write", p);
        if (close(fd)) die("close", p);
    }
    report("create", t0);
}

static void check(unsigned char *data, unsigned char *got) {
    char p[4096];
    struct stat st;
    double t0 = now();
    for (long i = 0; i < n; i++) {
        path_of(p, i);
        if (stat(p, &st)) die("stat", p);
        if (!S_ISREG(st.st_mode) || st.st_size != (off_t)size) {
            fprintf(stderr, "stat %s: mode %o size %lld, want a regular file of %zu bytes\n", p,
                    st.st_mode, (long long)st.st_size, size);
            exit(1);
        }
    }
    report("stat", t0);
    for (long k = 0; k < dirs; k++) {
        snprintf(p, sizeof p, "%s/d%ld", root, k);
        DIR *d = opendir(p);
        if (!d) die("opendir", p);
        long c = 0;
        struct dirent *e;
        errno = 0;
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) c++;
        if (errno) die("readdir", p);
        closedir(d);
        long want = n / dirs + (k < n % dirs);
        if (c != want) {
            fprintf(stderr, "readdir %s: %ld entries, want %ld\n", p, c, want);
            exit(1);
        }
    }
    t0 = now();
    for (long i = 0; i < n; i++) {
        path_of(p, i);
        fill(data, i);
        int fd = open(p, O_RDONLY);
        if (fd < 0) die("open", p);
        ssize_t r = read(fd, got, size + 1);
        if (r != (ssize_t)size) {
            fprintf(stderr, "read %s: %zd bytes, want %zu (errno %s)\n", p, r, size, strerror(errno));
            exit(1);
        }
        if (memcmp(got, data, size)) {
            fprintf(stderr, "read %s: content differs from what was written\n", p);
            exit(1);
        }
        if (close(fd)) die("close", p);
    }
    report("read", t0);
}

static void remove_all(void) {
    char p[4096];
    double t0 = now();
    for (long i = 0; i < n; i++) {
        path_of(p, i);
        if (unlink(p)) die("unlink", p);
    }
    report("remove", t0);
    for (long k = 0; k < dirs; k++) {
        snprintf(p, sizeof p, "%s/d%ld", root, k);
        if (rmdir(p)) die("rmdir", p);
    }
    if (rmdir(root)) die("rmdir", root);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: mdtest_small ROOT N DIRS SIZE create|check|remove|all\n");
        return 2;
    }
    root = argv[1];
    n = atol(argv[2]);
    dirs = atol(argv[3]);
    size = (size_t)atol(argv[4]);
    const char *phase = argv[5];
    if (n <= 0 || dirs <= 0 || size == 0) return 2;
    unsigned char *data = malloc(size + 1), *got = malloc(size + 1);
    int all = !strcmp(phase, "all");
    if (all || !strcmp(phase, "create")) create(data);
    if (all || !strcmp(phase, "check")) check(data, got);
    if (all || !strcmp(phase, "remove")) remove_all();
    return 0;
}
