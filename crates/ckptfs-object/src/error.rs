//! The object level's errors. Each names the endpoint and bucket it concerns; none
//! carries a credential (messages from the service are scrubbed of the secret key before
//! they are kept).

/// What went wrong with the object store.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// A setting or URL is wrong, or credentials are missing.
    #[error("object level: {0}")]
    Config(String),
    /// The service refused the credentials (HTTP 403: wrong key, wrong secret).
    #[error("{at}: access denied ({op} {key}): check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (credentials from {from}): {detail}")]
    Denied {
        /// `s3 endpoint URL, bucket B`.
        at: String,
        /// Operation.
        op: &'static str,
        /// Object key.
        key: String,
        /// Where the credentials came from.
        from: String,
        /// The service's answer (scrubbed).
        detail: String,
    },
    /// The bucket does not exist.
    #[error("s3 endpoint {endpoint}: bucket {bucket} does not exist (NoSuchBucket)")]
    NoBucket {
        /// Endpoint URL.
        endpoint: String,
        /// Bucket.
        bucket: String,
    },
    /// The service kept answering 503 SlowDown / 5xx / 429 (or kept dropping the
    /// connection) after the bounded number of retries.
    #[error(
        "{at}: {op} {key}: gave up after {retries} retries with backoff (throttled or unavailable): {detail}"
    )]
    Unavailable {
        /// `s3 endpoint URL, bucket B`.
        at: String,
        /// Operation.
        op: &'static str,
        /// Object key.
        key: String,
        /// The retry bound in force.
        retries: usize,
        /// The last answer (scrubbed).
        detail: String,
    },
    /// Any other failed request.
    #[error("{at}: {op} {key}: {detail}")]
    Request {
        /// `s3 endpoint URL, bucket B`.
        at: String,
        /// Operation.
        op: &'static str,
        /// Object key.
        key: String,
        /// errno this maps to.
        errno: i32,
        /// The error (scrubbed).
        detail: String,
    },
    /// A manifest is malformed or inconsistent (never trusted: checked before use).
    #[error("s3 manifest {key}: {reason}")]
    Manifest {
        /// Manifest object key.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// Called from inside an async runtime (the level blocks on its own runtime).
    #[error("object level called from inside an async runtime; call it from a plain thread")]
    InRuntime,
    /// The level's runtime could not be built.
    #[error("object level runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The writer was given bytes out of order.
    #[error("object level: {path}: write at {off}, expected {expected} (writes are sequential)")]
    NotSequential {
        /// Store path.
        path: String,
        /// Offset given.
        off: u64,
        /// Offset expected.
        expected: u64,
    },
}

impl ObjectError {
    /// The POSIX errno.
    pub fn errno(&self) -> i32 {
        match self {
            ObjectError::Config(_) => libc::EINVAL,
            ObjectError::Denied { .. } => libc::EACCES,
            ObjectError::NoBucket { .. } => libc::ENOENT,
            ObjectError::Unavailable { .. } => libc::EAGAIN,
            ObjectError::Request { errno, .. } => *errno,
            ObjectError::Manifest { .. } => libc::EIO,
            ObjectError::InRuntime => libc::EDEADLK,
            ObjectError::Runtime(e) => e.raw_os_error().unwrap_or(libc::EIO),
            ObjectError::NotSequential { .. } => libc::EINVAL,
        }
    }
}

/// What a request was about, to classify an `object_store` error.
pub(crate) struct Ctx<'a> {
    pub endpoint: &'a str,
    pub bucket: &'a str,
    pub secret: Option<&'a str>,
    pub from: &'a str,
    pub retries: usize,
}

impl ObjectError {
    /// Classify an `object_store` error of `op` on `key`.
    pub(crate) fn request(cx: &Ctx<'_>, op: &'static str, key: &str, e: object_store::Error) -> ObjectError {
        let mut detail = format!("{e}");
        if let Some(s) = cx.secret.filter(|s| !s.is_empty()) {
            detail = detail.replace(s, "***");
        }
        // Keep messages on one line and bounded: the service's XML error body becomes
        // its code and message (the rest, StringToSign and the like, is noise).
        detail = detail.replace(['\n', '\r'], " ");
        if let (Some(at), Some(code)) = (detail.find("<?xml"), xml_field(&detail, "Code")) {
            let msg = xml_field(&detail, "Message").unwrap_or_default();
            detail = format!("{}{code}: {msg}", &detail[..at]);
        }
        if detail.len() > 600 {
            let mut cut = 600;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
            detail.push_str("...");
        }
        if detail.contains("NoSuchBucket") {
            return ObjectError::NoBucket {
                endpoint: cx.endpoint.to_string(),
                bucket: cx.bucket.to_string(),
            };
        }
        let at = format!("s3 endpoint {}, bucket {}", cx.endpoint, cx.bucket);
        let key = key.to_string();
        let denied = matches!(
            e,
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
        ) || [
            "SignatureDoesNotMatch",
            "InvalidAccessKeyId",
            "AccessDenied",
            "403 Forbidden",
        ]
        .iter()
        .any(|m| detail.contains(m));
        if denied {
            return ObjectError::Denied {
                at,
                op,
                key,
                from: cx.from.to_string(),
                detail,
            };
        }
        if matches!(e, object_store::Error::NotFound { .. }) {
            return ObjectError::Request {
                at,
                op,
                key,
                errno: libc::ENOENT,
                detail,
            };
        }
        let gave_up = detail.contains("retries")
            || ["503", "SlowDown", "429", "500 Internal", "502", "504"]
                .iter()
                .any(|m| detail.contains(m));
        if gave_up {
            return ObjectError::Unavailable {
                at,
                op,
                key,
                retries: cx.retries,
                detail,
            };
        }
        ObjectError::Request {
            at,
            op,
            key,
            errno: libc::EIO,
            detail,
        }
    }
}

/// The text of the first `<name>...</name>` in `s`.
fn xml_field(s: &str, name: &str) -> Option<String> {
    let open = format!("<{name}>");
    let start = s.find(&open)? + open.len();
    let end = s[start..].find(&format!("</{name}>"))? + start;
    Some(s[start..end].to_string())
}

impl From<ObjectError> for ckptfs_level::LevelError {
    fn from(e: ObjectError) -> Self {
        ckptfs_level::LevelError::backend(e.errno(), e)
    }
}
