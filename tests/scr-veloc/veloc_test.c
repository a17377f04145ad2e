/*
 * A VeloC application, written from VeloC's API documentation: memory mode (two
 * registered arrays per rank) and file mode (one file per rank through
 * VELOC_Route_file). Run with 4 ranks by tests/scr-veloc/run.sh:
 *
 *   veloc_test CFG mem FIRST LAST      VELOC_Checkpoint("heat", v), v = FIRST..LAST
 *   veloc_test CFG memrestart EXPECT   VELOC_Restart_test gives EXPECT ("none": nothing);
 *                                      restore it and check every element; the next
 *                                      older version is offered below it
 *   veloc_test CFG file FIRST LAST     file-mode checkpoints "fileck" FIRST..LAST
 *   veloc_test CFG filerestart EXPECT  restart "fileck" from EXPECT, check the bytes
 *   veloc_test CFG kill V VICTIM       rank VICTIM dies (SIGKILL) inside checkpoint V
 *   veloc_test CFG selective           VELOC_Checkpoint_selective / Recover_selective
 *   veloc_test CFG single              VELOC_Init_single: each rank on its own
 *   veloc_test CFG errors              every misuse answers VELOC_FAILURE, never crashes
 */
#include <mpi.h>
#include <veloc.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks, failures;

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "veloc_test rank %d line %d: ", rank, __LINE__);        \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, "\n");                                                  \
            failures++;                                                             \
        }                                                                           \
    } while (0)

#define N 50000 /* doubles in the grid */
static double grid[N];
static int iter[4];

static void fill(int v) {
    for (int i = 0; i < N; i++) grid[i] = rank * 1e6 + v * 1000.0 + i * 0.5;
    for (int i = 0; i < 4; i++) iter[i] = v * 10 + i + rank;
}

static int verify(int v) {
    for (int i = 0; i < N; i++)
        if (grid[i] != rank * 1e6 + v * 1000.0 + i * 0.5) {
            CHECK(0, "grid[%d] = %f after restoring version %d", i, grid[i], v);
            return 0;
        }
    for (int i = 0; i < 4; i++)
        if (iter[i] != v * 10 + i + rank) {
            CHECK(0, "iter[%d] = %d after restoring version %d", i, iter[i], v);
            return 0;
        }
    return 1;
}

static int file_bytes(int v) { return 10000 + rank * 100 + v; }

static void write_file(const char *path, int v) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    for (int i = 0; i < file_bytes(v); i++) fputc((i * 7 + rank + v) & 0xff, f);
    fclose(f);
}

