/*
 * capi_test.c - exercises the file, namespace, mount and levels calls of include/ckptfs.h
 * through libckptfs (capi_region_test.c covers the data-region calls, the limits, the
 * environment and damaged segments).
 *
 * Usage: capi_test                      run all tests; prints "N passed, M failed"
 *
 * Every store it creates is named capi-*-<pid> and destroyed at the end.
 */
#define _POSIX_C_SOURCE 200809L
#include "capi_check.h"

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
    /* Store format 4: what is left is a small file, one 4 KiB block of a shared chunk. */
    CHECK_EQ(st.chunks, 0);
    CHECK_EQ(st.allocated, 4096);
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

    /* Symbolic links: kept and read back, never followed by the C API. */
    {
        char t[32];
        CHECK_EQ(ckptfs_symlink("d1/f2", "/ckpt/ln"), 0);
        CHECK_EQ(ckptfs_symlink("x", "/ckpt/ln"), -EEXIST);
        CHECK_EQ(ckptfs_stat("/ckpt/ln", &st), 0);
        CHECK(S_ISLNK(st.mode) && st.kind == CKPTFS_KIND_SYMLINK && st.size == 5);
        CHECK_EQ(ckptfs_readlink("/ckpt/ln", t, sizeof t), 5);
        CHECK(memcmp(t, "d1/f2", 5) == 0);
        CHECK_EQ(ckptfs_readlink("/ckpt/ln", t, 2), 2);
        CHECK_EQ(ckptfs_readlink("/ckpt/d1/f1", t, sizeof t), -EINVAL);
        CHECK_EQ(ckptfs_open("/ckpt/ln", O_RDONLY, 0), -ELOOP);
        CHECK_EQ(ckptfs_unlink("/ckpt/ln"), 0);
        CHECK_EQ(ckptfs_readlink("/ckpt/ln", t, sizeof t), -ENOENT);
    }

    /* Hard links: one inode under two names, the data kept until the last goes. */
    {
        struct ckptfs_stat a, b;
        CHECK_EQ(ckptfs_link("/ckpt/d1/f2", "/ckpt/hl"), 0);
        CHECK_EQ(ckptfs_link("/ckpt/d1/f2", "/ckpt/hl"), -EEXIST);
        CHECK_EQ(ckptfs_link("/ckpt/d1", "/ckpt/hd"), -EPERM);
        CHECK_EQ(ckptfs_stat("/ckpt/hl", &a), 0);
        CHECK_EQ(ckptfs_stat("/ckpt/d1/f2", &b), 0);
        CHECK(a.ino == b.ino && a.size == 2);
        CHECK_EQ(ckptfs_unlink("/ckpt/hl"), 0);
        CHECK_EQ(ckptfs_stat("/ckpt/d1/f2", &b), 0);
        CHECK(b.size == 2);
    }

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

/* Which levels hold a file: the node daemon's record (/.ckptfs/levels.json, written
 * here as the daemon writes it) counts a partner copy only for the current version. */
static int write_levels_record(const char *json) {
    int r = ckptfs_mkdir("/ckpt/.ckptfs", 0700);
    if (r != 0 && r != -EEXIST)
        return r;
    r = put_file("/ckpt/.ckptfs/levels.json.tmp", json, strlen(json));
    return r ? r : ckptfs_rename("/ckpt/.ckptfs/levels.json.tmp", "/ckpt/.ckptfs/levels.json");
}

