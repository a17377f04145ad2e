//! The store's error type and its single mapping to POSIX errno values.

use std::io;

/// Everything that can go wrong in the store. Every variant maps to exactly one errno
/// ([`StoreError::errno`]) so that the C ABI, the preload shim and FUSE agree.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A path component does not exist.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// The target already exists (O_CREAT|O_EXCL, mkdir).
    #[error("file exists: {0}")]
    Exists(String),
    /// A path component used as a directory is a file.
    #[error("not a directory: {0}")]
    NotDir(String),
    /// A directory was used where a file is needed.
    #[error("is a directory: {0}")]
    IsDir(String),
    /// rmdir or rename onto a directory that still has entries.
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// A component longer than 255 bytes or a path longer than 4095 bytes.
    #[error("name too long: {0}")]
    NameTooLong(String),
    /// Memory and spill chunks are exhausted.
    #[error("no space left in store (memory and spill chunks exhausted)")]
    NoSpace,
    /// The file table is full.
    #[error("file table full ({0} files)")]
    TooManyFiles(u32),
    /// More distinct processes hold one file open than the lease table allows.
    #[error("too many processes have {0} open")]
    TooManyOpeners(String),
    /// A handle used for an access it was not opened for.
    #[error("bad file descriptor: {0}")]
    BadHandle(&'static str),
    /// An invalid argument (negative offset, bad flags, bad name).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The file would exceed the largest size the layout can address.
    #[error("file too large")]
    FileTooLarge,
    /// Busy (removing the root directory, or a segment being created).
    #[error("resource busy: {0}")]
    Busy(String),
    /// A chunk's data does not match its recorded CRC32C.
    #[error(
        "checksum mismatch in {path} chunk {logical} (stored {stored:#010x}, computed {computed:#010x})"
    )]
    Corrupt {
        /// Store path of the file.
        path: String,
        /// Logical chunk index inside the file.
        logical: u32,
        /// CRC32C recorded at write time.
        stored: u32,
        /// CRC32C of the data now.
        computed: u32,
    },
    /// The store's metadata about a file is damaged (a checksum of an inode or chunk entry
    /// does not match, an index is out of range): the file's bytes cannot be trusted.
    #[error("{path}: damaged store metadata ({what}); run `ckptfs fsck`")]
    Damaged {
        /// Store path of the file (or what is known of it).
        path: String,
        /// What is damaged.
        what: String,
    },
    /// The segment is not a ckptfs segment, has another format version, or is damaged.
    #[error("segment {path}: {reason}")]
    BadSegment {
        /// Path of the segment file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Attaching with settings that differ from the ones the segment was created with.
    #[error("store {name} exists with {setting} = {existing}, but {requested} was requested (destroy it or drop the setting)")]
    ConflictingSettings {
        /// Store name.
        name: String,
        /// Which setting.
        setting: &'static str,
        /// Value in the superblock.
        existing: String,
        /// Value asked for.
        requested: String,
    },
    /// No store of that name exists (attach without create).
    #[error("no store named {0} (create it with `ckptfs init`)")]
    NoStore(String),
    /// A segment or spill file the caller must not trust: a symbolic link, not a regular
    /// file, owned by another user, or with a mode other than 0600 (design.md, "Threat
    /// model").
    #[error("refusing {path} (owner uid {owner}, mode {mode:04o}): it {reason}")]
    Untrusted {
        /// Path of the file.
        path: String,
        /// Its owner (`u32::MAX` if unknown).
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// What is wrong.
        reason: String,
    },
    /// Permission denied.
    #[error("permission denied: {0}")]
    Permission(String),
    /// Operation not permitted (EPERM: a hard link to a directory).
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// No such extended attribute (ENODATA).
    #[error("no such extended attribute: {0}")]
    NoAttr(String),
    /// An extended attribute name empty or longer than 255 bytes (ERANGE).
    #[error("bad extended attribute name length: {0}")]
    AttrRange(String),
    /// An extended attribute value longer than 64 KiB (E2BIG).
    #[error("extended attribute value too large: {0}")]
    AttrTooBig(String),
    /// A file has the most names it may have ([`crate::LINK_MAX`]).
    #[error("too many links: {0}")]
    TooManyLinks(String),
    /// A symbolic link where the operation does not follow one (opening a symlink in
    /// the store, or more than 40 links followed while resolving a path).
    #[error("symbolic link: {0}")]
    Loop(String),
    /// The store was destroyed (`ckptfs destroy --force`) while this process still had
    /// it attached (ESTALE): nothing more is read from or written to its memory.
    #[error("store {0} was destroyed while attached; attach the store of that name again")]
    Destroyed(String),
    /// An operation the store does not support.
    #[error("operation not supported: {0}")]
    Unsupported(&'static str),
    /// An I/O error from the operating system (spill file, segment file).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// Shorthand for results of store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

impl StoreError {
    /// The POSIX errno for this error. Unknown OS errors map to EIO.
    pub fn errno(&self) -> i32 {
        use StoreError::*;
        match self {
            NotFound(_) | NoStore(_) => libc::ENOENT,
            Exists(_) => libc::EEXIST,
            NotDir(_) => libc::ENOTDIR,
            IsDir(_) => libc::EISDIR,
            NotEmpty(_) => libc::ENOTEMPTY,
            NameTooLong(_) => libc::ENAMETOOLONG,
            NoSpace => libc::ENOSPC,
            TooManyFiles(_) => libc::ENFILE,
            TooManyOpeners(_) => libc::EMFILE,
            BadHandle(_) => libc::EBADF,
            Invalid(_) | ConflictingSettings { .. } => libc::EINVAL,
            FileTooLarge => libc::EFBIG,
            Busy(_) => libc::EBUSY,
            Destroyed(_) => libc::ESTALE,
            Corrupt { .. } | Damaged { .. } => libc::EIO,
            BadSegment { .. } => libc::EINVAL,
            Permission(_) | Untrusted { .. } => libc::EACCES,
            NotPermitted(_) => libc::EPERM,
            NoAttr(_) => libc::ENODATA,
            AttrRange(_) => libc::ERANGE,
            AttrTooBig(_) => libc::E2BIG,
            TooManyLinks(_) => libc::EMLINK,
            Unsupported(_) => libc::EOPNOTSUPP,
            Loop(_) => libc::ELOOP,
            Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> Self {
        StoreError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<StoreError> for io::Error {
    fn from(e: StoreError) -> Self {
        let errno = e.errno();
        io::Error::new(io::Error::from_raw_os_error(errno).kind(), e)
    }
}
