/* fcntl record locks, OFD locks, flock and lockf between processes: conflicts, F_GETLK's
 * holder, blocking waits, release when the holder is SIGKILLed, release on close of any
 * descriptor of the file, flock sharing across dup. Deterministic: processes wait on
 * pipes, never on time. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

static char path[4096];

static int lk(int fd, int cmd, short type, off_t start, off_t len) {
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    return fcntl(fd, cmd, &fl);
}

static const char *en(int r) { return r == 0 ? "ok" : strerrorname_np(errno); }

static void wait_byte(int fd) {
    char c;
    if (read(fd, &c, 1) != 1) { perror("read pipe"); exit(1); }
}

int main(int argc, char **argv) {
    snprintf(path, sizeof path, "%s/lockfile", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0 || write(fd, "0123456789", 10) != 10) { perror("open"); return 1; }
    int p1[2], p2[2];
    if (pipe(p1) || pipe(p2)) return 1;

    fflush(stdout);
    /* A: holds a write lock on [0,100) until killed. */
    pid_t a = fork();
    if (a == 0) {
        int f = open(path, O_RDWR);
        if (lk(f, F_SETLK, F_WRLCK, 0, 100)) { perror("A lock"); _exit(1); }
        write(p1[1], "a", 1);
        for (;;) pause();
    }
    wait_byte(p1[0]);
    struct flock q = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 5, .l_len = 1};
    const char *gr = en(fcntl(fd, F_GETLK, &q));
    printf("getlk: %s type=%s holder_is_A=%d start=%ld len=%ld\n", gr,
           q.l_type == F_WRLCK ? "WR" : q.l_type == F_UNLCK ? "UN" : "RD", q.l_pid == a,
           (long)q.l_start, (long)q.l_len);
    printf("setlk conflict: %s\n", en(lk(fd, F_SETLK, F_RDLCK, 50, 10)));
    printf("setlk elsewhere: %s\n", en(lk(fd, F_SETLK, F_WRLCK, 200, 100)));
    lseek(fd, 0, SEEK_SET);
    printf("lockf test: %s\n", en(lockf(fd, F_TEST, 10)));
    printf("lockf tlock: %s\n", en(lockf(fd, F_TLOCK, 10)));
    printf("ofd conflict: %s\n", en(lk(fd, F_OFD_SETLK, F_WRLCK, 0, 10)));
    printf("flock independent of fcntl: %s\n", en(flock(fd, LOCK_EX | LOCK_NB)));
    flock(fd, LOCK_UN);

    fflush(stdout);
    /* B: waits for the lock A holds. */
    pid_t b = fork();
    if (b == 0) {
        int f = open(path, O_RDWR);
        int r = lk(f, F_SETLKW, F_WRLCK, 0, 100);
        write(p2[1], r == 0 ? "y" : "n", 1);
        _exit(0);
    }
    kill(a, SIGKILL);
    int st;
    waitpid(a, &st, 0);
    char c;
    read(p2[0], &c, 1);
    waitpid(b, &st, 0);
    printf("B got the lock after A was SIGKILLed: %c\n", c);
    printf("setlk after both: %s\n", en(lk(fd, F_SETLK, F_WRLCK, 0, 100)));

    /* Closing any descriptor of the file drops the process's locks. */
    int other = open(path, O_RDONLY);
    close(other);
    fflush(stdout);
    pid_t d = fork();
    if (d == 0) {
        int f = open(path, O_RDWR);
        struct flock g = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
        fcntl(f, F_GETLK, &g);
        printf("after closing another fd, lock gone: %d\n", g.l_type == F_UNLCK);
        fflush(stdout);
        _exit(0);
    }
    waitpid(d, &st, 0);

    /* flock: held by C, contended, released when C is killed; shared across dup. */
    fflush(stdout);
    pid_t cc = fork();
    if (cc == 0) {
        int f = open(path, O_RDONLY);
        if (flock(f, LOCK_EX)) { perror("C flock"); _exit(1); }
        write(p1[1], "c", 1);
        for (;;) pause();
    }
    wait_byte(p1[0]);
    int g = open(path, O_RDONLY);
    printf("flock contended: %s\n", en(flock(g, LOCK_EX | LOCK_NB)));
    printf("flock shared ok: %s\n", en(flock(g, LOCK_SH | LOCK_NB)));
    kill(cc, SIGKILL);
    waitpid(cc, &st, 0);
    printf("flock after kill: %s\n", en(flock(g, LOCK_EX)));
    int g2 = dup(g);
    int h = open(path, O_RDONLY);
    printf("flock by another open: %s\n", en(flock(h, LOCK_EX | LOCK_NB)));
    close(g);
    printf("still held through the dup: %s\n", en(flock(h, LOCK_EX | LOCK_NB)));
    close(g2);
    printf("released with the last dup: %s\n", en(flock(h, LOCK_EX | LOCK_NB)));

    /* OFD lock through a forked child's shared description. */
    int o = open(path, O_RDWR);
    printf("ofd lock: %s\n", en(lk(o, F_OFD_SETLK, F_WRLCK, 0, 1)));
    int o2 = open(path, O_RDWR);
    printf("ofd other description: %s\n", en(lk(o2, F_OFD_SETLK, F_WRLCK, 0, 1)));
    fflush(stdout);
    pid_t e = fork();
    if (e == 0) {
        printf("ofd same description in child: %s\n", en(lk(o, F_OFD_SETLK, F_WRLCK, 0, 1)));
        fflush(stdout);
        _exit(0);
    }
    waitpid(e, &st, 0);
    int ro = open(path, O_RDONLY);
    printf("write lock on read-only fd: %s\n", en(lk(ro, F_SETLK, F_WRLCK, 0, 1)));
    printf("bad whence: %s\n", en(({ struct flock z = {.l_type = F_RDLCK, .l_whence = 7}; fcntl(ro, F_SETLK, &z); })));
    return 0;
}
