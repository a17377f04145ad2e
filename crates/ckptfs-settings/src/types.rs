//! Types shared by the front-ends and the coming network code: node and rank numbers,
//! storage levels, dataset ids and an errno newtype.

use std::fmt;
use std::str::FromStr;

/// A node of the cluster (its index in the node list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

/// A process of a parallel job (its MPI rank).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank(pub u32);

/// A dataset: one checkpoint of one job (all the files of one step), as the levels
/// above the node store address it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DatasetId(pub u64);

macro_rules! number_newtype {
    ($t:ident, $inner:ty, $what:literal) => {
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let t = s.trim();
                if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("{s:?} is not a {}", $what));
                }
                t.parse::<$inner>()
                    .map($t)
                    .map_err(|_| format!("{s:?} is out of range for a {}", $what))
            }
        }
    };
}
number_newtype!(NodeId, u32, "node id");
number_newtype!(Rank, u32, "rank");
number_newtype!(DatasetId, u64, "dataset id");

/// A storage level, from the fastest and least resilient to the slowest and most
/// resilient. The order of the variants is that order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// The node store (shared memory, spill file).
    Local,
    /// A copy in a partner node's memory.
    Partner,
    /// An erasure-coded set across nodes.
    Erasure,
    /// A shared memory pool.
    Pool,
    /// The parallel file system.
    Pfs,
    /// Object storage.
    Object,
}

impl Level {
    /// Every level, fastest first.
    pub const ALL: [Level; 6] = [
        Level::Local,
        Level::Partner,
        Level::Erasure,
        Level::Pool,
        Level::Pfs,
        Level::Object,
    ];

    /// Its name in settings, manifests and output.
    pub fn name(self) -> &'static str {
        match self {
            Level::Local => "local",
            Level::Partner => "partner",
            Level::Erasure => "erasure",
            Level::Pool => "pool",
            Level::Pfs => "pfs",
            Level::Object => "object",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Level, String> {
        let t = s.trim().to_ascii_lowercase();
        Level::ALL.into_iter().find(|l| l.name() == t).ok_or_else(|| {
            let names: Vec<_> = Level::ALL.iter().map(|l| l.name()).collect();
            format!("{s:?} is not a level ({})", names.join(", "))
        })
    }
}

/// A POSIX error number (positive), as every ckptfs error maps to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    /// Invalid argument (bad settings, bad names).
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    /// No such file or directory.
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    /// I/O error (also: damaged data).
    pub const EIO: Errno = Errno(libc::EIO);
    /// No space left.
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    /// Permission denied.
    pub const EACCES: Errno = Errno(libc::EACCES);
    /// Name too long.
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);

    /// The number (positive).
    pub fn get(self) -> i32 {
        self.0
    }

    /// The C ABI return value: `-errno`.
    pub fn c_ret(self) -> i32 {
        -self.0
    }

    /// The errno of an I/O error (EIO when it carries none).
    pub fn from_io(e: &std::io::Error) -> Errno {
        Errno(e.raw_os_error().filter(|&n| n > 0).unwrap_or(libc::EIO))
    }

    /// The errno of a `-errno` C return value; None for a success (`>= 0`).
    pub fn from_ret(ret: i64) -> Option<Errno> {
        (ret < 0).then(|| Errno(i32::try_from(-ret).unwrap_or(libc::EIO)))
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (errno {})",
            std::io::Error::from_raw_os_error(self.0),
            self.0
        )
    }
}

impl From<Errno> for std::io::Error {
    fn from(e: Errno) -> std::io::Error {
        std::io::Error::from_raw_os_error(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip_in_order() {
        for l in Level::ALL {
            assert_eq!(l.name().parse::<Level>(), Ok(l));
        }
        assert!(Level::Local < Level::Partner && Level::Pfs < Level::Object);
        assert!("tape".parse::<Level>().unwrap_err().contains("not a level"));
    }

    #[test]
    fn ids_parse_and_reject_junk() {
        assert_eq!("7".parse::<NodeId>(), Ok(NodeId(7)));
        assert_eq!(" 3 ".parse::<Rank>(), Ok(Rank(3)));
        assert!("-1".parse::<Rank>().is_err());
        assert!("4294967296"
            .parse::<NodeId>()
            .unwrap_err()
            .contains("out of range"));
        assert_eq!(DatasetId(9).to_string(), "9");
    }

    #[test]
    fn errno_maps_io_errors_and_c_returns() {
        let e = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(Errno::from_io(&e), Errno::ENOSPC);
        assert_eq!(Errno::from_io(&std::io::Error::other("x")), Errno::EIO);
        assert_eq!(Errno::from_ret(-(libc::EINVAL as i64)), Some(Errno::EINVAL));
        assert_eq!(Errno::from_ret(0), None);
        assert_eq!(Errno::EINVAL.c_ret(), -libc::EINVAL);
        assert_eq!(
            std::io::Error::from(Errno::EACCES).raw_os_error(),
            Some(libc::EACCES)
        );
    }
}
