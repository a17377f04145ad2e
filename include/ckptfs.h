/*
 * ckptfs.h - C ABI of the ckptfs node store (libckptfs.so / libckptfs.a).
 *
 * ckptfs keeps checkpoint files in a persistent shared-memory segment per node
 * (/dev/shm/ckptfs.NAME). A program mounts a store under a path prefix and then uses
 * full paths under it: with prefix "/ckpt", "/ckpt/rank0.dat" is the store's
 * "/rank0.dat". Nothing here touches the kernel's file system namespace.
 *
 * Conventions (see docs/capi.md):
 *  - Every function returns >= 0 on success (0, a descriptor, a byte count or a file
 *    position) and -errno on failure (e.g. -ENOENT); errno itself is not set.
 *    ckptfs_last_error() gives a message for the last failure of the calling thread.
 *  - Descriptors are small non-negative ints in a table of this library, independent
 *    of kernel file descriptors: never pass them to read(2)/close(2). The lowest free
 *    number is used. The table is thread-safe; calls on one descriptor are serialized.
 *  - NULL where a pointer is required: -EFAULT. Strings must be UTF-8.
 *  - Relative paths start at the process's working directory. A path outside every
 *    mounted prefix: -ENOENT (rename to a path outside the source's store: -EXDEV).
 *  - Paths longer than CKPTFS_PATH_MAX or names longer than CKPTFS_NAME_MAX bytes:
 *    -ENAMETOOLONG.
 *  - No call panics or aborts: an internal error is -EIO.
 *
 * Link: cc prog.c -I include -L target/release -lckptfs
 *       (run with LD_LIBRARY_PATH=target/release, or link libckptfs.a statically with
 *        -lgcc_s -lutil -lrt -lpthread -lm -ldl).
 */
#ifndef CKPTFS_H
#define CKPTFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of this header; ckptfs_version() returns the library's. */
#define CKPTFS_VERSION_MAJOR 0
#define CKPTFS_VERSION_MINOR 1
#define CKPTFS_VERSION_PATCH 0
#define CKPTFS_VERSION "0.1.0"

/* Longest name (one path component) and path, in bytes, without the NUL. */
#define CKPTFS_NAME_MAX 255
#define CKPTFS_PATH_MAX 4095

/* ------------------------------------------------------------------ mounting */

/* ckptfs_options.flags */
#define CKPTFS_MOUNT_ATTACH 1u  /* attach to an existing store only (-ENOENT if none) */
#define CKPTFS_MOUNT_EXCL 2u    /* create a new store only (-EEXIST if it exists) */
#define CKPTFS_MOUNT_PRIVATE 4u /* one segment per process: NAME.RANK (rank from
                                   CKPTFS_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK,
                                   SLURM_PROCID or RANK; else the pid) */

/*
 * How ckptfs_mount finds or creates its store. Initialize with CKPTFS_OPTIONS_INIT and
 * set the fields you need. A zero or NULL field takes the existing segment's setting,
 * or the default when creating (1 GiB memory, 1 MiB chunks, one file per 8 KiB of memory
 * (131,072 for 1 GiB), no spill).
 * A non-zero field that differs from an existing segment's is -EINVAL.
 */
typedef struct ckptfs_options {
    uint32_t size;         /* must be sizeof(ckptfs_options) */
    uint32_t flags;        /* CKPTFS_MOUNT_* */
    const char *store;     /* store name [A-Za-z0-9._-]{1,64}; NULL/"" = "u<UID>" */
    uint64_t mem_size;     /* memory data region in bytes (whole chunks) */
    uint64_t chunk_size;   /* power of two, 64 KiB .. 64 MiB */
    const char *spill_dir; /* directory of the spill file (with spill_size) */
    uint64_t spill_size;   /* spill file size in bytes */
    uint32_t max_files;    /* files and directories, root included (2 .. 4194304) */
} ckptfs_options;

#define CKPTFS_OPTIONS_INIT { (uint32_t)sizeof(ckptfs_options), 0, NULL, 0, 0, NULL, 0, 0 }

