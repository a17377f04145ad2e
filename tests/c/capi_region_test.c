/*
 * capi_region_test.c - exercises the data-region calls of include/ckptfs.h (a separate
 * agent process copies a file out without the writer), spill files, the file-table
 * limit, mounting from the CKPTFS_* environment and damaged segments.
 *
 * Usage: capi_region_test                      run all tests; prints "N passed, M failed"
 *        capi_region_test agent STORE PATH OUT copy store file PATH out to the real file
 *                                              OUT through the data-region interface only
 *                                              (used by the test as a separate process)
 *
 * Every store it creates is named capi-*-<pid> and destroyed at the end.
 */
#define _POSIX_C_SOURCE 200809L
#include "capi_check.h"

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

int main(int argc, char **argv) {
    char s_main[64], s_spill[64], s_few[64], s_env[64];
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
    store_name(s_few, sizeof s_few, "few");
    store_name(s_env, sizeof s_env, "env");

    CHECK_EQ(mount_store("/ckpt", s_main, 8 << 20, 64 << 10, 64, NULL, 0), 0);
    t_data_region(argv[0], s_main);
    t_spill(argv[0], s_spill);
    t_enfile(s_few);
    t_env(s_env);
    t_bad_segments();

    CHECK_EQ(ckptfs_unmount("/ckpt"), 0);
    CHECK_EQ(ckptfs_destroy_store(s_main), 0);
    CHECK_EQ(ckptfs_destroy_store(s_spill), 0);
    CHECK_EQ(ckptfs_destroy_store(s_few), 0);
    CHECK_EQ(ckptfs_destroy_store(s_env), 0);
    rmdir(tmpdir);

    printf("capi_region_test: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
