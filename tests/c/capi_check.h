/*
 * capi_check.h - shared by the C test programs of libckptfs (capi_test.c,
 * capi_region_test.c): the CHECK macros and their counters, data patterns, CRC32C and
 * store helpers. Each program is one translation unit that includes it once.
 */
#ifndef CAPI_CHECK_H
#define CAPI_CHECK_H

#include "ckptfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int passed, failed;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (cond) {                                                                     \
            passed++;                                                                   \
        } else {                                                                        \
            failed++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s  [last error: %s]\n", __FILE__, __LINE__,   \
                    #cond, ckptfs_last_error());                                        \
        }                                                                               \
    } while (0)

#define CHECK_EQ(actual, expected)                                                      \
    do {                                                                                \
        long long a_ = (long long)(actual), e_ = (long long)(expected);                 \
        if (a_ == e_) {                                                                 \
            passed++;                                                                   \
        } else {                                                                        \
            failed++;                                                                   \
            fprintf(stderr, "FAIL %s:%d: %s == %lld, expected %s == %lld  [last error: %s]\n", \
                    __FILE__, __LINE__, #actual, a_, #expected, e_, ckptfs_last_error()); \
        }                                                                               \
    } while (0)

/* ------------------------------------------------------------------ helpers */

static uint32_t crc_table[256];

static inline void crc32c_init(void) {
    uint32_t i, k, c;
    for (i = 0; i < 256; i++) {
        c = i;
        for (k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

/* CRC32C (Castagnoli), as the store records per chunk. */
static inline uint32_t crc32c(const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static inline void pattern(unsigned char *buf, size_t n, unsigned seed) {
    size_t i;
    for (i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 31u + seed + (i >> 16));
}

static inline int all_zero(const unsigned char *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int pid;
static char tmpdir[256];

static inline void store_name(char *out, size_t n, const char *tag) {
    snprintf(out, n, "capi-%s-%d", tag, pid);
}

static inline int mount_store(const char *prefix, const char *name, uint64_t mem, uint64_t chunk,
                       uint32_t max_files, const char *spill_dir, uint64_t spill_size) {
    ckptfs_options o = CKPTFS_OPTIONS_INIT;
    o.store = name;
    o.mem_size = mem;
    o.chunk_size = chunk;
    o.max_files = max_files;
    o.spill_dir = spill_dir;
    o.spill_size = spill_size;
    o.flags = CKPTFS_MOUNT_EXCL;
    return ckptfs_mount(prefix, &o);
}

/* Write a whole buffer to a new store file. */
static inline int put_file(const char *path, const void *data, size_t n) {
    int fd = ckptfs_open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ssize_t w;
    if (fd < 0)
        return fd;
    w = ckptfs_write(fd, data, n);
    ckptfs_close(fd);
    return w == (ssize_t)n ? 0 : -EIO;
}

/* Read a whole store file (up to cap bytes) into buf; returns bytes or -errno. */
static inline ssize_t get_file(const char *path, void *buf, size_t cap) {
    int fd = ckptfs_open(path, O_RDONLY, 0);
    ssize_t n, total = 0;
    if (fd < 0)
        return fd;
    while ((size_t)total < cap && (n = ckptfs_read(fd, (char *)buf + total, cap - (size_t)total)) > 0)
        total += n;
    ckptfs_close(fd);
    return total;
}

#endif /* CAPI_CHECK_H */