/*
 * Attach to (or create) a store and make it visible under the absolute path `prefix`
 * ("/" is allowed; nested prefixes resolve to the longest match). With opts == NULL the
 * settings come from the environment: CKPTFS_STORE, CKPTFS_MEM_SIZE, CKPTFS_CHUNK_SIZE,
 * CKPTFS_MAX_FILES, CKPTFS_SPILL_DIR, CKPTFS_SPILL_SIZE (sizes take K/M/G/T suffixes,
 * binary) and CKPTFS_PRIVATE (1/0, true/false, yes/no, on/off); the store is attached
 * or created. With opts, only opts is used.
 * Errors: -EBUSY prefix already mounted; -EINVAL bad option, setting differing from the
 * existing segment, or a segment that is not a ckptfs segment, has another format
 * version or is damaged (the message names the segment file; nothing is attached);
 * -ENOENT no store (CKPTFS_MOUNT_ATTACH) or spill directory missing; -EEXIST
 * (CKPTFS_MOUNT_EXCL); -EACCES; -ENOSPC/-ENOMEM creating the segment; -EFAULT.
 */
int ckptfs_mount(const char *prefix, const ckptfs_options *opts);

/*
 * The settings ckptfs_mount(prefix, NULL) would use, resolved from the CKPTFS_*
 * environment with the rules of the ckptfs command line and the preload shim, as one
 * JSON object (what `ckptfs config --json` shows as "resolved"; settings left to the
 * segment or the default are null). Copies it with a NUL into `buf` and returns its
 * length; with buf == NULL and len == 0 only returns the length. Attaches nothing.
 * Errors: -EINVAL a CKPTFS_* variable is invalid (ckptfs_last_error names it);
 * -ERANGE len <= length; -EFAULT buf NULL with len > 0.
 */
ssize_t ckptfs_settings(char *buf, size_t len);

/*
 * Remove the mount of `prefix`. Pointers from ckptfs_get_data_region for it become
 * invalid. The store itself stays (see ckptfs_destroy_store).
 * Errors: -EINVAL not mounted; -EBUSY descriptors still open under it.
 */
int ckptfs_unmount(const char *prefix);

/*
 * Remove store `name`: its segment /dev/shm/ckptfs.NAME and its spill file. Processes
 * still attached keep their mapping; the name is free for a new store at once.
 * Errors: -ENOENT no such store; -EACCES.
 */
int ckptfs_destroy_store(const char *name);

/* ------------------------------------------------------------------ files */

/*
 * Open a file (or a directory, read-only) like open(2). flags: O_RDONLY, O_WRONLY or
 * O_RDWR, plus O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_DIRECTORY; other bits are ignored.
 * `mode` (with O_CREAT) is stored as given (& 07777): no umask is applied.
 * Returns a ckptfs descriptor >= 0.
 * Errors: -ENOENT; -EEXIST (O_CREAT|O_EXCL); -EISDIR (directory opened for writing);
 * -ENOTDIR; -ENAMETOOLONG; -ENFILE store file table full; -EMFILE 65536 descriptors
 * open in this process, or too many processes have the file open; -EINVAL bad access
 * mode or non-UTF-8 path; -EOPNOTSUPP O_TMPFILE; -EFAULT.
 */
int ckptfs_open(const char *path, int flags, mode_t mode);

/*
 * Close a descriptor (file or directory). The last writer's close finishes checksums
 * and marks the file complete. The descriptor is released even when an error (-EIO:
 * flushing the spill file failed) is returned. A file still open for writing when the
 * process exits is reported incomplete, as after a crash.
 * Errors: -EBADF.
 */
int ckptfs_close(int fd);

/*
 * Read up to `count` bytes at the position / at `offset`. Returns the bytes read (0 at
 * end of file). Holes read as zeros. ckptfs_pread does not move the position.
 * Errors: -EBADF bad descriptor or not open for reading; -EISDIR; -EINVAL negative
 * offset; -EIO checksum mismatch (the message names file and chunk); -EFAULT.
 */
ssize_t ckptfs_read(int fd, void *buf, size_t count);
ssize_t ckptfs_pread(int fd, void *buf, size_t count, int64_t offset);

/*
 * Write `count` bytes at the position (with O_APPEND: at the end) / at `offset`.
 * Writing past the end leaves a hole that reads as zeros. Returns the bytes written,
 * fewer than `count` when the store ran out of space part-way.
 * ckptfs_pwrite does not move the position.
 * Errors: -EBADF bad descriptor or not open for writing; -EISDIR; -EINVAL negative
 * offset; -ENOSPC nothing could be written; -EFBIG; -EIO spill file error; -EFAULT.
 */
ssize_t ckptfs_write(int fd, const void *buf, size_t count);
ssize_t ckptfs_pwrite(int fd, const void *buf, size_t count, int64_t offset);

