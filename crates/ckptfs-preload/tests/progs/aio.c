/* POSIX AIO on a file: aio_write/aio_read with aio_suspend, aio_error, aio_return,
 * SIGEV_SIGNAL notification (waited for with sigwaitinfo), lio_listio LIO_WAIT and
 * aio_fsync. Outcomes only, never timing. */
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void wait_done(struct aiocb *cb) {
    const struct aiocb *l[1] = {cb};
    while (aio_error(cb) == EINPROGRESS) aio_suspend(l, 1, NULL);
}

int main(int argc, char **argv) {
    char path[4096];
    snprintf(path, sizeof path, "%s/aio.bin", argv[1]);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    static char bufs[3][4096];
    struct aiocb cbs[3];
    for (int i = 0; i < 3; i++) {
        memset(bufs[i], 'a' + i, sizeof bufs[i]);
        memset(&cbs[i], 0, sizeof cbs[i]);
        cbs[i].aio_fildes = fd;
        cbs[i].aio_buf = bufs[i];
        cbs[i].aio_nbytes = sizeof bufs[i];
        cbs[i].aio_offset = (2 - i) * 4096;
        cbs[i].aio_sigevent.sigev_notify = SIGEV_NONE;
        if (aio_write(&cbs[i])) perror("aio_write");
    }
    for (int i = 0; i < 3; i++) {
        wait_done(&cbs[i]);
        printf("write %d: error=%d return=%zd\n", i, aio_error(&cbs[i]), aio_return(&cbs[i]));
    }
    /* Read back with a signal notification. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGRTMIN + 1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    static char rb[8192];
    struct aiocb r = {.aio_fildes = fd, .aio_buf = rb, .aio_nbytes = sizeof rb, .aio_offset = 2048};
    r.aio_sigevent.sigev_notify = SIGEV_SIGNAL;
    r.aio_sigevent.sigev_signo = SIGRTMIN + 1;
    r.aio_sigevent.sigev_value.sival_ptr = &r;
    if (aio_read(&r)) perror("aio_read");
    siginfo_t si;
    int s = sigwaitinfo(&set, &si);
    printf("signal: %d code_asyncio=%d value_is_cb=%d\n", s == SIGRTMIN + 1, si.si_code == SI_ASYNCIO,
           si.si_value.sival_ptr == &r);
    wait_done(&r);
    printf("read: error=%d return=%zd bytes %c%c %c%c\n", aio_error(&r), aio_return(&r), rb[0], rb[2047],
           rb[2048], rb[8191]);
    /* lio_listio: two writes and a read of what was there before. */
    static char w1[100], w2[100], r1[100];
    memset(w1, 'X', sizeof w1);
    memset(w2, 'Y', sizeof w2);
    struct aiocb l[3] = {
        {.aio_fildes = fd, .aio_lio_opcode = LIO_WRITE, .aio_buf = w1, .aio_nbytes = 100, .aio_offset = 12288},
        {.aio_fildes = fd, .aio_lio_opcode = LIO_WRITE, .aio_buf = w2, .aio_nbytes = 100, .aio_offset = 12388},
        {.aio_fildes = fd, .aio_lio_opcode = LIO_READ, .aio_buf = r1, .aio_nbytes = 100, .aio_offset = 0},
    };
    struct aiocb *lp[3] = {&l[0], &l[1], &l[2]};
    printf("lio_listio: %d\n", lio_listio(LIO_WAIT, lp, 3, NULL));
    for (int i = 0; i < 3; i++) printf("  %d: error=%d return=%zd\n", i, aio_error(&l[i]), aio_return(&l[i]));
    printf("  read %c%c\n", r1[0], r1[99]);
    struct aiocb f = {.aio_fildes = fd};
    printf("aio_fsync: %d\n", aio_fsync(O_SYNC, &f));
    wait_done(&f);
    printf("fsync: error=%d return=%zd\n", aio_error(&f), aio_return(&f));
    struct aiocb bad = {.aio_fildes = fd, .aio_buf = rb, .aio_nbytes = 10, .aio_offset = -1};
    if (aio_read(&bad) == 0) {
        wait_done(&bad);
        printf("negative offset: error=%s\n", strerror(aio_error(&bad)));
        aio_return(&bad);
    } else {
        printf("negative offset: submit %s\n", strerror(errno));
    }
    printf("size %ld\n", (long)lseek(fd, 0, SEEK_END));
    close(fd);
    return 0;
}
