/*
 * capi_bench.c - throughput of the C ABI against its baseline, measured in one run.
 *
 * Usage: capi_bench [MiB [reps]]     (defaults: 256 MiB, 5 repetitions)
 *
 * Cases (1 MiB requests, medians of the repetitions):
 *   ckptfs_write   new file through the C ABI (chunks recycled after the first rep)
 *   write(2)       new file on /dev/shm (tmpfs), the RAM-disk baseline
 *   ckptfs_read    read it back through the C ABI
 *   read(2)        read it back from /dev/shm
 *   region copy    copy the file out via ckptfs_get_chunk_list + memcpy from the data
 *                  region (what a drain agent does), into a pre-faulted buffer
 *   memcpy         plain memcpy of the same size between two pre-faulted buffers
 * Timings are printed, never asserted (scripts never fail on them).
 */
#define _POSIX_C_SOURCE 200809L
#include "ckptfs.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1u << 20)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, long long rc) {
    fprintf(stderr, "capi_bench: %s failed (%lld): %s\n", what, rc, ckptfs_last_error());
    exit(1);
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 256, size = mib << 20;
    int reps = argc > 2 ? atoi(argv[2]) : 5, r, c, fd;
    char store[64], shm[128];
    unsigned char *src = (unsigned char *)malloc(BLOCK);
    unsigned char *dst = (unsigned char *)malloc(size), *dst2 = (unsigned char *)malloc(size);
    double t[6][64], t0;
    const char *names[6] = {"ckptfs_write", "write(2) /dev/shm", "ckptfs_read", "read(2) /dev/shm",
                            "region copy", "memcpy"};
    ckptfs_options o = CKPTFS_OPTIONS_INIT;
    ckptfs_chunk_meta *chunks;
    char *base;
    size_t off, cs;
    ssize_t n, i;

    if (reps < 1 || reps > 64 || mib < 1 || !src || !dst || !dst2)
        return 2;
    memset(src, 0x5a, BLOCK);
    memset(dst, 1, size); /* pre-fault */
    memset(dst2, 2, size);
    snprintf(store, sizeof store, "capi-bench-%d", (int)getpid());
    snprintf(shm, sizeof shm, "/dev/shm/capi-bench-%d", (int)getpid());
    o.store = store;
    o.mem_size = (uint64_t)size + (64u << 20);
    o.chunk_size = BLOCK;
    o.flags = CKPTFS_MOUNT_EXCL;
    t0 = now_s();
    if ((r = ckptfs_mount("/bench", &o)) != 0)
        die("mount", r);
    printf("store: %zu MiB memory, 1 MiB chunks, created and pre-faulted in %.2f s\n",
           (size_t)(o.mem_size >> 20), now_s() - t0);

    for (r = 0; r < reps; r++) {
        t0 = now_s();
        if ((fd = ckptfs_open("/bench/f", O_CREAT | O_WRONLY | O_TRUNC, 0644)) < 0)
            die("open", fd);
        for (off = 0; off < size; off += BLOCK)
            if ((n = ckptfs_write(fd, src, BLOCK)) != BLOCK)
                die("ckptfs_write", n);
        if ((c = ckptfs_close(fd)) != 0)
            die("close", c);
        t[0][r] = now_s() - t0;

        t0 = now_s();
        if ((fd = open(shm, O_CREAT | O_WRONLY | O_TRUNC, 0644)) < 0)
            die("open /dev/shm", fd);
        for (off = 0; off < size; off += BLOCK)
            if (write(fd, src, BLOCK) != BLOCK)
                die("write", 0);
        close(fd);
        t[1][r] = now_s() - t0;

        t0 = now_s();
        fd = ckptfs_open("/bench/f", O_RDONLY, 0);
        for (off = 0; off < size; off += BLOCK)
            if ((n = ckptfs_read(fd, dst + off, BLOCK)) != BLOCK)
                die("ckptfs_read", n);
        ckptfs_close(fd);
        t[2][r] = now_s() - t0;

        t0 = now_s();
        fd = open(shm, O_RDONLY);
        for (off = 0; off < size; off += BLOCK)
            if (read(fd, dst + off, BLOCK) != BLOCK)
                die("read", 0);
        close(fd);
        t[3][r] = now_s() - t0;

        t0 = now_s();
        if (ckptfs_get_data_region("/bench", (void **)&base, NULL, &cs) != 0)
            die("data region", -1);
        n = ckptfs_get_chunk_list("/bench/f", NULL, 0);
        chunks = (ckptfs_chunk_meta *)malloc((size_t)n * sizeof *chunks);
        if ((n = ckptfs_get_chunk_list("/bench/f", chunks, (size_t)n)) < 0)
            die("chunk list", n);
        for (i = 0; i < n; i++)
            memcpy(dst + (size_t)chunks[i].logical * cs, base + chunks[i].offset, chunks[i].length);
        free(chunks);
        t[4][r] = now_s() - t0;

        t0 = now_s();
        memcpy(dst2, dst, size);
        t[5][r] = now_s() - t0;
    }
    if (memcmp(dst, dst2, size) != 0 || dst[size - 1] != 0x5a)
        die("verify", 0);

    printf("%zu MiB, 1 MiB requests, median of %d\n", mib, reps);
    printf("%-20s %10s %10s\n", "case", "GB/s", "vs base");
    for (c = 0; c < 6; c++) {
        /* Each even case is compared with the baseline that follows it. */
        double m = median(t[c], reps), base_m = median(t[c | 1], reps);
        printf("%-20s %10.2f %9.2fx\n", names[c], (double)size / m / 1e9, base_m / m);
    }
    unlink(shm);
    ckptfs_unmount("/bench");
    ckptfs_destroy_store(store);
    return 0;
}