/*
 * Set the position: whence SEEK_SET, SEEK_CUR or SEEK_END (from <stdio.h>/<unistd.h>).
 * Returns the new position. Seeking past the end is allowed. On a directory descriptor
 * only ckptfs_lseek(fd, 0, SEEK_SET) (rewind the listing) is allowed.
 * Errors: -EBADF; -EINVAL negative result or unknown whence.
 */
int64_t ckptfs_lseek(int fd, int64_t offset, int whence);

/*
 * Set the size of a file open for writing: growing adds zeros, shrinking frees chunks.
 * Errors: -EBADF; -EINVAL negative length or not open for writing; -EISDIR; -EFBIG.
 */
int ckptfs_ftruncate(int fd, int64_t length);

/*
 * Recompute stale checksums and flush spilled data to the device. Memory-resident data
 * needs no flush: it survives the process (not a node reboot).
 * Errors: -EBADF; -EIO.
 */
int ckptfs_fsync(int fd);

/* ------------------------------------------------------------------ attributes */

#define CKPTFS_KIND_FILE 1
#define CKPTFS_KIND_DIR 2
#define CKPTFS_KIND_SYMLINK 3 /* a symbolic link: ckptfs_readlink reads its target */
#define CKPTFS_KIND_SPECIAL 4 /* a FIFO, socket or device node: mode's S_IFMT says which */

#define CKPTFS_STATE_COMPLETE 0   /* the last writer closed it */
#define CKPTFS_STATE_WRITING 1    /* a live process has it open for writing */
#define CKPTFS_STATE_INCOMPLETE 2 /* a writer died with it open: readable up to its
                                     last completed write */
#define CKPTFS_STATE_FAILED 3     /* closed after a write to it failed (ENOSPC, EIO):
                                     not what was meant to be written */

/* Attributes (a struct tag only, like POSIX struct stat, since ckptfs_stat is a
 * function). */
struct ckptfs_stat {
    uint64_t ino;          /* inode number; a mount's root is 1 */
    uint64_t size;         /* bytes (directories: 0) */
    uint64_t allocated;    /* chunks * chunk size, plus a small file's 4 KiB blocks */
    uint64_t mtime_ns;     /* modification time, ns since the epoch */
    uint64_t ctime_ns;     /* status change time, ns since the epoch */
    uint32_t mode;         /* S_IFREG or S_IFDIR | permission bits, as st_mode */
    uint32_t kind;         /* CKPTFS_KIND_* */
    uint32_t state;        /* CKPTFS_STATE_* (directories: complete) */
    uint32_t chunks;       /* whole chunks allocated (a small file of at most 64 KiB
                            * lives in 4 KiB blocks of a shared chunk: 0) */
    uint32_t spill_chunks; /* of those, chunks in the spill file */
    uint32_t generation;   /* bumped each time an inode number is reused */
};

/* Errors: -ENOENT; -ENOTDIR; -ENAMETOOLONG; -EFAULT. */
int ckptfs_stat(const char *path, struct ckptfs_stat *st);
/* Errors: -EBADF; -EFAULT. */
int ckptfs_fstat(int fd, struct ckptfs_stat *st);

/* ------------------------------------------------------------------ namespace */

/*
 * Remove a file. Descriptors open on it keep reading and writing it; its chunks are
 * freed at the last close.
 * Errors: -ENOENT; -EISDIR; -ENOTDIR; -ENAMETOOLONG.
 */
int ckptfs_unlink(const char *path);

/*
 * Rename atomically (also across a crash), replacing the target: a file, or an empty
 * directory when `from` is a directory.
 * Errors: -ENOENT; -EXDEV `to` not in the store of `from`; -EISDIR file onto directory;
 * -ENOTDIR directory onto file; -ENOTEMPTY; -EINVAL directory into itself;
 * -ENAMETOOLONG.
 */
int ckptfs_rename(const char *from, const char *to);

/* Errors: -EEXIST; -ENOENT parent missing; -ENOTDIR; -ENFILE; -ENAMETOOLONG. */
int ckptfs_mkdir(const char *path, mode_t mode);

/* Errors: -ENOENT; -ENOTDIR; -ENOTEMPTY; -EBUSY the mount's root. */
int ckptfs_rmdir(const char *path);

