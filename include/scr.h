/*
 * scr.h: the interface of LLNL's Scalable Checkpoint/Restart library (SCR 3.x), as
 * implemented by ckptfs's libscr.so (crate ckptfs-scr) over ckptfs datasets.
 * ABI-compatible with programs built against SCR's own header: same functions,
 * signatures, constants and return codes. See docs/scr-veloc.md.
 *
 *   mpicc app.c -I$CKPTFS/include -L$CKPTFS/target/release -lscr
 *
 * Unless noted, every call is collective over MPI_COMM_WORLD and returns SCR_SUCCESS,
 * or SCR_FAILURE with the reason printed on standard error.
 */
#ifndef SCR_H
#define SCR_H

#ifdef __cplusplus
extern "C" {
#endif

#define SCR_MAJOR_VERSION "3"
#define SCR_MINOR_VERSION "1"
#define SCR_PATCH_VERSION "0"
#define SCR_VERSION "v3.1.0"

#define SCR_SUCCESS (0)
/* Not in SCR's public header (its programs compare with SCR_SUCCESS); the value SCR
 * returns internally for a failure. */
#define SCR_FAILURE (1)

/* Size of the buffers passed to SCR_Route_file, SCR_Have_restart, SCR_Start_restart. */
#define SCR_MAX_FILENAME 1024

#define SCR_FLAG_NONE (0 << 0)       /* no property (for initialising variables) */
#define SCR_FLAG_CHECKPOINT (1 << 0) /* the dataset can restart the job */
#define SCR_FLAG_OUTPUT (1 << 1)     /* the dataset must reach the prefix directory */

/* After MPI_Init: attach to the node store, read the configuration. */
int SCR_Init(void);
/* Before MPI_Finalize. */
int SCR_Finalize(void);

/* Set "KEY=VALUE", unset "KEY=" (before SCR_Init) or query "KEY" (returns a malloc'ed
 * copy of the value for the caller to free, or NULL). Not collective here. */
const char *SCR_Config(const char *config);
/* SCR_Config with a printf-style format. */
const char *SCR_Configf(const char *format, ...);

/* Local: the path to use for `name` (under the prefix) in the current phase, written
 * into `file` (SCR_MAX_FILENAME bytes). Outside a phase `name` is copied unchanged. */
int SCR_Route_file(const char *name, char *file);

/* *flag = 1 (and the checkpoint's name into `name`, which may be NULL) if a checkpoint
 * can be loaded: the newest one wholly recoverable. */
int SCR_Have_restart(int *flag, char *name);
/* Load that checkpoint; its name into `name` (may be NULL). */
int SCR_Start_restart(char *name);
/* End the restart; SCR_SUCCESS only if every rank passed valid = 1. */
int SCR_Complete_restart(int valid);

/* *flag = 1 when a checkpoint is due (the same on every rank). */
int SCR_Need_checkpoint(int *flag);

/* SCR_Start_output(NULL, SCR_FLAG_CHECKPOINT) / SCR_Complete_output. */
int SCR_Start_checkpoint(void);
int SCR_Complete_checkpoint(int valid);

/* Begin a dataset named `name` (NULL: generated) with SCR_FLAG_* `flags`; every rank
 * passes the same values. */
int SCR_Start_output(const char *name, int flags);
/* End it; SCR_SUCCESS only if every rank passed valid = 1 and stored its files. */
int SCR_Complete_output(int valid);

/* Restart from the checkpoint `name` (newer ones are no longer offered). */
int SCR_Current(const char *name);
/* Stop offering dataset `name` for restarts (its files are kept). */
int SCR_Drop(const char *name);
/* Delete dataset `name`: its record and files. */
int SCR_Delete(const char *name);

/* The version string (static; do not free). Not collective. */
char *SCR_Get_version(void);

/* *flag = 1 when the job should stop (the halt file PREFIX/.ckptfs/halt exists). */
int SCR_Should_exit(int *flag);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SCR_H */