static void t_levels(void) {
    struct ckptfs_stat a, b;
    ckptfs_levels lv;
    char json[1024], list[64];
    int fd;

    CHECK_EQ(ckptfs_mkdir("/ckpt/lv", 0755), 0);
    CHECK_EQ(put_file("/ckpt/lv/a.dat", "version one", 11), 0);
    CHECK_EQ(put_file("/ckpt/lv/b.dat", "b", 1), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/lv/a.dat", &a), 0);
    CHECK_EQ(ckptfs_stat("/ckpt/lv/b.dat", &b), 0);

    /* No record (no node daemon): local only. */
    memset(&lv, 0xff, sizeof lv);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/a.dat", &lv), 0);
    CHECK_EQ(lv.flags, CKPTFS_LEVEL_LOCAL);
    CHECK_EQ(lv.partners, 0);
    CHECK_EQ(lv.refused, 0);
    CHECK_EQ(lv.reserved, 0);
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv/a.dat", NULL, 0), 0);

    /* The daemon's record: a.dat copied to node3 and node4; node2 refused b.dat. */
    snprintf(json, sizeof json,
             "{\"node\":\"node1\",\"files\":{"
             "\"/lv/a.dat\":{\"identity\":{\"ino\":%llu,\"generation\":%u,\"size\":%llu,"
             "\"mtime_ns\":%llu},\"partners\":[\"node3\",\"node4\"],\"refused\":{}},"
             "\"/lv/b.dat\":{\"identity\":{\"ino\":%llu,\"generation\":%u,\"size\":%llu,"
             "\"mtime_ns\":%llu},\"partners\":[],\"refused\":{\"node2\":\"ENOSPC\"}}}}",
             (unsigned long long)a.ino, (unsigned)a.generation, (unsigned long long)a.size,
             (unsigned long long)a.mtime_ns, (unsigned long long)b.ino, (unsigned)b.generation,
             (unsigned long long)b.size, (unsigned long long)b.mtime_ns);
    CHECK_EQ(write_levels_record(json), 0);

    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/a.dat", &lv), 0);
    CHECK_EQ(lv.flags, CKPTFS_LEVEL_LOCAL | CKPTFS_LEVEL_PARTNER);
    CHECK_EQ(lv.partners, 2);
    CHECK_EQ(lv.refused, 0);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/b.dat", &lv), 0);
    CHECK_EQ(lv.flags, CKPTFS_LEVEL_LOCAL);
    CHECK_EQ(lv.partners, 0);
    CHECK_EQ(lv.refused, 1);

    /* The partner ids, as listxattr: the size, too small a buffer, the list. */
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv/a.dat", NULL, 0), 12);
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv/a.dat", list, 11), -ERANGE);
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv/a.dat", NULL, 11), -EFAULT);
    memset(list, 'x', sizeof list);
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv/a.dat", list, sizeof list), 12);
    CHECK(memcmp(list, "node3\0node4\0", 12) == 0);
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv/b.dat", list, sizeof list), 0);
    /* The level ids, in read order. */
    CHECK_EQ(ckptfs_file_level_ids("/ckpt/lv/a.dat", NULL, 0), 34);
    CHECK_EQ(ckptfs_file_level_ids("/ckpt/lv/a.dat", list, 33), -ERANGE);
    CHECK_EQ(ckptfs_file_level_ids("/ckpt/lv/a.dat", list, sizeof list), 34);
    CHECK(memcmp(list, "local\0partner:node3\0partner:node4\0", 34) == 0);
    CHECK_EQ(ckptfs_file_level_ids("/ckpt/lv/b.dat", list, sizeof list), 6);
    CHECK(memcmp(list, "local\0", 6) == 0);

    /* A stale record: a.dat rewritten since its copies were made has no partner copy. */
    CHECK_EQ(put_file("/ckpt/lv/a.dat", "version two, longer", 19), 0);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/a.dat", &lv), 0);
    CHECK_EQ(lv.flags, CKPTFS_LEVEL_LOCAL);
    CHECK_EQ(lv.partners, 0);
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv/a.dat", list, sizeof list), 0);

    /* Open for writing: not complete, so not even local. */
    fd = ckptfs_open("/ckpt/lv/b.dat", O_WRONLY | O_APPEND, 0);
    CHECK(fd >= 0);
    CHECK_EQ(ckptfs_write(fd, "more", 4), 4);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/b.dat", &lv), 0);
    CHECK_EQ(lv.flags, 0);
    CHECK_EQ(ckptfs_close(fd), 0);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/b.dat", &lv), 0);
    CHECK_EQ(lv.flags, CKPTFS_LEVEL_LOCAL);
    CHECK_EQ(lv.refused, 0); /* the refusal was of the old version */

    /* A record that does not parse counts as none (as ckptfs ls -l). */
    CHECK_EQ(write_levels_record("{not json"), 0);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/b.dat", &lv), 0);
    CHECK_EQ(lv.flags, CKPTFS_LEVEL_LOCAL);

    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/none", &lv), -ENOENT);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv", &lv), -EISDIR);
    CHECK_EQ(ckptfs_file_levels("/ckpt/lv/a.dat", NULL), -EFAULT);
    CHECK_EQ(ckptfs_file_levels(NULL, &lv), -EFAULT);
    CHECK_EQ(ckptfs_file_levels("/elsewhere/a.dat", &lv), -ENOENT);
    CHECK_EQ(ckptfs_file_partners("/ckpt/lv", list, sizeof list), -EISDIR);
}

int main(void) {
    char s_main[64], s_small[64];
    pid = (int)getpid();
    crc32c_init();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/capi-test-%d", pid);
    if (mkdir(tmpdir, 0700) != 0) {
        perror(tmpdir);
        return 2;
    }
    store_name(s_main, sizeof s_main, "main");
    store_name(s_small, sizeof s_small, "small");

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
    t_levels();
    t_unmount();

    CHECK_EQ(ckptfs_unmount("/small"), 0);
    CHECK_EQ(ckptfs_destroy_store(s_main), 0);
    CHECK_EQ(ckptfs_destroy_store(s_small), 0);
    rmdir(tmpdir);

    printf("capi_test: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