/* A hard link: the file `from` (not followed if a symlink) gets the additional name
 * `to` in the same mount. Errors: -EPERM a directory; -EEXIST; -ENOENT; -ENOTDIR;
 * -EXDEV another mount; -EMLINK; -ENFILE (each name takes an inode slot). */
int ckptfs_link(const char *from, const char *to);

/* A symbolic link `path` to `target` (kept as given, at most CKPTFS_PATH_MAX bytes).
 * The C API never follows symlinks: ckptfs_open of one is -ELOOP, and a path through
 * one is -ENOTDIR. Errors: -EEXIST; -ENOENT parent missing or empty target; -ENOTDIR;
 * -ENFILE; -ENOSPC; -ENAMETOOLONG. */
int ckptfs_symlink(const char *target, const char *path);

/* Copies the target of symlink `path` into buf (at most size bytes, no NUL added, as
 * readlink(2)); returns the bytes copied. Errors: -EINVAL not a symlink or size 0;
 * -ENOENT; -EIO its target record fails its checksum. */
ssize_t ckptfs_readlink(const char *path, char *buf, size_t size);

/* One directory entry ("." and ".." are not listed). */
typedef struct ckptfs_dirent {
    uint64_t ino;
    uint32_t kind;                     /* CKPTFS_KIND_* */
    uint32_t namelen;                  /* strlen(name) */
    char name[CKPTFS_NAME_MAX + 1];    /* NUL-terminated */
} ckptfs_dirent;

/*
 * Open a directory for listing; returns a descriptor (release it with ckptfs_close).
 * Errors: as ckptfs_open; -ENOTDIR not a directory.
 */
int ckptfs_opendir(const char *path);

/*
 * Next entry: returns 1 and fills *ent, or 0 at the end. The listing is a snapshot
 * taken at the first call (and again after ckptfs_lseek(fd, 0, SEEK_SET)).
 * Errors: -EBADF; -ENOTDIR not a directory descriptor; -EFAULT.
 */
int ckptfs_readdir(int fd, ckptfs_dirent *ent);

/* ------------------------------------------------------------------ data region
 * (CRUISE section 4.6): copy a file out without the writer's involvement.
 * See docs/capi.md, "Data-region protocol".
 */

/*
 * The memory data region of the store holding `path` (any path under the mount, e.g.
 * the prefix), as mapped in this process: its base address, size in bytes and chunk
 * size. Valid until the mount is removed. Output pointers may be NULL.
 * Errors: -ENOENT; -EFAULT path NULL.
 */
int ckptfs_get_data_region(const char *path, void **base, size_t *size, size_t *chunk_size);

#define CKPTFS_CHUNK_MEMORY 0 /* offset is from the data region base */
#define CKPTFS_CHUNK_SPILL 1  /* offset is in the spill file (ckptfs_get_spill_path) */

/* One chunk of a file. */
typedef struct ckptfs_chunk_meta {
    uint32_t logical;   /* logical index: holds file bytes from logical * chunk_size */
    uint32_t location;  /* CKPTFS_CHUNK_MEMORY or CKPTFS_CHUNK_SPILL */
    uint64_t offset;    /* byte offset of the chunk in the data region or spill file */
    uint64_t length;    /* bytes of file data in this chunk (up to the file size) */
    uint64_t written;   /* bytes from the chunk start covered by crc32c; bytes of
                           length beyond it read as zeros */
    uint32_t crc32c;    /* CRC32C (Castagnoli) of the first `written` bytes */
    uint32_t crc_valid; /* 1 if crc32c is current, 0 while being overwritten */
    uint32_t chunk_id;  /* physical chunk number */
} ckptfs_chunk_meta;

/*
 * The chunks of the file `path`, sorted by logical index; logical indices that are
 * missing are holes (zeros). Returns the number of chunks. With out == NULL and
 * max == 0 only counts them.
 * Errors: -ERANGE more than `max` chunks (count again and retry); -EISDIR; -ENOENT;
 * -EFAULT out NULL with max > 0.
 */
ssize_t ckptfs_get_chunk_list(const char *path, ckptfs_chunk_meta *out, size_t max);

/*
 * The spill file of the store holding `path`: copies its path with a NUL into `buf`
 * and returns its length; 0 (and "") if the store has no spill file. With buf == NULL
 * and len == 0 only returns the length.
 * Errors: -ERANGE len <= length; -ENOENT; -EFAULT.
 */
ssize_t ckptfs_get_spill_path(const char *path, char *buf, size_t len);

