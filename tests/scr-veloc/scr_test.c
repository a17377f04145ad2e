/*
 * An SCR application, written from SCR's API documentation: each rank writes one file
 * per checkpoint through SCR_Route_file and reads it back at restart. Run with 4 ranks
 * by tests/scr-veloc/run.sh in several modes:
 *
 *   scr_test write FIRST LAST     checkpoints step.FIRST .. step.LAST, then asks
 *                                 SCR_Have_restart and expects step.LAST
 *   scr_test restart EXPECT       restarts, expects checkpoint EXPECT ("none": no
 *                                 checkpoint), verifies every byte of this rank's file
 *   scr_test kill STEP VICTIM     begins step.STEP, rank VICTIM dies (SIGKILL) before
 *                                 completing; the others complete
 *   scr_test invalid STEP         rank 1 completes step.STEP with valid = 0: every rank
 *                                 gets a failure
 *   scr_test badrestart EXPECT NEXT  restart from EXPECT, rank 3 reports the data bad;
 *                                 then SCR_Have_restart must offer NEXT, and it loads
 *   scr_test current NAME         SCR_Current(NAME), then SCR_Have_restart gives NAME
 *   scr_test output               an output-only dataset: files reach the prefix
 *                                 directory, and it is never offered for restart
 *   scr_test errors               every misuse answers a failure, never crashes
 *   scr_test drop NAME NEXT       SCR_Drop(NAME): SCR_Have_restart offers NEXT
 *   scr_test delete NAME          SCR_Delete(NAME): it is gone
 *   scr_test need [NEED [EXIT]]   SCR_Need_checkpoint and SCR_Should_exit agree on all
 *                                 ranks (and equal NEED, EXIT: default 0)
 *
 * With SCR_TEST_ROUTE_PREFIX set, every path SCR_Route_file gives for a checkpoint's
 * file (written or read) must begin with it (the staging directory, or the preload
 * shim's mount prefix when the library routes straight into the store).
 */
#include <mpi.h>
#include <scr.h>

#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, nranks, failures;

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "scr_test rank %d line %d: ", rank, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, "\n");                                                  \
            failures++;                                                             \
        }                                                                           \
    } while (0)

/* The content of rank r's file of step s: 200000 + 1000 * r bytes of a pattern. */
static size_t file_size(int r) { return 200000 + 1000 * (size_t)r; }
static unsigned char byte_at(int r, int s, size_t i) { return (unsigned char)(i * 31 + r * 7 + s * 13); }

static void check_route(const char *path) {
    const char *want = getenv("SCR_TEST_ROUTE_PREFIX");
    if (want && *want) CHECK(strncmp(path, want, strlen(want)) == 0, "routed to %s, not under %s", path, want);
}

static int write_step(int step, int valid) {
    char name[64], path[SCR_MAX_FILENAME], file[64];
    snprintf(name, sizeof name, "step.%d", step);
    int rc = SCR_Start_output(name, SCR_FLAG_CHECKPOINT);
    CHECK(rc == SCR_SUCCESS, "SCR_Start_output(%s) = %d", name, rc);
    snprintf(file, sizeof file, "ckpt/rank_%d.dat", rank);
    rc = SCR_Route_file(file, path);
    CHECK(rc == SCR_SUCCESS, "SCR_Route_file(%s) = %d", file, rc);
    check_route(path);
    size_t n = file_size(rank);
    unsigned char *buf = malloc(n);
    for (size_t i = 0; i < n; i++) buf[i] = byte_at(rank, step, i);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "open %s", path);
    if (fd >= 0) {
        CHECK(write(fd, buf, n) == (ssize_t)n, "write %s", path);
        CHECK(fsync(fd) == 0, "fsync %s", path);
        close(fd);
    }
    free(buf);
    return SCR_Complete_output(valid);
}

