//! `ckptfs bench drain` (work in progress).