/* ------------------------------------------------------------------ levels
 * Which levels hold a file: this node's store, partner nodes (the node daemon's partner
 * copies, docs/cluster.md), the parallel file system (the drain). The same answer as
 * `ckptfs ls -l` and `ckptfs status --json`, from the same sources: the file's state,
 * the record the node daemon keeps in the store (/.ckptfs/levels.json) and the manifest
 * the drain publishes next to the drained files. A partner or PFS copy counts only if it
 * is of the file's current version (same inode, generation, size and mtime): a file
 * rewritten since shows no partner copy until the daemon has sent the new version.
 * Without a node daemon (or before its first copy) no file has a partner copy; a record
 * that cannot be read counts as none. Each call reads the record again: ask once per
 * file, not in a tight loop. See docs/capi.md, "Levels of a file".
 */

#define CKPTFS_LEVEL_LOCAL 1u   /* complete in this node's store (the last writer closed
                                   it; a file being written, or whose writer died, is not) */
#define CKPTFS_LEVEL_PARTNER 2u /* a complete, CRC-verified copy of this version on at
                                   least one partner node */
#define CKPTFS_LEVEL_PFS 4u     /* this version was drained to the parallel file system */

typedef struct ckptfs_levels {
    uint32_t flags;    /* CKPTFS_LEVEL_* */
    uint32_t partners; /* partner nodes holding a copy of this version
                          (ckptfs_file_partners names them) */
    uint32_t refused;  /* partners that refused a copy (full: ENOSPC): "no partner copy"
                          on those */
    uint32_t reserved; /* 0 */
} ckptfs_levels;

/*
 * The levels holding the current version of the file `path`, into *out.
 * Errors: -ENOENT; -EISDIR a directory; -ENOTDIR; -ENAMETOOLONG; -EFAULT path or out
 * NULL.
 */
int ckptfs_file_levels(const char *path, ckptfs_levels *out);

/*
 * The ids of the partner nodes holding a copy of the current version of `path`, copied
 * into `buf` one after another, each NUL-terminated (as listxattr(2)): "node3\0node4\0".
 * Returns the length of that list in bytes (0: no partner copy). With buf == NULL and
 * len == 0 only returns the length.
 * Errors: -ERANGE len smaller than the list (ask for the length and retry; it may grow
 * meanwhile); -ENOENT; -EISDIR; -EFAULT path NULL, or buf NULL with len > 0.
 */
ssize_t ckptfs_file_partners(const char *path, char *buf, size_t len);

/*
 * The ids of every level holding a verified copy of the current version of `path`, in
 * the order to read them: "local", "partner:NODE", "pfs:DIR", then other levels
 * ("erasure:SET", "pool:MANAGER", "s3:BUCKET/PREFIX"), copied into `buf` one after
 * another, each NUL-terminated (as listxattr(2)). Returns the length of that list in
 * bytes (0: no level holds it). With buf == NULL and len == 0 only returns the length.
 * A level added later appears here with its own id, with no new flag.
 * Errors: -ERANGE len smaller than the list; -ENOENT; -EISDIR; -EFAULT.
 */
ssize_t ckptfs_file_level_ids(const char *path, char *buf, size_t len);

/* ------------------------------------------------------------------ datasets */
/*
 * Checkpoint datasets (docs/datasets.md), modelled on SCR's Start/Complete_output,
 * Have/Start_restart and Need_checkpoint. They act on the store ckptfs_mount(prefix,
 * NULL) would use (the CKPTFS_* environment), for this process's rank (CKPTFS_RANK or
 * the MPI launcher's variables), job (CKPTFS_JOB, default "default") and drain
 * destinations (CKPTFS_DEST). Every rank of the job calls begin and complete; a dataset
 * is complete when all CKPTFS_NRANKS (or OMPI_COMM_WORLD_SIZE, PMI_SIZE) parts are.
 * With CKPTFS_CLUSTER (the cluster file) and CKPTFS_NODE_ID set (ckptfs run --cluster F
 * --node-id N sets them), the calls act for that node, on its store from the cluster
 * file, and completeness, ids and restart are job-wide: the other nodes' daemons are
 * asked. Without them, this node's records alone decide.
 */

/* Begin a dataset named `name` (ranks calling it with the same name join one dataset);
 * its id, monotonic per job, in *id. Files written until complete belong to it.
 * 0 or -errno: -EINVAL bad name, -EFAULT name NULL. */
