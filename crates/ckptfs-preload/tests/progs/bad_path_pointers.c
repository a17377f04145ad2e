/* Path arguments the program cannot read (null, the kernel's half of the address space as
 * pjdfstest's efault checks pass, the first page), from a working directory in argv[1]:
 * every call answers EFAULT like the kernel, and the program does not crash. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define T(expr) do { errno = 0; long _v = (long)(expr); printf("%-44s %-6s -> %ld %s\n", #expr, name, _v < 0 ? -1L : _v, _v < 0 ? strerrorname_np(errno) : "ok"); } while (0)

int main(int argc, char **argv) {
    if (argc < 2 || chdir(argv[1]) != 0) { perror("chdir"); return 1; }
    close(open("f", O_CREAT | O_WRONLY, 0644));
    mkdir("d", 0755);
    const char *bads[] = { NULL, (const char *)UINTPTR_MAX, (const char *)((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 1)), (const char *)16 };
    const char *names[] = { "null", "max", "kernel", "low" };
    struct stat st;
    char buf[64];
    for (int i = 0; i < 4; i++) {
        const char *b = bads[i], *name = names[i];
        T(open(b, O_RDONLY));
        T(open(b, O_CREAT | O_WRONLY, 0644));
        T(openat(AT_FDCWD, b, O_RDONLY));
        T(creat(b, 0644));
        T(stat(b, &st));
        T(lstat(b, &st));
        T(access(b, F_OK));
        T(mkdir(b, 0755));
        T(rmdir(b));
        T(unlink(b));
        T(unlinkat(AT_FDCWD, b, 0));
        T(chmod(b, 0600));
        T(truncate(b, 0));
        T(readlink(b, buf, sizeof buf));
        T(mknod(b, S_IFREG | 0644, 0));
        T(mkfifo(b, 0644));
        T(chdir(b));
        T(rename(b, "f"));
        T(rename("f", b));
        T(link(b, "l"));
        T(link("f", b));
        T(symlink(b, "s"));
        T(symlink("f", b));
        T(utimes(b, NULL));
    }
    const char *name = "good";
    T(access("f", F_OK));
    T(access("d", F_OK));
    return 0;
}
