/*
 * Checkpoint bandwidth of an SCR-style program: each rank writes one file per
 * checkpoint (write, fsync, close), then the checkpoint is completed. Driven by
 * `ckptfs bench scr` (crates/ckptfs-cli/src/bench_scr.rs), which compiles it and runs:
 *
 *   scr_bench scr   MIB REPS        through libscr.so (ckptfs datasets), with and
 *                                   without the preload shim
 *   scr_bench plain MIB REPS DIR [keep]
 *                                   the same writes into DIR (tmpfs, disk, or /ckpt
 *                                   under the preload shim), no library; each file is
 *                                   removed after its checkpoint unless `keep` (then
 *                                   every checkpoint stays, as libscr's datasets do)
 *
 * Prints one line: target, ranks, MiB per rank, best and median aggregate GiB/s over
 * REPS checkpoints (the time from the barrier before the checkpoint to the barrier after
 * its completion).
 */
#include <mpi.h>
#include <scr.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc < 4 || (strcmp(argv[1], "plain") == 0 && argc < 5)) {
        if (rank == 0) fprintf(stderr, "usage: scr_bench scr|plain MIB REPS [DIR]\n");
        MPI_Finalize();
        return 2;
    }
    int use_scr = strcmp(argv[1], "scr") == 0;
    int keep = argc > 5 && strcmp(argv[5], "keep") == 0;
    size_t bytes = (size_t)atol(argv[2]) << 20;
    int reps = atoi(argv[3]);
    char *buf = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) buf[i] = (char)(i * 131 + rank);
    if (use_scr && SCR_Init() != SCR_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 1);
    double *t = calloc((size_t)reps, sizeof(double));
    int bad = 0;
    for (int r = 0; r < reps; r++) {
        char name[64], file[256], path[SCR_MAX_FILENAME];
        snprintf(name, sizeof name, "bench.%d", r);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (use_scr) {
            bad |= SCR_Start_output(name, SCR_FLAG_CHECKPOINT) != SCR_SUCCESS;
            snprintf(file, sizeof file, "ckpt/rank_%d.dat", rank);
            bad |= SCR_Route_file(file, path) != SCR_SUCCESS;
        } else {
            snprintf(path, sizeof path, "%s/%s.rank_%d.dat", argv[4], name, rank);
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) MPI_Abort(MPI_COMM_WORLD, 1);
        for (size_t off = 0; off < bytes;) {
            ssize_t w = write(fd, buf + off, bytes - off);
            if (w <= 0) MPI_Abort(MPI_COMM_WORLD, 1);
            off += (size_t)w;
        }
        bad |= fsync(fd) != 0;
        close(fd);
        if (use_scr) bad |= SCR_Complete_output(1) != SCR_SUCCESS;
        MPI_Barrier(MPI_COMM_WORLD);
        t[r] = MPI_Wtime() - t0;
        if (!use_scr && !keep) {
            unlink(path);
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    if (use_scr) SCR_Finalize();
    qsort(t, (size_t)reps, sizeof(double), cmp);
    double total = (double)bytes * n / (1 << 30);
    if (rank == 0)
        printf("%-8s %s ranks=%d MiB/rank=%zu best=%.2f GiB/s median=%.2f GiB/s%s\n", argv[1],
               use_scr ? "libscr" : argv[4], n, bytes >> 20, total / t[0], total / t[reps / 2], bad ? " ERRORS" : "");
    free(t);
    free(buf);
    MPI_Finalize();
    return bad;
}