int ckptfs_ckpt_begin(const char *name, uint64_t *id);

/* Complete this rank's part of dataset `id`; valid == 0 marks the dataset invalid.
 * 0 or -errno: -ENOENT never begun (by this rank); -EALREADY completed already, or given
 * up meanwhile (a rank died: the dataset is incomplete). */
int ckptfs_ckpt_complete(uint64_t id, int valid);

/* Is a dataset wholly recoverable (local store, partners' memory across nodes, PFS)?
 * The one ckptfs_start_restart would choose now (the current restart round's, else the
 * newest): 1 and its name in buf (NUL-terminated), 0 if none (buf = ""), -ERANGE if len
 * is too small. */
int ckptfs_have_restart(char *buf, size_t len);

/* Bring the newest wholly recoverable dataset's missing files back into the store
 * (CRC32C checked) and copy its name into buf: 1, 0 if none, or -errno. Every rank of
 * one job restart gets the same dataset: the first rank's choice is recorded and the
 * later ranks adopt it, even if a faster rank deleted its files of it meanwhile (D9). */
int ckptfs_start_restart(char *buf, size_t len);

/* *flag = 1 when a checkpoint is due now (Daly's interval from the measured checkpoint
 * cost and node_mtbf / job_nodes has passed, or an alarm is raised for this node), else
 * 0. 0 or -errno. */
int ckptfs_need_checkpoint(int *flag);

/* ------------------------------------------------------------------ pool */
/*
 * The aggregate memory pool (docs/pool.md): a manager and benefactor nodes lending
 * their memory; files are cut into chunks striped over the benefactors (r copies each
 * with pool.replicas = r) from a write buffer, and committed at close. Handles are
 * small non-negative integers of this library (not kernel descriptors). A file is
 * written sequentially once per version; a read sees the newest version committed when
 * it was opened, every chunk checked against its BLAKE3 hash and CRC32C.
 */

/* Connect to the pool of the cluster file `cluster_file` (NULL: $CKPTFS_CLUSTER) as
 * the pool client of node `node_id` (NULL: $CKPTFS_NODE_ID, else the manager's node),
 * with a write buffer of `buffer` bytes (0: 64 MiB). A client handle or -errno
 * (-EINVAL: no cluster file, or no [pool] section). */
int ckptfs_pool_connect(const char *cluster_file, const char *node_id, uint64_t buffer);

/* Forget a client handle (files open through it stay usable). 0 or -errno. */
int ckptfs_pool_disconnect(int pool);

/* Start writing a new version of `path` (absolute pool path). A descriptor or -errno
 * (-EHOSTDOWN: the manager is unreachable; -ENOSPC: no benefactor with memory). */
int ckptfs_pool_create(int pool, const char *path);

/* Append `count` bytes; returns once they are in the write buffer: count or -errno. */
ssize_t ckptfs_pool_write(int fd, const void *data, size_t count);

/* Open the newest version of `path` for reading: a descriptor or -errno (-ENOENT). */
int ckptfs_pool_open(int pool, const char *path);

/* Read up to `count` bytes at `offset`: the bytes read (0 at the end) or -errno
 * (-EIO: a chunk is lost or every copy returned wrong bytes). */
ssize_t ckptfs_pool_pread(int fd, void *out, size_t count, uint64_t offset);

/* Size of an open pool file (of a write: the bytes taken so far), or -errno. */
int64_t ckptfs_pool_size(int fd);

/* Close. A write is committed: only when this returns 0 is the version visible and
 * every chunk held by the benefactors; otherwise -errno and nothing is published. The
 * descriptor is released either way. */
int ckptfs_pool_close(int fd);

/* Remove every version of `path`. 0 or -errno (-ENOENT). */
int ckptfs_pool_unlink(int pool, const char *path);

/* ------------------------------------------------------------------ misc */

/* The library version, e.g. "0.1.0" (the header's is CKPTFS_VERSION). */
const char *ckptfs_version(void);

/*
 * Message of the calling thread's last failed call ("" if none), e.g.
 * "mount /ckpt: segment /dev/shm/ckptfs.job: not a ckptfs segment (bad magic)".
 * Never NULL. The pointer stays valid for the calling thread's lifetime; the next
 * failing call on that thread replaces the text (messages over 8191 bytes are cut).
 */
const char *ckptfs_last_error(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CKPTFS_H */
