/*
 * The MPI calls of libscr and libveloc-client, compiled against the MPI the program is
 * built with (mpicc's include flags, see build.rs). MPI_Comm is a pointer in Open MPI
 * and an int in MPICH; keeping every use of it in C makes the Rust side independent of
 * that. The library works on its own duplicate of the application's communicator so
 * that its collectives never match the application's messages.
 */
#include <mpi.h>
#include <stdint.h>

static MPI_Comm g_comm = MPI_COMM_NULL;

int ckmpi_initialized(void) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    return init && !fin;
}

static int use_comm(MPI_Comm c) {
    if (!ckmpi_initialized()) return -1;
    if (g_comm != MPI_COMM_NULL) return -2;
    return MPI_Comm_dup(c, &g_comm) == MPI_SUCCESS ? 0 : -3;
}

int ckmpi_use_world(void) { return use_comm(MPI_COMM_WORLD); }

/* VELOC_Init's communicator, passed through as the application gave it. */
int ckmpi_use_comm(MPI_Comm c) { return use_comm(c); }

/* A communicator of this process alone (VELOC_Init_single). */
int ckmpi_use_self(void) { return use_comm(MPI_COMM_SELF); }

int ckmpi_active(void) { return g_comm != MPI_COMM_NULL; }

int ckmpi_release(void) {
    if (g_comm == MPI_COMM_NULL) return 0;
    int rc = ckmpi_initialized() ? MPI_Comm_free(&g_comm) : MPI_SUCCESS;
    g_comm = MPI_COMM_NULL;
    return rc == MPI_SUCCESS ? 0 : -1;
}

int ckmpi_rank(int *rank) { return MPI_Comm_rank(g_comm, rank) == MPI_SUCCESS ? 0 : -1; }

int ckmpi_size(int *size) { return MPI_Comm_size(g_comm, size) == MPI_SUCCESS ? 0 : -1; }

int ckmpi_barrier(void) { return MPI_Barrier(g_comm) == MPI_SUCCESS ? 0 : -1; }

/* op: 0 min, 1 max, 2 sum (of 64-bit integers). */
int ckmpi_allreduce_i64(int64_t in, int op, int64_t *out) {
    MPI_Op o = op == 0 ? MPI_MIN : (op == 1 ? MPI_MAX : MPI_SUM);
    return MPI_Allreduce(&in, out, 1, MPI_INT64_T, o, g_comm) == MPI_SUCCESS ? 0 : -1;
}

int ckmpi_bcast(void *buf, int len, int root) {
    return MPI_Bcast(buf, len, MPI_BYTE, root, g_comm) == MPI_SUCCESS ? 0 : -1;
}

/* Processes sharing this process's node (a shared-memory split of the communicator):
 * this process's rank among them and their count. */
int ckmpi_node_rank(int *rank, int *size) {
    MPI_Comm node;
    if (MPI_Comm_split_type(g_comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return -1;
    MPI_Comm_rank(node, rank);
    MPI_Comm_size(node, size);
    MPI_Comm_free(&node);
    return 0;
}

/* This process's rank among the processes that pass the same `color` (a ckptfs node's
 * index in the cluster file). */
int ckmpi_color_rank(int color, int *rank) {
    MPI_Comm sub;
    if (MPI_Comm_split(g_comm, color, 0, &sub) != MPI_SUCCESS) return -1;
    MPI_Comm_rank(sub, rank);
    MPI_Comm_free(&sub);
    return 0;
}
