/*
 * capi_test.c - exercises every call of include/ckptfs.h through libckptfs.
 *
 * Usage: capi_test                      run all tests; prints "N passed, M failed"
 *        capi_test agent STORE PATH OUT copy store file PATH out to the real file OUT
 *                                       through the data-region interface only (used by
 *                                       the test as a separate process)
 *
 * Every store it creates is named capi-*-<pid> and destroyed at the end.
 */
#define _POSIX_C_SOURCE 200809L
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

static void crc32c_init(void) {
    uint32_t i, k, c;
    for (i = 0; i < 256; i++) {
        c = i;
        for (k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

/* CRC32C (Castagnoli), as the store records per chunk. */
static uint32_t crc32c(const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    uint32_t c = 0xFFFFFFFFu;
    while (n--)
        c = crc_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void pattern(unsigned char *buf, size_t n, unsigned seed) {
    size_t i;
    for (i = 0; i < n; i++)
        buf[i] = (unsigned char)(i * 31u + seed + (i >> 16));
}

static int all_zero(const unsigned char *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int pid;
static char tmpdir[256];

static void store_name(char *out, size_t n, const char *tag) {
    snprintf(out, n, "capi-%s-%d", tag, pid);
}

static int mount_store(const char *prefix, const char *name, uint64_t mem, uint64_t chunk,
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
static int put_file(const char *path, const void *data, size_t n) {
    int fd = ckptfs_open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    ssize_t w;
    if (fd < 0)
        return fd;
    w = ckptfs_write(fd, data, n);
    ckptfs_close(fd);
    return w == (ssize_t)n ? 0 : -EIO;
}

/* Read a whole store file (up to cap bytes) into buf; returns bytes or -errno. */
static ssize_t get_file(const char *path, void *buf, size_t cap) {
    int fd = ckptfs_open(path, O_RDONLY, 0);
    ssize_t n, total = 0;
    if (fd < 0)
        return fd;
    while ((size_t)total < cap && (n = ckptfs_read(fd, (char *)buf + total, cap - (size_t)total)) > 0)
        total += n;
    ckptfs_close(fd);
    return total;
}

/* ------------------------------------------------------------------ agent mode */

/*
 * The data-region protocol of docs/capi.md: copy store file `path` (under prefix
 * /agent) to the real file `out` without the writer, verifying every chunk's CRC32C.
 * Returns 0, or a non-zero step number on failure.
 */
static int copy_out(const char *path, const char *out) {
    struct ckptfs_stat st, now;
    char *base;
    size_t region, cs;
    ckptfs_chunk_meta *chunks = NULL;
    ssize_t n, i;
    char spill[CKPTFS_PATH_MAX + 1];
    int spill_fd = -1, out_fd, fd = -1, attempt, rc = 10;
    unsigned char *tmp;

    /* 1. The region as mapped here, and the spill file if any. */
    if (ckptfs_get_data_region("/agent", (void **)&base, &region, &cs) != 0)
        return 1;
    if (ckptfs_get_spill_path("/agent", spill, sizeof spill) > 0)
        spill_fd = open(spill, O_RDONLY);
    tmp = (unsigned char *)malloc(cs);
    out_fd = open(out, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (!tmp || out_fd < 0)
        return 2;
    for (attempt = 0; attempt < 5 && rc == 10; attempt++) {
        int retry = 0;
        free(chunks);
        chunks = NULL;
        if (fd >= 0)
            ckptfs_close(fd);
        /* 2. Hold the file open: an unlink or rename-over cannot recycle its chunks. */
        fd = ckptfs_open(path, O_RDONLY, 0);
        if (fd < 0 || ckptfs_fstat(fd, &st) != 0) {
            rc = 3;
            break;
        }
        if (st.state != CKPTFS_STATE_COMPLETE) {
            rc = 4; /* a real agent waits for the writer's close */
            break;
        }
        /* 3. The chunk list, for the inode we hold (not one renamed over it since). */
        n = ckptfs_get_chunk_list(path, NULL, 0);
        if (n < 0) {
            rc = 5;
            break;
        }
        chunks = (ckptfs_chunk_meta *)calloc((size_t)n + 1, sizeof *chunks);
        n = ckptfs_get_chunk_list(path, chunks, (size_t)n + 1);
        if (n < 0 || ckptfs_stat(path, &now) != 0 || now.ino != st.ino || now.generation != st.generation)
            continue;
        /* 4. Copy each chunk; holes (missing logical indices) stay zero in the output. */
        for (i = 0; i < n && !retry; i++) {
            const ckptfs_chunk_meta *c = &chunks[i];
            size_t have = c->written < c->length ? c->written : c->length;
            if (c->written > cs || c->written > c->length || !c->crc_valid) {
                retry = 1; /* being written or overwritten right now */
                break;
            }
            if (c->location == CKPTFS_CHUNK_MEMORY) {
                if (c->offset + cs > region) {
                    rc = 6;
                    break;
                }
                memcpy(tmp, base + c->offset, c->written);
            } else if (spill_fd < 0 ||
                       pread(spill_fd, tmp, c->written, (off_t)c->offset) != (ssize_t)c->written) {
                rc = 7;
                break;
            }
            /* 5. Verify what was copied: a concurrent overwrite shows as a mismatch. */
            if (crc32c(tmp, c->written) != c->crc32c) {
                retry = 1;
                break;
            }
            memset(tmp + have, 0, (size_t)(c->length - have));
            if (pwrite(out_fd, tmp, (size_t)c->length, (off_t)((uint64_t)c->logical * cs)) != (ssize_t)c->length) {
                rc = 8;
                break;
            }
        }
        if (rc != 10 || retry)
            continue;
        /* 6. Unchanged meanwhile? Then the copy is the file. */
        if (ckptfs_fstat(fd, &now) == 0 && now.mtime_ns == st.mtime_ns && now.size == st.size)
            rc = ftruncate(out_fd, (off_t)st.size) == 0 ? 0 : 9;
    }
    free(chunks);
    if (fd >= 0)
        ckptfs_close(fd);
    close(out_fd);
    if (spill_fd >= 0)
        close(spill_fd);
    free(tmp);
    return rc;
}

static int agent_main(const char *store, const char *path, const char *out) {
    ckptfs_options o = CKPTFS_OPTIONS_INIT;
    int rc;
    o.store = store;
    o.flags = CKPTFS_MOUNT_ATTACH;
    crc32c_init();
    if (ckptfs_mount("/agent", &o) != 0) {
        fprintf(stderr, "agent: %s\n", ckptfs_last_error());
        return 20;
    }
    rc = copy_out(path, out);
    if (rc)
        fprintf(stderr, "agent: copy_out failed at step %d (%s)\n", rc, ckptfs_last_error());
    ckptfs_unmount("/agent");
    return rc;
}

/* ------------------------------------------------------------------ tests */

static void t_version(void) {
    CHECK(strcmp(ckptfs_version(), CKPTFS_VERSION) == 0);
    CHECK(ckptfs_last_error() != NULL);
    CHECK_EQ(crc32c("123456789", 9), 0xE3069283u);
}

/* Regression: the message pointer stays valid after later failures (C does not fix the
 * order in which printf's arguments are evaluated). */
static void t_last_error(void) {
    const char *p;
    CHECK_EQ(ckptfs_unmount("/first-not-mounted"), -EINVAL);
    p = ckptfs_last_error();
    CHECK(strstr(p, "unmount /first-not-mounted: not mounted") != NULL);
    CHECK_EQ(ckptfs_unmount("/second-not-mounted"), -EINVAL);
    CHECK(p == ckptfs_last_error());
    CHECK(strstr(p, "/second-not-mounted") != NULL);
}

static void t_mount(const char *main_store) {
    ckptfs_options o = CKPTFS_OPTIONS_INIT;
    CHECK_EQ(mount_store("/ckpt", main_store, 8 << 20, 64 << 10, 64, NULL, 0), 0);
    CHECK_EQ(mount_store("/ckpt", main_store, 0, 0, 0, NULL, 0), -EBUSY);
    CHECK_EQ(ckptfs_mount(NULL, NULL), -EFAULT);
    CHECK_EQ(ckptfs_unmount("/not-mounted"), -EINVAL);
    CHECK_EQ(ckptfs_unmount(NULL), -EFAULT);
    o.size = 8; /* caller built against a different header */
    CHECK_EQ(ckptfs_mount("/x", &o), -EINVAL);
    CHECK(strstr(ckptfs_last_error(), "CKPTFS_OPTIONS_INIT") != NULL);
    o.size = sizeof o;
    o.flags = CKPTFS_MOUNT_ATTACH | CKPTFS_MOUNT_EXCL;
    CHECK_EQ(ckptfs_mount("/x", &o), -EINVAL);
    o.flags = CKPTFS_MOUNT_ATTACH;
    o.store = "capi-never-created";
    CHECK_EQ(ckptfs_mount("/x", &o), -ENOENT);
    /* Same store with a conflicting setting: refused with a message, nothing mounted. */
    o.store = main_store;
    o.chunk_size = 1 << 20;
    CHECK_EQ(ckptfs_mount("/x", &o), -EINVAL);
    CHECK(strstr(ckptfs_last_error(), "chunk size") != NULL);
    o.chunk_size = 0;
    o.store = "bad/name";
    o.flags = 0;
    CHECK_EQ(ckptfs_mount("/x", &o), -EINVAL);
    CHECK_EQ(ckptfs_destroy_store("capi-never-created"), -ENOENT);
    CHECK_EQ(ckptfs_destroy_store(NULL), -EFAULT);
}

static void t_files(void) {
    unsigned char buf[200000];
    struct ckptfs_stat st;
    uint64_t t0 = now_ns();
    int fd, fd2;
    const int64_t far = 20 * 4096;

    fd = ckptfs_open("/ckpt/a.dat", O_CREAT | O_WRONLY | O_TRUNC, 0640);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_write(fd, "hello world", 11), 11);
    CHECK_EQ(ckptfs_lseek(fd, 0, SEEK_CUR), 11);
    CHECK_EQ(ckptfs_fstat(fd, &st), 0);
    CHECK_EQ(st.size, 11);
    CHECK(S_ISREG(st.mode));
    CHECK_EQ(st.mode & 07777, 0640);
    CHECK_EQ(st.kind, CKPTFS_KIND_FILE);
    CHECK_EQ(st.state, CKPTFS_STATE_WRITING);
    CHECK(st.mtime_ns + 1000000000u >= t0 && st.mtime_ns <= now_ns() + 1000000000u);
    /* pwrite past the end leaves a hole; it does not move the position. */
    CHECK_EQ(ckptfs_pwrite(fd, "XYZ", 3, 100), 3);
    CHECK_EQ(ckptfs_lseek(fd, 0, SEEK_CUR), 11);
    CHECK_EQ(ckptfs_lseek(fd, -3, SEEK_END), 100);
    CHECK_EQ(ckptfs_lseek(fd, far, SEEK_SET), far);
    CHECK_EQ(ckptfs_write(fd, "end", 3), 3);
    CHECK_EQ(ckptfs_read(fd, buf, 10), -EBADF); /* write-only */
    CHECK_EQ(ckptfs_fsync(fd), 0);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_close(fd), -EBADF);
    CHECK_EQ(ckptfs_write(fd, "x", 1), -EBADF);

    CHECK_EQ(ckptfs_stat("/ckpt/a.dat", &st), 0);
    CHECK_EQ(st.size, far + 3);
    CHECK_EQ(st.state, CKPTFS_STATE_COMPLETE);

    memset(buf, 0xAA, sizeof buf);
    fd = ckptfs_open("/ckpt/a.dat", O_RDONLY, 0);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_read(fd, buf, sizeof buf), far + 3);
    CHECK(memcmp(buf, "hello world", 11) == 0);
    CHECK(all_zero(buf + 11, 100 - 11));
    CHECK(memcmp(buf + 100, "XYZ", 3) == 0);
    CHECK(all_zero(buf + 103, (size_t)far - 103));
    CHECK(memcmp(buf + far, "end", 3) == 0);
    CHECK_EQ(ckptfs_read(fd, buf, 10), 0); /* end of file */
    CHECK_EQ(ckptfs_pread(fd, buf, 5, 6), 5);
    CHECK(memcmp(buf, "world", 5) == 0);
    CHECK_EQ(ckptfs_pread(fd, buf, 5, far + 100), 0);
    CHECK_EQ(ckptfs_write(fd, "x", 1), -EBADF); /* read-only */
    CHECK_EQ(ckptfs_ftruncate(fd, 0), -EINVAL); /* not open for writing */
    CHECK_EQ(ckptfs_read(fd, NULL, 0), 0);
    CHECK_EQ(ckptfs_read(fd, NULL, 10), -EFAULT);
    CHECK_EQ(ckptfs_fstat(fd, NULL), -EFAULT);
    /* Negative offsets. */
    CHECK_EQ(ckptfs_pread(fd, buf, 10, -1), -EINVAL);
    CHECK_EQ(ckptfs_lseek(fd, -1, SEEK_SET), -EINVAL);
    CHECK_EQ(ckptfs_lseek(fd, 0, SEEK_SET), 0);
    CHECK_EQ(ckptfs_lseek(fd, -100, SEEK_CUR), -EINVAL);
    CHECK_EQ(ckptfs_lseek(fd, -(far + 4), SEEK_END), -EINVAL);
    CHECK_EQ(ckptfs_lseek(fd, 0, 42), -EINVAL);
    CHECK_EQ(ckptfs_lseek(fd, 0, SEEK_CUR), 0); /* failed seeks leave the position */
    /* Descriptors are independent: a second one has its own position. */
    fd2 = ckptfs_open("/ckpt/a.dat", O_RDONLY, 0);
    CHECK(fd2 >= 0 && fd2 != fd);
    CHECK_EQ(ckptfs_lseek(fd2, 6, SEEK_SET), 6);
    CHECK_EQ(ckptfs_read(fd, buf, 5), 5);
    CHECK(memcmp(buf, "hello", 5) == 0);
    CHECK_EQ(ckptfs_close(fd2), 0);
    CHECK_EQ(ckptfs_close(fd), 0);

    /* O_APPEND: every write goes to the end whatever the position. */
    fd = ckptfs_open("/ckpt/a.dat", O_WRONLY | O_APPEND, 0);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_lseek(fd, 0, SEEK_SET), 0);
    CHECK_EQ(ckptfs_write(fd, "++", 2), 2);
    CHECK_EQ(ckptfs_pwrite(fd, "--", 2, -5), -EINVAL);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(get_file("/ckpt/a.dat", buf, sizeof buf), far + 5);
    CHECK(memcmp(buf + far, "end++", 5) == 0);

    /* O_EXCL, O_TRUNC, access modes. */
    CHECK_EQ(ckptfs_open("/ckpt/a.dat", O_CREAT | O_EXCL | O_WRONLY, 0644), -EEXIST);
    fd = ckptfs_open("/ckpt/b.dat", O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_open("/ckpt/a.dat", O_WRONLY | O_RDWR, 0), -EINVAL);
    CHECK_EQ(ckptfs_open("/ckpt/missing", O_RDONLY, 0), -ENOENT);
    fd = ckptfs_open("/ckpt/a.dat", O_RDWR | O_TRUNC, 0);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_fstat(fd, &st), 0);
    CHECK_EQ(st.size, 0);
    /* ftruncate grows with zeros and shrinks. */
    CHECK_EQ(ckptfs_write(fd, "0123456789", 10), 10);
    CHECK_EQ(ckptfs_ftruncate(fd, 150000), 0);
    CHECK_EQ(ckptfs_pread(fd, buf, sizeof buf, 0), 150000);
    CHECK(memcmp(buf, "0123456789", 10) == 0 && all_zero(buf + 10, 150000 - 10));
    CHECK_EQ(ckptfs_ftruncate(fd, 5), 0);
    CHECK_EQ(ckptfs_fstat(fd, &st), 0);
    CHECK_EQ(st.size, 5);
    CHECK_EQ(st.chunks, 1);
    CHECK_EQ(ckptfs_pread(fd, buf, sizeof buf, 0), 5);
    CHECK(memcmp(buf, "01234", 5) == 0);
    CHECK_EQ(ckptfs_ftruncate(fd, -1), -EINVAL);
    CHECK_EQ(ckptfs_ftruncate(fd, 8), 0); /* regrow: the cut bytes read as zeros */
    CHECK_EQ(ckptfs_pread(fd, buf, sizeof buf, 0), 8);
    CHECK(memcmp(buf, "01234\0\0\0", 8) == 0);
    CHECK_EQ(ckptfs_close(fd), 0);

    /* Bad descriptors. */
    CHECK_EQ(ckptfs_read(-1, buf, 1), -EBADF);
    CHECK_EQ(ckptfs_read(12345, buf, 1), -EBADF);
    CHECK_EQ(ckptfs_write(99999, buf, 1), -EBADF);
    CHECK_EQ(ckptfs_pread(-7, buf, 1, -1), -EBADF);
    CHECK_EQ(ckptfs_pwrite(4242, buf, 1, 0), -EBADF);
    CHECK_EQ(ckptfs_lseek(-1, 0, SEEK_SET), -EBADF);
    CHECK_EQ(ckptfs_ftruncate(777, 0), -EBADF);
    CHECK_EQ(ckptfs_fsync(-5), -EBADF);
    CHECK_EQ(ckptfs_fstat(3000, &st), -EBADF);
    CHECK_EQ(ckptfs_close(-1), -EBADF);
    CHECK(strstr(ckptfs_last_error(), "descriptor") != NULL);

    /* Unlinked while open: still readable through the descriptor. */
    CHECK_EQ(put_file("/ckpt/tmp.dat", "keep me", 7), 0);
    fd = ckptfs_open("/ckpt/tmp.dat", O_RDONLY, 0);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_unlink("/ckpt/tmp.dat"), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/tmp.dat", &st), -ENOENT);
    CHECK_EQ(ckptfs_read(fd, buf, 100), 7);
    CHECK(memcmp(buf, "keep me", 7) == 0);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_unlink("/ckpt/tmp.dat"), -ENOENT);

    /* Paths: outside any prefix, a prefix look-alike, dot segments, NULL. */
    CHECK_EQ(ckptfs_open("/elsewhere/x", O_CREAT | O_WRONLY, 0644), -ENOENT);
    CHECK_EQ(ckptfs_open("/ckpt2/x", O_CREAT | O_WRONLY, 0644), -ENOENT);
    CHECK_EQ(ckptfs_open("relative.dat", O_CREAT | O_WRONLY, 0644), -ENOENT);
    CHECK_EQ(ckptfs_stat("/ckpt/../ckpt/./b.dat", &st), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/../etc/passwd", &st), -ENOENT);
    CHECK_EQ(ckptfs_stat("/ckpt", &st), 0);
    CHECK(S_ISDIR(st.mode) && st.kind == CKPTFS_KIND_DIR && st.ino == 1);
    CHECK_EQ(ckptfs_open(NULL, O_RDONLY, 0), -EFAULT);
    CHECK_EQ(ckptfs_stat("/ckpt/b.dat", NULL), -EFAULT);
    CHECK_EQ(ckptfs_stat(NULL, &st), -EFAULT);
    CHECK_EQ(ckptfs_open("/ckpt/\xff\xfe", O_CREAT | O_WRONLY, 0644), -EINVAL);
}

/* A child of fork() may use inherited descriptors: it gets its own lease, so its close
 * does not end the parent's, and its death without close marks the file incomplete. */
static void t_fork(void) {
    struct ckptfs_stat st;
    char buf[32];
    int fd, status = -1;
    pid_t c;

    fd = ckptfs_open("/ckpt/forked", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_write(fd, "parent", 6), 6);
    c = fork();
    if (c == 0)
        _exit(ckptfs_pwrite(fd, "child", 5, 6) == 5 && ckptfs_close(fd) == 0 ? 0 : 1);
    CHECK(c > 0 && waitpid(c, &status, 0) == c && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(ckptfs_fstat(fd, &st), 0);
    CHECK_EQ(st.state, CKPTFS_STATE_WRITING); /* still ours */
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/forked", &st), 0);
    CHECK_EQ(st.state, CKPTFS_STATE_COMPLETE);
    CHECK_EQ(get_file("/ckpt/forked", buf, sizeof buf), 11);
    CHECK(memcmp(buf, "parentchild", 11) == 0);

    /* The child writes and dies without closing: like a crash. */
    fd = ckptfs_open("/ckpt/forked", O_WRONLY | O_APPEND, 0);
    CHECK(fd >= 0);
    c = fork();
    if (c == 0)
        _exit(ckptfs_write(fd, "!", 1) == 1 ? 0 : 1);
    CHECK(c > 0 && waitpid(c, &status, 0) == c && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/forked", &st), 0);
    CHECK_EQ(st.state, CKPTFS_STATE_INCOMPLETE);
    CHECK_EQ(st.size, 12); /* readable up to its last completed write */
    CHECK_EQ(ckptfs_unlink("/ckpt/forked"), 0);
}

/* The descriptor table is bounded: EMFILE, with no side effect on the store. */
static void t_emfile(void) {
    static int fds[70000];
    struct ckptfs_stat st;
    int n = 0, r = 0, i;
    CHECK_EQ(put_file("/ckpt/many", "m", 1), 0);
    while (n < 70000 && (r = ckptfs_open("/ckpt/many", O_RDONLY, 0)) >= 0)
        fds[n++] = r;
    CHECK_EQ(r, -EMFILE);
    CHECK(n > 60000 && n <= 65536);
    CHECK_EQ(ckptfs_open("/ckpt/not-created", O_CREAT | O_WRONLY, 0644), -EMFILE);
    CHECK_EQ(ckptfs_stat("/ckpt/not-created", &st), -ENOENT);
    r = 0;
    for (i = 0; i < n; i++)
        r |= ckptfs_close(fds[i]);
    CHECK_EQ(r, 0);
    r = ckptfs_open("/ckpt/many", O_RDONLY, 0);
    CHECK(r >= 0 && r < 16); /* the lowest free number again */
    CHECK_EQ(ckptfs_close(r), 0);
    CHECK_EQ(ckptfs_unlink("/ckpt/many"), 0);
}

static void t_names(void) {
    char name[400], path[5200];
    struct ckptfs_stat st;
    size_t i;
    memset(name, 'n', 300);
    name[300] = 0;
    snprintf(path, sizeof path, "/ckpt/%s", name);
    CHECK_EQ(ckptfs_open(path, O_CREAT | O_WRONLY, 0644), -ENAMETOOLONG);
    CHECK_EQ(ckptfs_mkdir(path, 0755), -ENAMETOOLONG);
    CHECK_EQ(ckptfs_stat(path, &st), -ENAMETOOLONG);
    /* A 255-byte name is fine. */
    name[255] = 0;
    snprintf(path, sizeof path, "/ckpt/%s", name);
    CHECK_EQ(put_file(path, "x", 1), 0);
    CHECK_EQ(ckptfs_unlink(path), 0);
    /* Over-long path made of short components. */
    strcpy(path, "/ckpt");
    for (i = 0; i < 2100; i++)
        strcat(path, "/d");
    CHECK_EQ(ckptfs_open(path, O_CREAT | O_WRONLY, 0644), -ENAMETOOLONG);
    CHECK_EQ(ckptfs_rename("/ckpt/b.dat", path), -ENAMETOOLONG);
}

static void t_dirs(void) {
    struct ckptfs_stat st;
    ckptfs_dirent e;
    int fd, n, seen_f1 = 0, seen_f2 = 0, seen_sub = 0;
    char buf[8];

    CHECK_EQ(ckptfs_mkdir("/ckpt/d1", 0750), 0);
    CHECK_EQ(ckptfs_mkdir("/ckpt/d1", 0750), -EEXIST);
    CHECK_EQ(ckptfs_mkdir("/ckpt/nope/x", 0750), -ENOENT);
    CHECK_EQ(ckptfs_stat("/ckpt/d1", &st), 0);
    CHECK(S_ISDIR(st.mode) && (st.mode & 0777) == 0750 && st.size == 0);
    CHECK_EQ(put_file("/ckpt/d1/f1", "1", 1), 0);
    CHECK_EQ(put_file("/ckpt/d1/f2", "22", 2), 0);
    CHECK_EQ(ckptfs_mkdir("/ckpt/d1/sub", 0755), 0);
    CHECK_EQ(ckptfs_mkdir("/ckpt/d1/f1/x", 0755), -ENOTDIR);
    CHECK_EQ(ckptfs_rmdir("/ckpt/d1"), -ENOTEMPTY);
    CHECK_EQ(ckptfs_rmdir("/ckpt/d1/f1"), -ENOTDIR);
    CHECK_EQ(ckptfs_rmdir("/ckpt/d1/none"), -ENOENT);
    CHECK_EQ(ckptfs_unlink("/ckpt/d1"), -EISDIR);

    /* Reading a directory. */
    fd = ckptfs_open("/ckpt/d1", O_RDONLY, 0);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_read(fd, buf, sizeof buf), -EISDIR);
    CHECK_EQ(ckptfs_pread(fd, buf, sizeof buf, 0), -EISDIR);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_open("/ckpt/d1", O_WRONLY, 0), -EISDIR);
    CHECK_EQ(ckptfs_open("/ckpt/d1", O_RDWR | O_CREAT, 0644), -EISDIR);

    /* Listing. */
    fd = ckptfs_opendir("/ckpt/d1");
    CHECK(fd >= 0);
    n = 0;
    while (ckptfs_readdir(fd, &e) == 1) {
        n++;
        CHECK_EQ(strlen(e.name), e.namelen);
        if (strcmp(e.name, "f1") == 0 && e.kind == CKPTFS_KIND_FILE)
            seen_f1 = 1;
        if (strcmp(e.name, "f2") == 0 && e.kind == CKPTFS_KIND_FILE)
            seen_f2 = 1;
        if (strcmp(e.name, "sub") == 0 && e.kind == CKPTFS_KIND_DIR)
            seen_sub = 1;
    }
    CHECK_EQ(n, 3);
    CHECK(seen_f1 && seen_f2 && seen_sub);
    CHECK_EQ(ckptfs_readdir(fd, &e), 0);
    CHECK_EQ(ckptfs_readdir(fd, NULL), -EFAULT);
    CHECK_EQ(ckptfs_lseek(fd, 0, SEEK_SET), 0); /* rewind: a fresh snapshot */
    CHECK_EQ(ckptfs_unlink("/ckpt/d1/f2"), 0);
    n = 0;
    while (ckptfs_readdir(fd, &e) == 1)
        n++;
    CHECK_EQ(n, 2);
    CHECK_EQ(ckptfs_lseek(fd, 5, SEEK_SET), -EINVAL);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_opendir("/ckpt/d1/f1"), -ENOTDIR);
    CHECK_EQ(ckptfs_opendir("/ckpt/none"), -ENOENT);
    fd = ckptfs_open("/ckpt/d1/f1", O_RDONLY, 0);
    CHECK_EQ(ckptfs_readdir(fd, &e), -ENOTDIR);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_readdir(fd, &e), -EBADF);

    /* The mount's root lists too. */
    fd = ckptfs_opendir("/ckpt");
    CHECK(fd >= 0);
    n = 0;
    while (ckptfs_readdir(fd, &e) == 1)
        n += strcmp(e.name, "d1") == 0;
    CHECK_EQ(n, 1);
    CHECK_EQ(ckptfs_close(fd), 0);

    CHECK_EQ(ckptfs_unlink("/ckpt/d1/f1"), 0);
    CHECK_EQ(ckptfs_rmdir("/ckpt/d1/sub"), 0);
    CHECK_EQ(ckptfs_rmdir("/ckpt/d1"), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/d1", &st), -ENOENT);
    CHECK_EQ(ckptfs_rmdir("/ckpt"), -EBUSY);
}

static void t_rename(void) {
    char buf[64];
    struct ckptfs_stat st;
    CHECK_EQ(put_file("/ckpt/src", "new", 3), 0);
    CHECK_EQ(put_file("/ckpt/dst", "old and longer", 14), 0);
    CHECK_EQ(ckptfs_rename("/ckpt/src", "/ckpt/dst"), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/src", &st), -ENOENT);
    CHECK_EQ(get_file("/ckpt/dst", buf, sizeof buf), 3);
    CHECK(memcmp(buf, "new", 3) == 0);
    CHECK_EQ(ckptfs_rename("/ckpt/src", "/ckpt/dst"), -ENOENT);
    /* Into a directory, and directory semantics. */
    CHECK_EQ(ckptfs_mkdir("/ckpt/rd", 0755), 0);
    CHECK_EQ(ckptfs_mkdir("/ckpt/rd2", 0755), 0);
    CHECK_EQ(ckptfs_rename("/ckpt/dst", "/ckpt/rd/moved"), 0);
    CHECK_EQ(get_file("/ckpt/rd/moved", buf, sizeof buf), 3);
    CHECK_EQ(ckptfs_rename("/ckpt/rd/moved", "/ckpt/rd2"), -EISDIR);
    CHECK_EQ(ckptfs_rename("/ckpt/rd2", "/ckpt/rd"), -ENOTEMPTY);
    CHECK_EQ(ckptfs_rename("/ckpt/rd", "/ckpt/rd/inner"), -EINVAL);
    CHECK_EQ(ckptfs_rename("/ckpt/rd", "/ckpt/rd3"), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/rd3/moved", &st), 0);
    /* Outside the store. */
    CHECK_EQ(ckptfs_rename("/ckpt/rd3/moved", "/tmp/moved"), -EXDEV);
    CHECK_EQ(ckptfs_rename("/ckpt/rd3/moved", "/small/moved"), -EXDEV);
    CHECK_EQ(ckptfs_rename("/nowhere/a", "/ckpt/a"), -ENOENT);
    CHECK_EQ(ckptfs_rename(NULL, "/ckpt/a"), -EFAULT);
    CHECK_EQ(ckptfs_unlink("/ckpt/rd3/moved"), 0);
    CHECK_EQ(ckptfs_rmdir("/ckpt/rd3"), 0);
    CHECK_EQ(ckptfs_rmdir("/ckpt/rd2"), 0);
}

/* Run `self agent STORE PATH OUT` as a separate process and compare OUT with `want`. */
static void run_agent(const char *self, const char *store, const char *path, const unsigned char *want,
                      size_t len) {
    char out[512];
    unsigned char *copy = (unsigned char *)malloc(len + 1);
    int status = -1;
    size_t got = 0;
    FILE *f;
    pid_t child;
    snprintf(out, sizeof out, "%s/copied.bin", tmpdir);
    child = fork();
    if (child == 0) {
        execl(self, self, "agent", store, path, out, (char *)NULL);
        _exit(127);
    }
    CHECK(child > 0 && waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    f = fopen(out, "rb");
    CHECK(f != NULL);
    if (f) {
        got = fread(copy, 1, len + 1, f);
        fclose(f);
    }
    CHECK_EQ(got, len);
    CHECK(got == len && memcmp(copy, want, len) == 0);
    unlink(out);
    free(copy);
}

/* Copy a file out through the data region in this process and in another one. */
static void t_data_region(const char *self, const char *main_store) {
    const size_t cs = 64 << 10;
    const size_t head = 2 * cs + 1000, tail_off = 5 * cs, tail = 500;
    unsigned char *data = (unsigned char *)calloc(tail_off + tail, 1);
    unsigned char *copy = (unsigned char *)calloc(tail_off + tail, 1);
    unsigned char *back = (unsigned char *)calloc(tail_off + tail, 1);
    ckptfs_chunk_meta m[8];
    void *base = NULL;
    size_t size = 0, chunk = 0;
    ssize_t n, i;
    int fd, ok;

    pattern(data, head, 1);
    pattern(data + tail_off, tail, 2);
    fd = ckptfs_open("/ckpt/dr.bin", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK_EQ(ckptfs_write(fd, data, head), (ssize_t)head);
    CHECK_EQ(ckptfs_pwrite(fd, data + tail_off, tail, (int64_t)tail_off), (ssize_t)tail);
    CHECK_EQ(ckptfs_close(fd), 0);

    CHECK_EQ(ckptfs_get_data_region("/ckpt", &base, &size, &chunk), 0);
    CHECK(base != NULL);
    CHECK_EQ(size, 8 << 20);
    CHECK_EQ(chunk, cs);
    CHECK_EQ(ckptfs_get_data_region("/ckpt/anything", NULL, NULL, NULL), 0);
    CHECK_EQ(ckptfs_get_data_region("/nowhere", &base, &size, &chunk), -ENOENT);
    CHECK_EQ(ckptfs_get_data_region(NULL, &base, &size, &chunk), -EFAULT);

    CHECK_EQ(ckptfs_get_chunk_list("/ckpt/dr.bin", NULL, 0), 4);
    CHECK_EQ(ckptfs_get_chunk_list("/ckpt/dr.bin", m, 2), -ERANGE);
    CHECK_EQ(ckptfs_get_chunk_list("/ckpt/dr.bin", NULL, 5), -EFAULT);
    CHECK_EQ(ckptfs_get_chunk_list("/ckpt", m, 8), -EISDIR);
    CHECK_EQ(ckptfs_get_chunk_list("/ckpt/none", m, 8), -ENOENT);
    n = ckptfs_get_chunk_list("/ckpt/dr.bin", m, 8);
    CHECK_EQ(n, 4);
    if (n == 4) {
        CHECK(m[0].logical == 0 && m[1].logical == 1 && m[2].logical == 2 && m[3].logical == 5);
        CHECK(m[0].length == cs && m[0].written == cs);
        CHECK(m[2].length == cs && m[2].written == 1000); /* the rest of chunk 2 is a hole */
        CHECK(m[3].length == tail && m[3].written == tail);
        ok = 1;
        for (i = 0; i < n; i++) {
            const unsigned char *src = (const unsigned char *)base + m[i].offset;
            ok &= m[i].location == CKPTFS_CHUNK_MEMORY;
            ok &= m[i].offset % cs == 0 && m[i].offset + cs <= size;
            ok &= m[i].crc_valid == 1 && crc32c(src, m[i].written) == m[i].crc32c;
            memcpy(copy + m[i].logical * cs, src, m[i].written);
        }
        CHECK(ok);
        CHECK(memcmp(copy, data, tail_off + tail) == 0);
    }
    CHECK_EQ(get_file("/ckpt/dr.bin", back, tail_off + tail), (ssize_t)(tail_off + tail));
    CHECK(memcmp(back, data, tail_off + tail) == 0);

    /* Another process (exec'd, nothing inherited) copies it out without us. */
    run_agent(self, main_store, "/agent/dr.bin", data, tail_off + tail);
    free(data);
    free(copy);
    free(back);
}

/* Spill-over: chunks beyond memory go to the spill file; the chunk list says so. */
static void t_spill(const char *self, const char *store) {
    const size_t cs = 64 << 10, len = 6 * cs + 123;
    unsigned char *data = (unsigned char *)malloc(len), *chunk = (unsigned char *)malloc(cs);
    char spill[CKPTFS_PATH_MAX + 1], small[4];
    struct ckptfs_stat st;
    ckptfs_chunk_meta m[8];
    ssize_t n, i, plen;
    int sfd, ok = 1, mem = 0, sp = 0;

    CHECK_EQ(mount_store("/spill", store, 4 * cs, cs, 16, tmpdir, 1 << 20), 0);
    pattern(data, len, 9);
    CHECK_EQ(put_file("/spill/big", data, len), 0);
    CHECK_EQ(ckptfs_stat("/spill/big", &st), 0);
    CHECK_EQ(st.chunks, 7);
    CHECK_EQ(st.spill_chunks, 3);
    plen = ckptfs_get_spill_path("/spill", NULL, 0);
    CHECK(plen > 0);
    CHECK_EQ(ckptfs_get_spill_path("/spill", small, sizeof small), -ERANGE);
    CHECK_EQ(ckptfs_get_spill_path("/spill", spill, sizeof spill), plen);
    CHECK(strncmp(spill, tmpdir, strlen(tmpdir)) == 0);
    CHECK_EQ(ckptfs_get_spill_path("/ckpt", spill + 0, sizeof spill), 0);
    CHECK_EQ(ckptfs_get_spill_path("/spill", spill, sizeof spill), plen);
    n = ckptfs_get_chunk_list("/spill/big", m, 8);
    CHECK_EQ(n, 7);
    sfd = open(spill, O_RDONLY);
    CHECK(sfd >= 0);
    for (i = 0; i < n && sfd >= 0; i++) {
        const unsigned char *want = data + m[i].logical * cs;
        if (m[i].location == CKPTFS_CHUNK_SPILL) {
            sp++;
            ok &= pread(sfd, chunk, m[i].written, (off_t)m[i].offset) == (ssize_t)m[i].written;
            ok &= memcmp(chunk, want, m[i].length) == 0;
            ok &= crc32c(chunk, m[i].written) == m[i].crc32c;
        } else {
            mem++;
        }
    }
    CHECK(ok);
    CHECK_EQ(mem, 4);
    CHECK_EQ(sp, 3);
    if (sfd >= 0)
        close(sfd);
    {
        unsigned char *back = (unsigned char *)malloc(len + 1);
        CHECK_EQ(get_file("/spill/big", back, len + 1), (ssize_t)len);
        CHECK(memcmp(back, data, len) == 0);
        free(back);
    }
    run_agent(self, store, "/agent/big", data, len);
    free(data);
    free(chunk);
    CHECK_EQ(ckptfs_unmount("/spill"), 0);
}

/* A full store: a short write, then ENOSPC, and nothing is damaged. */
static void t_enospc(const char *store) {
    const size_t cs = 64 << 10;
    unsigned char *data = (unsigned char *)malloc(300000), *back = (unsigned char *)malloc(300000);
    struct ckptfs_stat st;
    int fd;
    CHECK_EQ(mount_store("/small", store, 4 * cs, cs, 16, NULL, 0), 0);
    pattern(data, 300000, 3);
    fd = ckptfs_open("/small/full", O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_write(fd, data, 300000), (ssize_t)(4 * cs)); /* short */
    CHECK_EQ(ckptfs_write(fd, data, 10), -ENOSPC);
    CHECK_EQ(ckptfs_pwrite(fd, data, 10, 10 * (int64_t)cs), -ENOSPC);
    CHECK(strstr(ckptfs_last_error(), "no space") != NULL);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_stat("/small/full", &st), 0);
    CHECK_EQ(st.size, 4 * cs);
    CHECK_EQ(get_file("/small/full", back, 300000), (ssize_t)(4 * cs));
    CHECK(memcmp(back, data, 4 * cs) == 0);
    /* Freeing space makes room again. */
    CHECK_EQ(ckptfs_unlink("/small/full"), 0);
    CHECK_EQ(put_file("/small/again", data, 100000), 0);
    free(data);
    free(back);
}

/* A store with room for 8 inodes (root included): the 8th is ENFILE. */
static void t_enfile(const char *store) {
    char path[64];
    int i, ok = 0, last = 0;
    CHECK_EQ(mount_store("/few", store, 1 << 20, 64 << 10, 8, NULL, 0), 0);
    for (i = 0; i < 10; i++) {
        snprintf(path, sizeof path, "/few/f%d", i);
        last = put_file(path, "x", 1);
        if (last == 0)
            ok++;
        else
            break;
    }
    CHECK_EQ(ok, 7);
    CHECK_EQ(last, -ENFILE);
    CHECK_EQ(ckptfs_mkdir("/few/dir", 0755), -ENFILE);
    CHECK(strstr(ckptfs_last_error(), "file table full") != NULL);
    CHECK_EQ(ckptfs_unlink("/few/f0"), 0);
    CHECK_EQ(ckptfs_mkdir("/few/dir", 0755), 0);
    CHECK_EQ(ckptfs_unmount("/few"), 0);
}

static void t_env(const char *store) {
    size_t size = 0, chunk = 0;
    struct ckptfs_stat st;
    setenv("CKPTFS_STORE", store, 1);
    setenv("CKPTFS_MEM_SIZE", "1M", 1);
    setenv("CKPTFS_CHUNK_SIZE", "64K", 1);
    setenv("CKPTFS_MAX_FILES", "32", 1);
    CHECK_EQ(ckptfs_mount("/envm", NULL), 0);
    CHECK_EQ(ckptfs_get_data_region("/envm", NULL, &size, &chunk), 0);
    CHECK_EQ(size, 1 << 20);
    CHECK_EQ(chunk, 64 << 10);
    CHECK_EQ(put_file("/envm/x", "env", 3), 0);
    CHECK_EQ(ckptfs_unmount("/envm"), 0);
    CHECK_EQ(ckptfs_stat("/envm/x", &st), -ENOENT);
    setenv("CKPTFS_MEM_SIZE", "lots", 1);
    CHECK_EQ(ckptfs_mount("/envbad", NULL), -EINVAL);
    CHECK(strstr(ckptfs_last_error(), "CKPTFS_MEM_SIZE") != NULL);
    setenv("CKPTFS_MEM_SIZE", "2M", 1); /* differs from the existing segment */
    CHECK_EQ(ckptfs_mount("/envbad", NULL), -EINVAL);
    CHECK(strstr(ckptfs_last_error(), "memory size") != NULL);
    unsetenv("CKPTFS_STORE");
    unsetenv("CKPTFS_MEM_SIZE");
    unsetenv("CKPTFS_CHUNK_SIZE");
    unsetenv("CKPTFS_MAX_FILES");
}

/* Foreign, other-version and damaged segments: refused with a message naming them. */
static void t_bad_segments(void) {
    static const struct {
        const char *tag, *expect;
        int kind;
    } cases[] = {
        {"garbage", "bad magic", 0},
        {"short", "too small", 1},
        {"version", "format version 99", 2},
        {"damaged", "checksum", 3},
    };
    unsigned char head[8192];
    char name[128], path[256];
    struct ckptfs_stat st;
    size_t i;
    FILE *f;
    ckptfs_options o = CKPTFS_OPTIONS_INIT;
    unsigned char ver[4] = {0, 0, 0, 0};
    {
        /* The format version this build writes, read from a real segment, so that the
         * "damaged" case fails on its checksum and not on its version. */
        ckptfs_options r = CKPTFS_OPTIONS_INIT;
        char rname[128], rpath[256];
        snprintf(rname, sizeof rname, "capi-bad-ref-%d", pid);
        snprintf(rpath, sizeof rpath, "/dev/shm/ckptfs.%s", rname);
        r.store = rname;
        r.mem_size = 1 << 20;
        r.chunk_size = 64 << 10;
        r.max_files = 16;
        CHECK_EQ(ckptfs_mount("/badref", &r), 0);
        CHECK_EQ(ckptfs_unmount("/badref"), 0);
        f = fopen(rpath, "rb");
        CHECK(f != NULL && fseek(f, 8, SEEK_SET) == 0 && fread(ver, 1, 4, f) == 4);
        if (f)
            fclose(f);
        CHECK_EQ(ckptfs_destroy_store(rname), 0);
    }
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = sizeof head;
        snprintf(name, sizeof name, "capi-bad-%s-%d", cases[i].tag, pid);
        snprintf(path, sizeof path, "/dev/shm/ckptfs.%s", name);
        pattern(head, sizeof head, 5);
        if (cases[i].kind == 1)
            len = 100;
        if (cases[i].kind >= 2) {
            memcpy(head, "CKPTFS\0\x01", 8);
            if (cases[i].kind == 2) {
                head[8] = 99;
                head[9] = head[10] = head[11] = 0;
            } else {
                memcpy(head + 8, ver, 4);
            }
        }
        f = fopen(path, "wb");
        CHECK(f != NULL);
        if (!f)
            continue;
        CHECK_EQ(fwrite(head, 1, len, f), len);
        fclose(f);
        o.store = name;
        /* Mode 0644 (fopen under umask 022): refused before its content is read. */
        CHECK_EQ(ckptfs_mount("/bad", &o), -EACCES);
        CHECK(strstr(ckptfs_last_error(), "0600") != NULL);
        /* Owned by us with mode 0600, so the content checks are what refuse it. */
        CHECK_EQ(chmod(path, 0600), 0);
        CHECK_EQ(ckptfs_mount("/bad", &o), -EINVAL);
        CHECK(strstr(ckptfs_last_error(), path) != NULL);
        CHECK(strstr(ckptfs_last_error(), cases[i].expect) != NULL);
        if (strstr(ckptfs_last_error(), cases[i].expect) == NULL)
            fprintf(stderr, "  message was: %s\n", ckptfs_last_error());
        CHECK_EQ(ckptfs_stat("/bad", &st), -ENOENT); /* nothing attached */
        o.flags = CKPTFS_MOUNT_ATTACH;
        CHECK_EQ(ckptfs_mount("/bad", &o), -EINVAL);
        o.flags = 0;
        /* The foreign file is left alone. */
        f = fopen(path, "rb");
        CHECK(f != NULL && fread(head, 1, 8, f) == 8);
        if (f)
            fclose(f);
        unlink(path);
    }
}

static void t_unmount(void) {
    struct ckptfs_stat st;
    int fd = ckptfs_open("/ckpt/b.dat", O_RDONLY, 0);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_unmount("/ckpt"), -EBUSY);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_unmount("/ckpt/"), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/b.dat", &st), -ENOENT);
    CHECK_EQ(ckptfs_open("/ckpt/b.dat", O_RDONLY, 0), -ENOENT);
    CHECK_EQ(ckptfs_unmount("/ckpt"), -EINVAL);
}

int main(int argc, char **argv) {
    char s_main[64], s_spill[64], s_small[64], s_few[64], s_env[64];
    if (argc == 5 && strcmp(argv[1], "agent") == 0)
        return agent_main(argv[2], argv[3], argv[4]);
    pid = (int)getpid();
    crc32c_init();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/capi-test-%d", pid);
    if (mkdir(tmpdir, 0700) != 0) {
        perror(tmpdir);
        return 2;
    }
    store_name(s_main, sizeof s_main, "main");
    store_name(s_spill, sizeof s_spill, "spill");
    store_name(s_small, sizeof s_small, "small");
    store_name(s_few, sizeof s_few, "few");
    store_name(s_env, sizeof s_env, "env");

    t_version();
    t_last_error();
    t_mount(s_main);
    t_files();
    t_fork();
    t_emfile();
    t_names();
    t_dirs();
    t_enospc(s_small);
    t_rename();
    t_data_region(argv[0], s_main);
    t_spill(argv[0], s_spill);
    t_enfile(s_few);
    t_env(s_env);
    t_bad_segments();
    t_unmount();

    CHECK_EQ(ckptfs_unmount("/small"), 0);
    CHECK_EQ(ckptfs_destroy_store(s_main), 0);
    CHECK_EQ(ckptfs_destroy_store(s_spill), 0);
    CHECK_EQ(ckptfs_destroy_store(s_small), 0);
    CHECK_EQ(ckptfs_destroy_store(s_few), 0);
    CHECK_EQ(ckptfs_destroy_store(s_env), 0);
    rmdir(tmpdir);

    printf("capi_test: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
