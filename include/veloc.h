/*
 * veloc.h: the client interface of ECP's VeloC checkpoint library, as implemented by
 * ckptfs's libveloc-client.so (crate ckptfs-veloc) over ckptfs datasets.
 * ABI-compatible with programs built against VeloC's own header: same functions,
 * signatures, constants and return codes. See docs/scr-veloc.md.
 *
 *   mpicc app.c -I$CKPTFS/include -L$CKPTFS/target/release -lveloc-client
 *
 * Every call returns VELOC_SUCCESS, or VELOC_FAILURE with the reason printed on
 * standard error (VELOC_Restart_test: a version or VELOC_FAILURE; VELOC_Recover_size: a
 * size or -1). Init, Finalize, Checkpoint_begin/end, Restart_test, Restart_begin/end
 * and Cleanup are collective over the communicator given to VELOC_Init.
 */
#ifndef CKPTFS_VELOC_H
#define CKPTFS_VELOC_H

#include <mpi.h>
#include <stddef.h>
#include <string.h>

#define VELOC_SUCCESS (0)
#define VELOC_FAILURE (-1)

#define VELOC_MAX_NAME (1024) /* size of the buffer VELOC_Route_file writes */

#define VELOC_RECOVER_ALL (0)  /* every region saved */
#define VELOC_RECOVER_SOME (1) /* the ids listed */
#define VELOC_RECOVER_REST (2) /* every region but the ids listed */

#define VELOC_CKPT_ALL (0)
#define VELOC_CKPT_SOME (1)
#define VELOC_CKPT_REST (2)

#define VELOC_OBSERVE_CKPT_END (0)

#ifdef __cplusplus
extern "C" {
#endif

/* Start with the configuration file `cfg_file` (scratch = ..., persistent = ..., see
 * docs/scr-veloc.md): collectively over `comm`, or alone as process `id`. */
int VELOC_Init(MPI_Comm comm, const char *cfg_file);
int VELOC_Init_single(unsigned int id, const char *cfg_file);
/* Stop (checkpoints are already stored: `cleanup` changes nothing). */
int VELOC_Finalize(int cleanup);

/* Register `count` elements of `base_size` bytes at `ptr` as region `id` (kept valid by
 * the caller while registered); the named variants keep a separate set `name`. */
int VELOC_Mem_protect(int id, void *ptr, size_t count, size_t base_size);
int VELOC_Region_protect(int id, void *ptr, size_t count, size_t base_size, const char *name);
int VELOC_Mem_unprotect(int id);
int VELOC_Mem_clear(void);
int VELOC_Region_unprotect(int id, const char *name);
int VELOC_Region_clear(const char *name);

/* Inside a checkpoint (restart) phase: the path of this rank's file of it, to write
 * (read) with POSIX calls; `routed` holds VELOC_MAX_NAME bytes. */
int VELOC_Route_file(const char *original, char *routed);

/* Delete every checkpoint labelled `name`. */
int VELOC_Cleanup(const char *name);

/* Checkpoint `name` ([a-zA-Z0-9_]) version `version` (>= 0, increasing). */
int VELOC_Checkpoint_begin(const char *name, int version);
/* Inside it: save the registered regions selected by mode VELOC_CKPT_* and `ids`. */
int VELOC_Checkpoint_selective(int mode, int *ids, int id_count);
int VELOC_Checkpoint_mem(void);
/* End it; VELOC_SUCCESS only if every rank passed success = 1 and stored its part. */
int VELOC_Checkpoint_end(int success);
/* Checkpoints are stored synchronously: returns VELOC_SUCCESS at once. */
int VELOC_Checkpoint_wait(void);
/* 1: no checkpoint in progress (VELOC_FAILURE before VELOC_Init). */
int VELOC_Checkpoint_finished(void);
/* Begin, save every region, end. */
int VELOC_Checkpoint(const char *name, int version);

/* The newest wholly recoverable version of `name` below `version` (0: any), or
 * VELOC_FAILURE. */
int VELOC_Restart_test(const char *name, int version);
/* Open checkpoint `name` version `version` for restart. */
int VELOC_Restart_begin(const char *name, int version);
/* Inside it: restore the regions selected by mode VELOC_RECOVER_* and `ids` into the
 * registered memory (which must be large enough). */
int VELOC_Recover_selective(int mode, int *ids, int id_count);
/* The size saved for region `id`, or -1. */
int VELOC_Recover_size(int id);
int VELOC_Recover_mem(void);
/* End it; VELOC_SUCCESS only if every rank passed success = 1. */
int VELOC_Restart_end(int success);
/* Begin, restore every region, end. */
int VELOC_Restart(const char *name, int version);

#ifdef __cplusplus
}
#endif

#endif /* CKPTFS_VELOC_H */
