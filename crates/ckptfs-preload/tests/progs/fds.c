/* Descriptor numbers: store descriptors are real kernel numbers that never collide. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <linux/close_range.h>
#include <sys/syscall.h>

int main(int argc, char **argv) {
    char p[4096];
    snprintf(p, sizeof p, "%s/f", argv[1]);
    struct rlimit rl = {65536, 65536};
    setrlimit(RLIMIT_NOFILE, &rl);
    int a = open(p, O_CREAT | O_RDWR | O_TRUNC, 0644);
    int b = open("/dev/null", O_RDONLY);
    printf("distinct=%d\n", a != b);
    write(a, "0123456789", 10);
    /* dup2 a store descriptor onto a high number and a real one onto the store number */
    printf("dup2 high=%d\n", dup2(a, 5000));
    lseek(5000, 2, SEEK_SET);
    char c = 0;
    read(a, &c, 1);
    printf("shared offset read=%c\n", c);
    close(a);
    int devnull = open("/dev/null", O_RDONLY);
    /* the freed number may be reused by a real file: it must behave as /dev/null */
    printf("reused real read=%zd\n", read(devnull, &c, 1));
    close(devnull);
    /* close_range closes every descriptor >= 3, store ones included */
    int s = open(p, O_RDONLY);
    printf("close_range=%d\n", close_range(3, ~0U, 0));
    printf("after close_range read=%zd\n", read(s, &c, 1));
    printf("after close_range 5000 read=%zd\n", read(5000, &c, 1));
    int real = open("/dev/zero", O_RDONLY);
    printf("real after close_range reads zero: %zd %d\n", read(real, &c, 1), c);
    close(real);
    /* a store descriptor closed behind the shim's back (raw syscall): the number is reused */
    s = open(p, O_RDONLY);
    syscall(SYS_close, s);
    real = open("/dev/zero", O_RDONLY);
    c = 1;
    printf("raw close then reuse: same=%d read=%zd c=%d\n", real == s, read(real, &c, 1), c);
    close(real);
    /* many store files at once */
    int fds[300];
    for (int i = 0; i < 300; i++) {
        char q[4096];
        snprintf(q, sizeof q, "%s/many%d", argv[1], i);
        fds[i] = open(q, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        char line[16];
        write(fds[i], line, snprintf(line, sizeof line, "%d\n", i));
    }
    int ok = 1;
    for (int i = 0; i < 300; i++) ok &= close(fds[i]) == 0;
    printf("300 files ok=%d\n", ok);
    return 0;
}