static int read_file(const char *path, int v) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "open %s for reading", path);
    if (!f) return 0;
    int i = 0, c, ok = 1;
    while ((c = fgetc(f)) != EOF) {
        if (c != ((i * 7 + rank + v) & 0xff)) ok = 0;
        i++;
    }
    fclose(f);
    CHECK(ok && i == file_bytes(v), "%s: %d bytes (want %d), content %s", path, i, file_bytes(v),
          ok ? "ok" : "wrong");
    return ok && i == file_bytes(v);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    const char *cfg = argc > 1 ? argv[1] : "";
    const char *mode = argc > 2 ? argv[2] : "";
    int rc;
    char path[VELOC_MAX_NAME];
    if (strcmp(mode, "errors") == 0) {
        CHECK(VELOC_Mem_protect(0, grid, N, sizeof(double)) == VELOC_FAILURE, "Mem_protect before Init");
        CHECK(VELOC_Checkpoint_begin("heat", 1) == VELOC_FAILURE, "Checkpoint_begin before Init");
        CHECK(VELOC_Restart_test("heat", 0) == VELOC_FAILURE, "Restart_test before Init");
        CHECK(VELOC_Checkpoint_finished() == VELOC_FAILURE, "Checkpoint_finished before Init");
        CHECK(VELOC_Finalize(0) == VELOC_FAILURE, "Finalize before Init");
        CHECK(VELOC_Init(MPI_COMM_WORLD, "/nonexistent/veloc.cfg") == VELOC_FAILURE, "Init without its config");
        CHECK(VELOC_Init(MPI_COMM_WORLD, cfg) == VELOC_SUCCESS, "Init");
        CHECK(VELOC_Init(MPI_COMM_WORLD, cfg) == VELOC_FAILURE, "Init twice");
        CHECK(VELOC_Checkpoint_end(1) == VELOC_FAILURE, "Checkpoint_end without begin");
        CHECK(VELOC_Checkpoint_mem() == VELOC_FAILURE, "Checkpoint_mem outside a phase");
        CHECK(VELOC_Route_file("x", path) == VELOC_FAILURE, "Route_file outside a phase");
        CHECK(VELOC_Checkpoint_begin("bad-name", 1) == VELOC_FAILURE, "name with '-'");
        CHECK(VELOC_Checkpoint_begin("heat", -1) == VELOC_FAILURE, "negative version");
        CHECK(VELOC_Restart_begin("heat", 77) == VELOC_FAILURE, "Restart_begin of a missing version");
        CHECK(VELOC_Recover_mem() == VELOC_FAILURE, "Recover_mem outside a restart");
        CHECK(VELOC_Restart_end(1) == VELOC_FAILURE, "Restart_end without begin");
        CHECK(VELOC_Mem_unprotect(42) == VELOC_FAILURE, "unprotect an unknown id");
        CHECK(VELOC_Mem_protect(1, NULL, 10, 8) == VELOC_FAILURE, "protect NULL");
        CHECK(VELOC_Mem_protect(1, grid, (size_t)-1, 16) == VELOC_FAILURE, "protect an overflowing size");
        CHECK(VELOC_Restart_test("nothing_here", 0) == VELOC_FAILURE, "Restart_test without checkpoints");
        CHECK(VELOC_Mem_protect(0, grid, N, sizeof(double)) == VELOC_SUCCESS, "protect");
        CHECK(VELOC_Checkpoint_begin("errck", 1) == VELOC_SUCCESS, "begin");
        CHECK(VELOC_Checkpoint_begin("errck", 2) == VELOC_FAILURE, "begin inside a phase");
        CHECK(VELOC_Checkpoint_selective(7, NULL, 0) == VELOC_FAILURE, "bad mode");
        int one = 1;
        CHECK(VELOC_Checkpoint_selective(VELOC_CKPT_SOME, &one, 1) == VELOC_FAILURE, "unprotected id");
        CHECK(VELOC_Checkpoint_selective(VELOC_CKPT_SOME, NULL, 3) == VELOC_FAILURE, "NULL ids");
        char longname[VELOC_MAX_NAME + 8];
        memset(longname, 'x', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        CHECK(VELOC_Route_file(longname, path) == VELOC_FAILURE, "original name too long");
        CHECK(VELOC_Checkpoint_mem() == VELOC_SUCCESS, "Checkpoint_mem");
        CHECK(VELOC_Checkpoint_end(1) == VELOC_SUCCESS, "Checkpoint_end");
        CHECK(VELOC_Checkpoint_wait() == VELOC_SUCCESS && VELOC_Checkpoint_finished() == 1, "wait/finished");
        /* A region too small for what was saved. */
        CHECK(VELOC_Mem_unprotect(0) == VELOC_SUCCESS, "unprotect");
        CHECK(VELOC_Mem_protect(0, grid, 10, sizeof(double)) == VELOC_SUCCESS, "protect small");
        CHECK(VELOC_Restart("errck", 1) == VELOC_FAILURE, "restore into a too small region");
        CHECK(VELOC_Mem_clear() == VELOC_SUCCESS, "Mem_clear");
        CHECK(VELOC_Restart_begin("errck", 1) == VELOC_SUCCESS, "Restart_begin");
        CHECK(VELOC_Recover_mem() == VELOC_FAILURE, "recover into unprotected memory");
        CHECK(VELOC_Recover_size(0) == N * (int)sizeof(double), "Recover_size = %d", VELOC_Recover_size(0));
        CHECK(VELOC_Recover_size(5) == -1, "Recover_size of an unsaved id");
        CHECK(VELOC_Route_file("x", path) == VELOC_FAILURE, "Route_file of a memory-only checkpoint");
        CHECK(VELOC_Restart_end(1) == VELOC_SUCCESS, "Restart_end");
        CHECK(VELOC_Cleanup("errck") == VELOC_SUCCESS, "Cleanup");
        CHECK(VELOC_Restart_test("errck", 0) == VELOC_FAILURE, "nothing left after Cleanup");
        CHECK(VELOC_Finalize(1) == VELOC_SUCCESS, "Finalize");
        CHECK(VELOC_Finalize(1) == VELOC_FAILURE, "Finalize twice");
        goto done;
    }
    if (strcmp(mode, "single") == 0) {
        rc = VELOC_Init_single(100 + rank, cfg);
        CHECK(rc == VELOC_SUCCESS, "Init_single = %d", rc);
        VELOC_Mem_protect(0, grid, N, sizeof(double));
        VELOC_Mem_protect(1, iter, 4, sizeof(int));
        for (int v = 1; v <= 2 + rank; v++) { /* ranks checkpoint different numbers of versions */
            fill(v);
            CHECK(VELOC_Checkpoint("solo", v) == VELOC_SUCCESS, "Checkpoint(solo, %d)", v);
        }
        int v = VELOC_Restart_test("solo", 0);
        CHECK(v == 2 + rank, "single: Restart_test = %d, want %d", v, 2 + rank);
        memset(grid, 0, sizeof grid);
        CHECK(VELOC_Restart("solo", v) == VELOC_SUCCESS && verify(v), "single: restart");
        CHECK(VELOC_Finalize(0) == VELOC_SUCCESS, "Finalize");
        goto done;
    }
    rc = VELOC_Init(MPI_COMM_WORLD, cfg);
    CHECK(rc == VELOC_SUCCESS, "VELOC_Init = %d", rc);
    CHECK(VELOC_Mem_protect(0, grid, N, sizeof(double)) == VELOC_SUCCESS, "protect grid");
    CHECK(VELOC_Mem_protect(1, iter, 4, sizeof(int)) == VELOC_SUCCESS, "protect iter");
    if (strcmp(mode, "mem") == 0 && argc == 5) {
        for (int v = atoi(argv[3]); v <= atoi(argv[4]); v++) {
            fill(v);
            rc = VELOC_Checkpoint("heat", v);
            CHECK(rc == VELOC_SUCCESS, "VELOC_Checkpoint(heat, %d) = %d", v, rc);
        }
        rc = VELOC_Restart_test("heat", 0);
        CHECK(rc == atoi(argv[4]), "Restart_test = %d", rc);
    } else if (strcmp(mode, "memrestart") == 0 && argc == 4) {
        memset(grid, 0, sizeof grid);
        memset(iter, 0, sizeof iter);
        int v = VELOC_Restart_test("heat", 0);
        if (strcmp(argv[3], "none") == 0) {
            CHECK(v == VELOC_FAILURE, "Restart_test = %d, expected nothing", v);
        } else {
            CHECK(v == atoi(argv[3]), "Restart_test = %d, expected %s", v, argv[3]);
            rc = VELOC_Restart_begin("heat", v);
            CHECK(rc == VELOC_SUCCESS, "Restart_begin = %d", rc);
            CHECK(VELOC_Recover_size(0) == N * (int)sizeof(double), "Recover_size(0)");
            CHECK(VELOC_Recover_size(1) == 4 * (int)sizeof(int), "Recover_size(1)");
            rc = VELOC_Recover_mem();
            CHECK(rc == VELOC_SUCCESS, "Recover_mem = %d", rc);
            int ok = verify(v);
            CHECK(VELOC_Restart_end(ok) == VELOC_SUCCESS, "Restart_end");
            int older = VELOC_Restart_test("heat", v);
            CHECK(older == VELOC_FAILURE || older < v, "Restart_test below %d = %d", v, older);
            if (older != VELOC_FAILURE) {
                CHECK(VELOC_Restart("heat", older) == VELOC_SUCCESS && verify(older), "restart the older %d", older);
            }
        }
    } else if (strcmp(mode, "file") == 0 && argc == 5) {
        for (int v = atoi(argv[3]); v <= atoi(argv[4]); v++) {
            CHECK(VELOC_Checkpoint_begin("fileck", v) == VELOC_SUCCESS, "Checkpoint_begin");
            rc = VELOC_Route_file("state.dat", path);
            CHECK(rc == VELOC_SUCCESS, "Route_file = %d", rc);
            write_file(path, v);
            rc = VELOC_Checkpoint_end(1);
            CHECK(rc == VELOC_SUCCESS, "Checkpoint_end(fileck %d) = %d", v, rc);
        }
    } else if (strcmp(mode, "filerestart") == 0 && argc == 4) {
        int v = VELOC_Restart_test("fileck", 0);
        CHECK(v == atoi(argv[3]), "Restart_test(fileck) = %d, expected %s", v, argv[3]);
        if (v >= 0) {
            CHECK(VELOC_Restart_begin("fileck", v) == VELOC_SUCCESS, "Restart_begin");
            rc = VELOC_Route_file("state.dat", path);
            CHECK(rc == VELOC_SUCCESS, "Route_file at restart = %d", rc);
            int ok = read_file(path, v);
            CHECK(VELOC_Restart_end(ok) == VELOC_SUCCESS, "Restart_end");
        }
    } else if (strcmp(mode, "kill") == 0 && argc == 5) {
        int v = atoi(argv[3]), victim = atoi(argv[4]);
        fill(v);
        CHECK(VELOC_Checkpoint_begin("heat", v) == VELOC_SUCCESS, "begin");
        if (rank == victim) raise(SIGKILL);
        VELOC_Checkpoint_mem();
        VELOC_Checkpoint_end(1);
    } else if (strcmp(mode, "selective") == 0) {
        fill(9);
        int ids[1] = {1};
        CHECK(VELOC_Checkpoint_begin("sel", 1) == VELOC_SUCCESS, "begin");
        CHECK(VELOC_Checkpoint_selective(VELOC_CKPT_SOME, ids, 1) == VELOC_SUCCESS, "only iter");
        CHECK(VELOC_Checkpoint_end(1) == VELOC_SUCCESS, "end");
        memset(iter, 0, sizeof iter);
        CHECK(VELOC_Restart_begin("sel", 1) == VELOC_SUCCESS, "Restart_begin");
        CHECK(VELOC_Recover_size(0) == -1, "the grid was not saved");
        CHECK(VELOC_Recover_selective(VELOC_RECOVER_SOME, ids, 1) == VELOC_SUCCESS, "recover iter");
        CHECK(iter[2] == 92 + rank, "iter restored: %d", iter[2]);
        int zero[1] = {0};
        CHECK(VELOC_Recover_selective(VELOC_RECOVER_SOME, zero, 1) == VELOC_FAILURE, "recover an unsaved id");
        CHECK(VELOC_Restart_end(1) == VELOC_SUCCESS, "Restart_end");
    } else {
        CHECK(0, "unknown mode %s", mode);
    }
    rc = VELOC_Finalize(1);
    CHECK(rc == VELOC_SUCCESS, "VELOC_Finalize = %d", rc);
done:;
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) printf("veloc_test %s: %s (%d failed checks)\n", mode, total ? "FAILED" : "ok", total);
    MPI_Finalize();
    return total ? 1 : 0;
}