static int read_back(const char *expect) {
    int flag = -1;
    char name[SCR_MAX_FILENAME], name2[SCR_MAX_FILENAME];
    int rc = SCR_Have_restart(&flag, name);
    CHECK(rc == SCR_SUCCESS, "SCR_Have_restart = %d", rc);
    if (strcmp(expect, "none") == 0) {
        CHECK(flag == 0, "expected no checkpoint, got %s", name);
        CHECK(SCR_Start_restart(name2) != SCR_SUCCESS, "SCR_Start_restart without a checkpoint succeeded");
        return 0;
    }
    CHECK(flag == 1 && strcmp(name, expect) == 0, "SCR_Have_restart: flag %d name %s, expected %s", flag,
          flag ? name : "-", expect);
    rc = SCR_Start_restart(name2);
    CHECK(rc == SCR_SUCCESS && strcmp(name2, name) == 0, "SCR_Start_restart = %d (%s)", rc, name2);
    int step = atoi(strchr(expect, '.') ? strchr(expect, '.') + 1 : "0");
    char file[64], path[SCR_MAX_FILENAME];
    snprintf(file, sizeof file, "ckpt/rank_%d.dat", rank);
    rc = SCR_Route_file(file, path);
    CHECK(rc == SCR_SUCCESS, "SCR_Route_file(%s) at restart = %d", file, rc);
    check_route(path);
    int ok = 1;
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "open %s for reading", path);
    if (fd >= 0) {
        size_t n = file_size(rank);
        unsigned char *buf = malloc(n + 1);
        ssize_t got = read(fd, buf, n + 1);
        CHECK(got == (ssize_t)n, "read %zd bytes of %s, expected %zu", got, path, n);
        for (size_t i = 0; got == (ssize_t)n && i < n; i++)
            if (buf[i] != byte_at(rank, step, i)) {
                CHECK(0, "byte %zu of %s differs", i, path);
                ok = 0;
                break;
            }
        free(buf);
        close(fd);
    } else {
        ok = 0;
    }
    /* Another rank's file is not ours to read. */
    snprintf(file, sizeof file, "ckpt/rank_%d.dat", (rank + 1) % nranks);
    CHECK(nranks == 1 || SCR_Route_file(file, path) != SCR_SUCCESS, "routed another rank's file at restart");
    CHECK(SCR_Route_file("ckpt/never_written.dat", path) != SCR_SUCCESS, "routed a file not in the checkpoint");
    return ok;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *mode = argc > 1 ? argv[1] : "";
    int rc;
    if (strcmp(mode, "errors") == 0) {
        char path[SCR_MAX_FILENAME];
        int flag;
        /* Before SCR_Init. */
        CHECK(SCR_Start_output("x", SCR_FLAG_CHECKPOINT) != SCR_SUCCESS, "Start_output before Init");
        CHECK(SCR_Route_file("a", path) != SCR_SUCCESS, "Route_file before Init");
        CHECK(SCR_Have_restart(&flag, path) != SCR_SUCCESS, "Have_restart before Init");
        CHECK(SCR_Complete_output(1) != SCR_SUCCESS, "Complete_output before Init");
        CHECK(SCR_Finalize() != SCR_SUCCESS, "Finalize before Init");
        CHECK(SCR_Config("SCR_FLUSH=0") == NULL, "SCR_Config set returns NULL");
        const char *v = SCR_Config("SCR_FLUSH");
        CHECK(v != NULL && strcmp(v, "0") == 0, "SCR_FLUSH reads back as %s", v ? v : "NULL");
        free((void *)v);
        /* Unsetting removes the SCR_Config value; the environment's stays visible. */
        CHECK(SCR_Config("SCR_FLUSH=") == NULL, "unset SCR_FLUSH");
        v = SCR_Config("SCR_FLUSH");
        const char *env = getenv("SCR_FLUSH");
        CHECK(env ? v != NULL && strcmp(v, env) == 0 : v == NULL, "SCR_FLUSH after unset: %s", v ? v : "NULL");
        free((void *)v);
        CHECK(SCR_Configf("SCR_CACHE_SIZE=%d", 4) == NULL, "SCR_Configf set");
        v = SCR_Config("SCR_CACHE_SIZE");
        CHECK(v != NULL && strcmp(v, "4") == 0, "SCR_Configf value: %s", v ? v : "NULL");
        free((void *)v);
        CHECK(SCR_Init() == SCR_SUCCESS, "Init");
        CHECK(SCR_Init() != SCR_SUCCESS, "Init twice");
        CHECK(SCR_Config("SCR_FLUSH=3") == NULL && SCR_Config("SCR_CACHE_SIZE") != NULL, "Config after Init");
        CHECK(SCR_Complete_output(1) != SCR_SUCCESS, "Complete_output without Start");
        CHECK(SCR_Complete_restart(1) != SCR_SUCCESS, "Complete_restart without Start");
        CHECK(SCR_Start_output("bad", 8) != SCR_SUCCESS, "bad flags");
        CHECK(SCR_Start_output("bad", SCR_FLAG_NONE) != SCR_SUCCESS, "no flags");
        char longname[SCR_MAX_FILENAME + 10];
        memset(longname, 'n', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        CHECK(SCR_Start_output(longname, SCR_FLAG_CHECKPOINT) != SCR_SUCCESS, "name too long");
        CHECK(SCR_Route_file(longname, path) != SCR_SUCCESS, "route name too long (idle)");
        CHECK(SCR_Route_file("plain.txt", path) == SCR_SUCCESS && strcmp(path, "plain.txt") == 0,
              "outside a phase the name is copied: %s", path);
        CHECK(SCR_Route_file(NULL, path) != SCR_SUCCESS, "route NULL");
        CHECK(SCR_Have_restart(NULL, path) != SCR_SUCCESS, "Have_restart(NULL)");
        CHECK(SCR_Current("no-such-dataset") != SCR_SUCCESS, "Current of an unknown name");
        CHECK(SCR_Drop("no-such-dataset") != SCR_SUCCESS, "Drop of an unknown name");
        CHECK(SCR_Delete("no-such-dataset") != SCR_SUCCESS, "Delete of an unknown name");
        rc = SCR_Start_output("errs", SCR_FLAG_CHECKPOINT);
        CHECK(rc == SCR_SUCCESS, "Start_output = %d", rc);
        CHECK(SCR_Start_output("errs2", SCR_FLAG_CHECKPOINT) != SCR_SUCCESS, "Start inside a phase");
        CHECK(SCR_Route_file("/etc/passwd", path) != SCR_SUCCESS, "route outside the prefix");
        CHECK(SCR_Route_file("../outside.dat", path) != SCR_SUCCESS, "route ../ outside the prefix");
        CHECK(SCR_Route_file(longname, path) != SCR_SUCCESS, "route name too long");
        CHECK(SCR_Have_restart(&flag, path) != SCR_SUCCESS, "Have_restart inside a phase");
        CHECK(SCR_Start_restart(path) != SCR_SUCCESS, "Start_restart inside a phase");
        CHECK(SCR_Complete_restart(1) != SCR_SUCCESS, "Complete_restart in an output phase");
        rc = SCR_Route_file("sub/dir/f.dat", path);
        CHECK(rc == SCR_SUCCESS, "route sub/dir/f.dat = %d", rc);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "the routed directory exists: %s", path);
        if (f) fclose(f);
        CHECK(SCR_Complete_output(1) == SCR_SUCCESS, "Complete_output");
        CHECK(SCR_Complete_output(1) != SCR_SUCCESS, "Complete_output twice");
        CHECK(strncmp(SCR_Get_version(), "v3", 2) == 0, "version %s", SCR_Get_version());
        CHECK(SCR_Finalize() == SCR_SUCCESS, "Finalize");
        CHECK(SCR_Finalize() != SCR_SUCCESS, "Finalize twice");
        CHECK(SCR_Start_output("after", SCR_FLAG_CHECKPOINT) != SCR_SUCCESS, "Start after Finalize");
        goto done;
    }
    rc = SCR_Init();
    CHECK(rc == SCR_SUCCESS, "SCR_Init = %d", rc);
    if (strcmp(mode, "write") == 0 && argc == 4) {
        int first = atoi(argv[2]), last = atoi(argv[3]);
        for (int s = first; s <= last; s++) {
            rc = write_step(s, 1);
            CHECK(rc == SCR_SUCCESS, "SCR_Complete_output(step.%d) = %d", s, rc);
        }
        int flag = 0;
        char name[SCR_MAX_FILENAME], expect[64];
        snprintf(expect, sizeof expect, "step.%d", last);
        rc = SCR_Have_restart(&flag, name);
        CHECK(rc == SCR_SUCCESS && flag == 1 && strcmp(name, expect) == 0, "after writing: %d %d %s", rc, flag,
              name);
    } else if (strcmp(mode, "restart") == 0 && argc == 3) {
        int ok = read_back(argv[2]);
        if (strcmp(argv[2], "none") != 0) {
            rc = SCR_Complete_restart(ok);
            CHECK(rc == SCR_SUCCESS, "SCR_Complete_restart = %d", rc);
        }
    } else if (strcmp(mode, "kill") == 0 && argc == 4) {
        int step = atoi(argv[2]), victim = atoi(argv[3]);
        char name[64], path[SCR_MAX_FILENAME], file[64];
        snprintf(name, sizeof name, "step.%d", step);
        CHECK(SCR_Start_output(name, SCR_FLAG_CHECKPOINT) == SCR_SUCCESS, "Start_output");
        snprintf(file, sizeof file, "ckpt/rank_%d.dat", rank);
        CHECK(SCR_Route_file(file, path) == SCR_SUCCESS, "Route_file");
        FILE *f = fopen(path, "w");
        if (f) {
            fputs("partial", f);
            fflush(f);
        }
        if (rank == victim) raise(SIGKILL); /* dies in the middle of the checkpoint */
        if (f) fclose(f);
        SCR_Complete_output(1); /* never agreed: the victim is dead */
    } else if (strcmp(mode, "invalid") == 0 && argc == 3) {
        rc = write_step(atoi(argv[2]), rank != 1);
        CHECK(rc != SCR_SUCCESS, "SCR_Complete_output with an invalid rank succeeded on rank %d", rank);
    } else if (strcmp(mode, "badrestart") == 0 && argc == 4) {
        char name[SCR_MAX_FILENAME];
        read_back(argv[2]);
        rc = SCR_Complete_restart(rank == 3 ? 0 : 1);
        CHECK(rc != SCR_SUCCESS, "SCR_Complete_restart with a bad rank succeeded");
        int flag = 0;
        rc = SCR_Have_restart(&flag, name);
        CHECK(rc == SCR_SUCCESS && flag == 1 && strcmp(name, argv[3]) == 0, "after a failed restart: %s", name);
        int ok = read_back(argv[3]);
        CHECK(SCR_Complete_restart(ok) == SCR_SUCCESS, "second restart");
    } else if (strcmp(mode, "current") == 0 && argc == 3) {
        rc = SCR_Current(argv[2]);
        CHECK(rc == SCR_SUCCESS, "SCR_Current = %d", rc);
        int ok = read_back(argv[2]);
        CHECK(SCR_Complete_restart(ok) == SCR_SUCCESS, "Complete_restart");
    } else if (strcmp(mode, "drop") == 0 && argc == 4) {
        CHECK(SCR_Drop(argv[2]) == SCR_SUCCESS, "SCR_Drop");
        int ok = read_back(argv[3]);
        CHECK(SCR_Complete_restart(ok) == SCR_SUCCESS, "Complete_restart");
    } else if (strcmp(mode, "delete") == 0 && argc == 3) {
        CHECK(SCR_Delete(argv[2]) == SCR_SUCCESS, "SCR_Delete");
        CHECK(SCR_Current(argv[2]) != SCR_SUCCESS, "SCR_Current of a deleted dataset");
    } else if (strcmp(mode, "output") == 0) {
        char path[SCR_MAX_FILENAME], file[64], name[SCR_MAX_FILENAME];
        int before = 0, after = 0;
        char bname[SCR_MAX_FILENAME] = "", aname[SCR_MAX_FILENAME] = "";
        SCR_Have_restart(&before, bname);
        CHECK(SCR_Start_output("viz.1", SCR_FLAG_OUTPUT) == SCR_SUCCESS, "Start_output(OUTPUT)");
        snprintf(file, sizeof file, "viz/rank_%d.txt", rank);
        CHECK(SCR_Route_file(file, path) == SCR_SUCCESS, "Route_file");
        CHECK(strcmp(path, file) != 0, "an output file is routed to the cache, not %s", path);
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "output of rank %d\n", rank);
            fclose(f);
        }
        CHECK(SCR_Complete_output(1) == SCR_SUCCESS, "Complete_output(OUTPUT)");
        f = fopen(file, "r");
        CHECK(f != NULL, "%s is in the prefix directory", file);
        if (f) {
            char line[64] = "", want[64];
            snprintf(want, sizeof want, "output of rank %d\n", rank);
            CHECK(fgets(line, sizeof line, f) && strcmp(line, want) == 0, "content of %s: %s", file, line);
            fclose(f);
        }
        SCR_Have_restart(&after, aname);
        CHECK(before == after && strcmp(bname, aname) == 0, "an output-only dataset changed the restart: %s -> %s",
              bname, aname);
        (void)name;
    } else if (strcmp(mode, "need") == 0) {
        int need = -1, ex = -1, mx = 0, mn = 0;
        CHECK(SCR_Need_checkpoint(&need) == SCR_SUCCESS, "SCR_Need_checkpoint");
        MPI_Allreduce(&need, &mx, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(&need, &mn, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        CHECK(mx == mn && (need == 0 || need == 1), "need differs between ranks: %d..%d", mn, mx);
        if (argc == 3) CHECK(need == atoi(argv[2]), "need = %d, expected %s", need, argv[2]);
        int want_exit = argc == 4 ? atoi(argv[3]) : 0;
        CHECK(SCR_Should_exit(&ex) == SCR_SUCCESS && ex == want_exit, "SCR_Should_exit = %d", ex);
        CHECK(SCR_Need_checkpoint(NULL) != SCR_SUCCESS, "Need_checkpoint(NULL)");
    } else {
        CHECK(0, "unknown mode %s", mode);
    }
    rc = SCR_Finalize();
    CHECK(rc == SCR_SUCCESS, "SCR_Finalize = %d", rc);
done:;
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("scr_test %s: %s (%d failed checks)\n", mode, total ? "FAILED" : "ok", total);
    MPI_Finalize();
    return total ? 1 : 0;
}
