//! What makes a manifest file unusable, and the limits it is checked against: apart
//! from the manifest module, so that the agent's error type can name it without a
//! circle between the two modules.

use ckptfs_store::layout::{MAX_CHUNK, MIN_CHUNK};

/// Format tag written into every manifest.
pub const FORMAT: &str = "ckptfs-manifest/1";

/// A manifest larger than this is refused before it is parsed (a node's manifest of one
/// directory lists its files there: ~20 bytes per chunk CRC, so 512 MiB covers several
/// TiB of checkpoints at the smallest chunk size).
pub const MAX_BYTES: u64 = 512 << 20;

/// Why a manifest file cannot be used at all. Messages never quote the file's content
/// (a manifest planted as a link to another file must not print that file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// Larger than [`MAX_BYTES`].
    #[error("larger than {max} bytes")]
    TooLarge {
        /// The limit.
        max: u64,
    },
    /// Not JSON (or cut short: a truncated manifest).
    #[error("not valid JSON at line {line}, column {column}")]
    Syntax {
        /// Line of the first error.
        line: usize,
        /// Column of the first error.
        column: usize,
    },
    /// Ends before the JSON document does.
    #[error("truncated at line {line}, column {column}")]
    Truncated {
        /// Line where it ends.
        line: usize,
        /// Column where it ends.
        column: usize,
    },
    /// JSON, but a field is missing or has the wrong type or range.
    #[error("a field is missing or has the wrong type (line {line}, column {column})")]
    Fields {
        /// Line of the first error.
        line: usize,
        /// Column of the first error.
        column: usize,
    },
    /// The `format` field is not [`FORMAT`].
    #[error("unknown format (expected {FORMAT:?})")]
    Format,
}

/// Why restore refuses one manifest entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The key is not one file name (empty, `.`, `..`, a `/`, a NUL, over 255 bytes).
    #[error("the name is not a single file name in the manifest's directory")]
    Name,
    /// The store path is not the one the manifest's directory stands for.
    #[error("store path {found:?} does not belong to this directory (expected {expected:?})")]
    StorePath {
        /// The store path the entry names.
        found: String,
        /// The only store path a file of this name in this directory can have.
        expected: String,
    },
    /// The chunk size is outside the store's legal range or not a power of two.
    #[error("chunk size {0} is not a power of two between {min} and {max}", min = MIN_CHUNK, max = MAX_CHUNK)]
    ChunkSize(u64),
    /// The size does not fit a file offset.
    #[error("size {0} is too large")]
    Size(u64),
    /// The number of chunk CRCs does not match the size.
    #[error("{found} chunk checksums for {size} bytes in chunks of {chunk_size} (expected {expected})")]
    ChunkCount {
        /// CRCs listed.
        found: usize,
        /// CRCs needed.
        expected: u64,
        /// File size.
        size: u64,
        /// Chunk size.
        chunk_size: u64,
    },
    /// The whole-file CRC does not agree with the chunk CRCs.
    #[error("the whole-file checksum does not agree with the chunk checksums")]
    FileCrc,
    /// Mode bits outside 0o7777.
    #[error("mode {0:#o} is not a permission mode")]
    Mode(u32),
}
