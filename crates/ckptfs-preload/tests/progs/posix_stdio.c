/* POSIX and stdio calls on files under argv[1]; prints what it observes. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

static char path[4096];
static const char *P(const char *root, const char *rel) { snprintf(path, sizeof path, "%s/%s", root, rel); return path; }

int main(int argc, char **argv) {
    const char *r = argv[1];
    char buf[256];
    mkdir(P(r, "d"), 0755);
    int fd = open(P(r, "d/posix.bin"), O_CREAT | O_RDWR | O_TRUNC, 0640);
    printf("open ok=%d\n", fd >= 0);
    printf("write=%zd\n", write(fd, "hello world\n", 12));
    struct iovec iov[2] = {{"abc", 3}, {"defg", 4}};
    printf("writev=%zd\n", writev(fd, iov, 2));
    printf("pwrite=%zd\n", pwrite(fd, "XY", 2, 1));
    printf("lseek cur=%ld end=%ld\n", (long)lseek(fd, 0, SEEK_CUR), (long)lseek(fd, 0, SEEK_END));
    printf("lseek set=%ld\n", (long)lseek(fd, 100, SEEK_SET));
    printf("write past end=%zd\n", write(fd, "Z", 1));
    memset(buf, 0, sizeof buf);
    printf("pread=%zd\n", pread(fd, buf, sizeof buf, 0));
    for (int i = 0; i < 101; i++) if (buf[i] == 0) buf[i] = '.';
    printf("content=%.101s\n", buf);
    char a[4], b[5];
    struct iovec riov[2] = {{a, 4}, {b, 5}};
    lseek(fd, 0, SEEK_SET);
    printf("readv=%zd %.4s %.5s\n", readv(fd, riov, 2), a, b);
    printf("preadv=%zd\n", preadv(fd, riov, 2, 5));
    struct stat st;
    fstat(fd, &st);
    printf("fstat size=%ld mode=%o reg=%d\n", (long)st.st_size, st.st_mode & 07777, S_ISREG(st.st_mode));
    printf("ftruncate=%d\n", ftruncate(fd, 50));
    fstat(fd, &st);
    printf("size after truncate=%ld\n", (long)st.st_size);
    printf("fsync=%d fdatasync=%d\n", fsync(fd), fdatasync(fd));
    int fl = fcntl(fd, F_GETFL);
    printf("getfl accmode=%d append=%d\n", fl & O_ACCMODE, !!(fl & O_APPEND));
    printf("setfl=%d\n", fcntl(fd, F_SETFL, fl | O_APPEND));
    printf("append write=%zd at=%ld\n", write(fd, "END", 3), (long)lseek(fd, 0, SEEK_CUR));
    printf("getfd=%d setfd=%d getfd=%d\n", fcntl(fd, F_GETFD), fcntl(fd, F_SETFD, FD_CLOEXEC), fcntl(fd, F_GETFD));
    int d2 = dup(fd);
    printf("dup shares offset: %ld %ld\n", (long)lseek(d2, 3, SEEK_SET), (long)lseek(fd, 0, SEEK_CUR));
    int d3 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    printf("dupfd>=100: %d cloexec=%d\n", d3 >= 100, fcntl(d3, F_GETFD));
    close(d2); close(d3);
    printf("posix_fallocate=%d\n", posix_fallocate(fd, 0, 4096));
    fstat(fd, &st);
    printf("size after fallocate=%ld\n", (long)st.st_size);
    close(fd);
    printf("truncate=%d\n", truncate(P(r, "d/posix.bin"), 20));
    stat(P(r, "d/posix.bin"), &st);
    printf("stat size=%ld\n", (long)st.st_size);
    printf("access R=%d X=%d\n", access(P(r, "d/posix.bin"), R_OK), access(P(r, "d/posix.bin"), X_OK) == 0 ? 0 : errno);

    /* mmap read-only of a complete file */
    fd = open(P(r, "d/posix.bin"), O_RDONLY);
    char *m = mmap(NULL, 20, PROT_READ, MAP_PRIVATE, fd, 0);
    printf("mmap ok=%d first=%.5s\n", m != MAP_FAILED, m == MAP_FAILED ? "" : m);
    if (m != MAP_FAILED) munmap(m, 20);
    close(fd);

    /* stdio */
    FILE *f = fopen(P(r, "d/stdio.txt"), "w");
    fprintf(f, "line %d\n", 1);
    fputs("line 2\n", f);
    fputc('x', f);
    fwrite("yz\n", 1, 3, f);
    printf("ftell=%ld\n", ftell(f));
    fclose(f);
    f = fopen(P(r, "d/stdio.txt"), "r+");
    /* Two statements: in one printf the order of evaluating fscanf(...) and n is
       unspecified, and GCC read the still uninitialised n first. */
    int n = -7;
    int got = fscanf(f, "line %d\n", &n);
    printf("fscanf=%d n=%d\n", got, n);
    printf("fgets=%s", fgets(buf, sizeof buf, f));
    printf("fgetc=%c\n", fgetc(f));
    fseek(f, 0, SEEK_END);
    printf("ftello end=%ld\n", (long)ftello(f));
    rewind(f);
    printf("after rewind ftell=%ld\n", ftell(f));
    fseeko(f, 0, SEEK_END);
    fputs("appended\n", f);
    fflush(f);
    printf("fileno>=0 %d\n", fileno(f) >= 0);
    clearerr(f);
    fclose(f);
    f = fopen(P(r, "d/stdio.txt"), "a");
    setvbuf(f, NULL, _IOFBF, 4096);
    fputs("via a\n", f);
    fclose(f);
    f = fopen(P(r, "d/stdio.txt"), "r");
    while (fgets(buf, sizeof buf, f)) printf("| %s", buf);
    printf("feof=%d ferror=%d\n", feof(f), ferror(f));
    fclose(f);
    fd = open(P(r, "d/fd.txt"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    f = fdopen(fd, "w");
    fprintf(f, "fdopen %s\n", "works");
    fclose(f);
    f = freopen(P(r, "d/stdio.txt"), "r", fopen(P(r, "d/fd.txt"), "r"));
    printf("freopen first=%s", fgets(buf, sizeof buf, f));
    fclose(f);
    printf("rename=%d\n", rename(P(r, "d/fd.txt"), P(r, "d/fd2.txt")));
    printf("unlink=%d\n", unlink(P(r, "d/fd2.txt")));
    return 0;
}
