/* Failing calls on paths under argv[1]: prints the errno name of each. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char p1[4096], p2[4096];
#define A(rel) (snprintf(p1, sizeof p1, "%s/%s", r, rel), p1)
#define B(rel) (snprintf(p2, sizeof p2, "%s/%s", r, rel), p2)
#define T(expr) do { errno = 0; long _v = (long)(expr); printf("%-48s -> %ld %s\n", #expr, _v < 0 ? -1L : _v, _v < 0 ? strerrorname_np(errno) : "ok"); } while (0)

int main(int argc, char **argv) {
    const char *r = argv[1];
    struct stat st;
    char c;
    mkdir(A("dir"), 0755);
    mkdir(A("dir/sub"), 0755);
    close(open(A("file"), O_CREAT | O_WRONLY, 0644));
    T(open(A("missing"), O_RDONLY));
    T(open(A("missing/x"), O_CREAT | O_WRONLY, 0644));
    T(open(A("file/x"), O_RDONLY));
    T(open(A("file"), O_CREAT | O_EXCL | O_WRONLY, 0644));
    T(open(A("dir"), O_WRONLY));
    T(open(A("dir"), O_RDWR));
    T(open(A("file"), O_RDONLY | O_DIRECTORY));
    T(mkdir(A("dir"), 0755));
    T(mkdir(A("file"), 0755));
    T(mkdir(A("missing/x"), 0755));
    T(rmdir(A("dir")));
    T(rmdir(A("file")));
    T(rmdir(A("missing")));
    T(unlink(A("dir")));
    T(unlink(A("missing")));
    T(stat(A("missing"), &st));
    T(stat(A("file/x"), &st));
    T(access(A("missing"), F_OK));
    T(rename(A("missing"), B("x")));
    T(rename(A("dir"), B("file")));
    T(rename(A("file"), B("dir")));
    T(rename(A("dir"), B("dir/sub/inside")));
    T(truncate(A("dir"), 0));
    T(truncate(A("missing"), 0));
    int ro = open(A("file"), O_RDONLY);
    T(write(ro, "x", 1));
    T(ftruncate(ro, 0));
    T(lseek(ro, -1, SEEK_SET));
    T(lseek(ro, 0, 42));
    T(pread(ro, &c, 1, -1));
    close(ro);
    int wo = open(A("file"), O_WRONLY);
    T(read(wo, &c, 1));
    T(lseek(wo, 5, SEEK_DATA));
    close(wo);
    T(close(wo));
    T(read(wo, &c, 1));
    int d = open(A("dir"), O_RDONLY | O_DIRECTORY);
    T(read(d, &c, 1));
    T(openat(d, "sub", O_RDONLY | O_DIRECTORY) >= 0);
    T(openat(d, "nope", O_RDONLY));
    T(mkdirat(d, "sub", 0755));
    T(unlinkat(d, "sub", 0));
    T(unlinkat(d, "sub", AT_REMOVEDIR));
    T(fstatat(d, "sub", &st, 0));
    close(d);
    return 0;
}
