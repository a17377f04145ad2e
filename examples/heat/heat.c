/* heat: 2-D heat diffusion (Jacobi iteration) that checkpoints with plain POSIX calls.
 *
 *   heat NX NY STEPS EVERY CKPT_DIR RESULT_FILE
 *
 * Every EVERY steps it writes CKPT_DIR/heat.<step>.tmp (header + grid) with open/write,
 * fsyncs it, closes it and renames it to CKPT_DIR/heat.<step>: a checkpoint exists under
 * its final name only once complete. It then removes the previous one. At start it
 * scans CKPT_DIR with opendir/readdir, and resumes from the newest checkpoint whose
 * header and checksum are valid. At the end it writes the final grid to RESULT_FILE with
 * stdio and prints the time and bytes spent writing checkpoints.
 *
 * The program knows nothing about ckptfs: run it under `ckptfs run` with CKPT_DIR under
 * the mount prefix and its checkpoints live in the node store.
 *
 * Two environment variables serve job scripts that checkpoint in segments (the
 * multi-node demo, scripts/demo-datasets.sh): HEAT_SEGMENT=1 also checkpoints after the
 * last step and keeps the previous checkpoints (each run ends with one, which the script
 * makes a dataset); HEAT_MAX_STEP=N resumes from no checkpoint newer than step N (the
 * dataset the whole job agreed to restart from, whatever newer files a node holds).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct header {
    char magic[8]; /* "HEATCKP1" */
    uint64_t nx, ny, step;
    uint64_t sum; /* FNV-1a of the grid bytes */
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ULL;
    /* every 8th byte keeps it cheap; the store and the file system have their own CRCs */
    for (size_t i = 0; i < n; i += 8) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n > (64u << 20) ? (64u << 20) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int segment_mode = 0;
static double ckpt_seconds = 0;
static uint64_t ckpt_bytes = 0;

static void save(const char *dir, const double *g, uint64_t nx, uint64_t ny, uint64_t step, uint64_t prev) {
    char tmp[4096], fin[4096];
    snprintf(tmp, sizeof tmp, "%s/heat.%llu.tmp", dir, (unsigned long long)step);
    snprintf(fin, sizeof fin, "%s/heat.%llu", dir, (unsigned long long)step);
    size_t bytes = nx * ny * sizeof(double);
    struct header h = {"HEATCKP", nx, ny, step, fnv(g, bytes)};
    memcpy(h.magic, "HEATCKP1", 8);
    double t0 = now();
    int fd = open(tmp, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || write_all(fd, &h, sizeof h) || write_all(fd, g, bytes) || fsync(fd) || close(fd) ||
        rename(tmp, fin)) {
        fprintf(stderr, "heat: checkpoint %s: %s\n", fin, strerror(errno));
        exit(1);
    }
    ckpt_seconds += now() - t0;
    ckpt_bytes += sizeof h + bytes;
    if (prev != UINT64_MAX && !segment_mode) {
        snprintf(fin, sizeof fin, "%s/heat.%llu", dir, (unsigned long long)prev);
        unlink(fin);
    }
}

/* Newest valid checkpoint: its step, grid loaded into g; UINT64_MAX if none. */
static uint64_t restore(const char *dir, double *g, uint64_t nx, uint64_t ny) {
    DIR *d = opendir(dir);
    if (!d) return UINT64_MAX;
    uint64_t steps[1024];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 1024) {
        unsigned long long s;
        char rest;
        if (sscanf(e->d_name, "heat.%llu%c", &s, &rest) == 1) steps[n++] = s;
    }
    closedir(d);
    const char *max = getenv("HEAT_MAX_STEP");
    if (max && *max) {
        unsigned long long m = strtoull(max, 0, 10);
        for (int i = 0; i < n; i++)
            if (steps[i] > m) steps[i] = UINT64_MAX;
    }
    size_t bytes = nx * ny * sizeof(double);
    for (;;) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (steps[i] != UINT64_MAX && (best < 0 || steps[i] > steps[best])) best = i;
        if (best < 0) return UINT64_MAX;
        char p[4096];
        snprintf(p, sizeof p, "%s/heat.%llu", dir, (unsigned long long)steps[best]);
        FILE *f = fopen(p, "rb");
        struct header h;
        int ok = f && fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, "HEATCKP1", 8) == 0 && h.nx == nx &&
                 h.ny == ny && fread(g, 1, bytes, f) == bytes && fnv(g, bytes) == h.sum;
        if (f) fclose(f);
        if (ok) return h.step;
        fprintf(stderr, "heat: skipping damaged checkpoint %s\n", p);
        steps[best] = UINT64_MAX;
    }
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: heat NX NY STEPS EVERY CKPT_DIR RESULT_FILE\n");
        return 2;
    }
    uint64_t nx = strtoull(argv[1], 0, 10), ny = strtoull(argv[2], 0, 10);
    uint64_t steps = strtoull(argv[3], 0, 10), every = strtoull(argv[4], 0, 10);
    const char *dir = argv[5], *result = argv[6];
    const char *seg = getenv("HEAT_SEGMENT");
    segment_mode = seg && strcmp(seg, "1") == 0;
    mkdir(dir, 0755);
    double *a = calloc(nx * ny, sizeof(double)), *b = calloc(nx * ny, sizeof(double));
    uint64_t start = restore(dir, a, nx, ny), prev = start;
    if (start == UINT64_MAX) {
        /* hot left edge, a hot spot in the middle */
        for (uint64_t y = 0; y < ny; y++) a[y * nx] = 100.0;
        for (uint64_t y = ny / 3; y < ny / 2; y++)
            for (uint64_t x = nx / 3; x < nx / 2; x++) a[y * nx + x] = 50.0;
        start = 0;
        printf("heat: fresh start, %llux%llu grid, %llu steps, checkpoint every %llu\n",
               (unsigned long long)nx, (unsigned long long)ny, (unsigned long long)steps,
               (unsigned long long)every);
    } else {
        printf("heat: resumed from checkpoint at step %llu\n", (unsigned long long)start);
    }
    fflush(stdout);
    memcpy(b, a, nx * ny * sizeof(double));
    for (uint64_t s = start; s < steps; s++) {
        for (uint64_t y = 1; y + 1 < ny; y++)
            for (uint64_t x = 1; x + 1 < nx; x++) {
                uint64_t i = y * nx + x;
                b[i] = a[i] + 0.2 * (a[i - 1] + a[i + 1] + a[i - nx] + a[i + nx] - 4 * a[i]);
            }
        double *t = a;
        a = b;
        b = t;
        if ((s + 1) % every == 0 && (s + 1 < steps || segment_mode)) {
            save(dir, a, nx, ny, s + 1, prev);
            prev = s + 1;
        }
    }
    FILE *f = fopen(result, "wb");
    if (!f || fwrite(a, sizeof(double), nx * ny, f) != nx * ny || fclose(f)) {
        fprintf(stderr, "heat: %s: %s\n", result, strerror(errno));
        return 1;
    }
    printf("heat: done; checkpoints: %llu bytes in %.3f s = %.2f GB/s\n", (unsigned long long)ckpt_bytes,
           ckpt_seconds, ckpt_seconds > 0 ? ckpt_bytes / ckpt_seconds / 1e9 : 0.0);
    return 0;
}
