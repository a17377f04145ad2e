/* Several threads writing different files at once, then reading them back. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T 8
#define SZ (3 << 20)
static const char *root;

static void *work(void *arg) {
    long id = (long)arg;
    char p[4096];
    snprintf(p, sizeof p, "%s/t%ld.bin", root, id);
    char *b = malloc(SZ);
    for (int i = 0; i < SZ; i++) b[i] = (char)(i * 7 + id);
    for (int rep = 0; rep < 3; rep++) {
        int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        for (int off = 0; off < SZ; off += 65536) write(fd, b + off, 65536);
        close(fd);
    }
    char *c = malloc(SZ);
    int fd = open(p, O_RDONLY);
    ssize_t n = 0, k;
    while ((k = read(fd, c + n, SZ - n)) > 0) n += k;
    close(fd);
    long ok = n == SZ && memcmp(b, c, SZ) == 0;
    free(b); free(c);
    return (void *)ok;
}

int main(int argc, char **argv) {
    root = argv[1];
    pthread_t th[T];
    for (long i = 0; i < T; i++) pthread_create(&th[i], NULL, work, (void *)i);
    int ok = 0;
    for (int i = 0; i < T; i++) { void *r; pthread_join(th[i], &r); ok += (long)r; }
    printf("threads ok: %d/%d\n", ok, T);
    return 0;
}
