/* The pool calls of the C API against a running pool (manager and benefactors):
 *   capi_pool_test CLUSTER_FILE NODE_ID POOL_PATH SIZE
 * writes SIZE bytes (a fixed pattern) to POOL_PATH in uneven pieces, commits, reads
 * them back in uneven preads, compares, and checks some errors. The pool's own tools
 * then read the same file (crates/ckptfs-cli/tests/pool_capi.rs runs this). Exit 0 and
 * "ok" on success. */
#include "ckptfs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char byte_at(uint64_t i) {
    return (unsigned char)((i * 2654435761u) >> 13);
}

#define CHECK(c)                                                                   \
    do {                                                                           \
        if (!(c)) {                                                                \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #c,      \
                    ckptfs_last_error());                                          \
            return 1;                                                              \
        }                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s CLUSTER_FILE NODE_ID POOL_PATH SIZE\n", argv[0]);
        return 2;
    }
    uint64_t size = strtoull(argv[4], NULL, 10);
    int pool = ckptfs_pool_connect(argv[1], argv[2], 1 << 20);
    CHECK(pool >= 0);

    unsigned char *buf = malloc(1 << 20);
    CHECK(buf != NULL);
    int fd = ckptfs_pool_create(pool, argv[3]);
    CHECK(fd >= 0);
    uint64_t off = 0, piece = 1000;
    while (off < size) {
        uint64_t n = size - off < piece ? size - off : piece;
        for (uint64_t i = 0; i < n; i++) buf[i] = byte_at(off + i);
        CHECK(ckptfs_pool_write(fd, buf, n) == (ssize_t)n);
        off += n;
        piece = piece * 3 % 900001 + 1;
    }
    CHECK(ckptfs_pool_size(fd) == (int64_t)size);
    CHECK(ckptfs_pool_close(fd) == 0);
    CHECK(ckptfs_pool_close(fd) == -EBADF);

    fd = ckptfs_pool_open(pool, argv[3]);
    CHECK(fd >= 0);
    CHECK(ckptfs_pool_size(fd) == (int64_t)size);
    CHECK(ckptfs_pool_write(fd, buf, 1) == -EBADF);
    off = 0;
    piece = 777;
    while (off < size) {
        ssize_t n = ckptfs_pool_pread(fd, buf, piece, off);
        CHECK(n > 0);
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != byte_at(off + (uint64_t)i)) {
                fprintf(stderr, "byte %llu differs\n", (unsigned long long)(off + (uint64_t)i));
                return 1;
            }
        }
        off += (uint64_t)n;
        piece = piece * 5 % 1000003 + 1;
    }
    CHECK(ckptfs_pool_pread(fd, buf, 10, size) == 0);
    CHECK(ckptfs_pool_close(fd) == 0);

    CHECK(ckptfs_pool_open(pool, "/capi/never-written") == -ENOENT);
    CHECK(ckptfs_pool_create(pool, "relative/path") == -EINVAL);
    CHECK(ckptfs_pool_disconnect(pool) == 0);
    CHECK(ckptfs_pool_create(pool, argv[3]) == -EBADF);
    free(buf);
    printf("ok\n");
    return 0;
}
