//! `store_writer`: a writer process for the store's crash and concurrency tests.
//!
//! It writes files with a known byte pattern into a named store and prints one line to
//! stdout after each operation has *returned*, so the process that spawned it knows what
//! completed before it SIGKILLed it (an operation without its line may or may not have
//! happened):
//!
//! ```text
//! closed /w3/f0.tmp 81920      the file was written and closed with that size
//! renamed /w3/f0.tmp /w3/f0    rename returned
//! unlinked /w3/f0              unlink returned
//! held /w3/held 40960          a write to the file it keeps open returned; size now
//! short /w3/fill 65536         write() wrote fewer bytes than asked (store full); size now
//! enospc /w3/fill 131072       write() failed with ENOSPC; the file has that size
//! ready                        (overwrite mode) the endless overwrite loop starts
//! shrunk /w3/f1 40000          (trunc mode) ftruncate() to that size returned
//! opened                       (op=hold) the file is open for reading; waits to be killed
//! done                         everything asked for is finished
//! error <message>              an unexpected error (exit status 2)
//! ```
//!
//! Arguments are `key=value` pairs (see [`Spec`]), e.g.
//! `cargo run --example store_writer -- store=NAME mode=files dir=/w0 count=5 size=300000`.
//! The tests run this same code inside their own executable (they include this file as a
//! module and re-execute themselves in "child mode"), so the writer they spawn is always
//! built from the same sources as the test, even with `cargo test --test crash`.

use ckptfs_store::{OpenFlags, Store, StoreError, StoreOptions};
use std::io::Write;

/// What the writer does.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// Store name (`store=`).
    pub store: String,
    /// Use a private per-rank segment (`private=1`, rank from CKPTFS_RANK).
    pub private: bool,
    /// Create the store with this memory size if it does not exist (`mem=`).
    pub mem: Option<u64>,
    /// Chunk size used when creating (`chunk=`).
    pub chunk: Option<u64>,
    /// `files`, `fill`, `overwrite`, `trunc` or `op` (`mode=`). `trunc`: rewrite
    /// `count` files over and over with `O_TRUNC`, each always with its own pattern
    /// (`file_seed(i)`), shrinking each with `ftruncate` after every rewrite, until
    /// killed: at any moment every file must read as a prefix of its pattern.
    pub mode: String,
    /// Directory the files go to; created if missing (`dir=`).
    pub dir: String,
    /// Files to write in `files` mode; 0 = forever (`count=`).
    pub count: u64,
    /// Largest file size (`size=`); `overwrite`: the file size; `op`: bytes to append.
    pub size: u64,
    /// Smallest file size (`min=`).
    pub min: u64,
    /// Block sizes of write() calls, cycled per file (`blocks=4096,65536`).
    pub blocks: Vec<usize>,
    /// Seed of sizes and contents (`seed=`).
    pub seed: u64,
    /// Write `fN.tmp`, close, then rename it to `fN` (`tmp=1`).
    pub tmp: bool,
    /// Unlink `f(N-keep)` after writing `fN`; 0 = keep all (`keep=`).
    pub keep: u64,
    /// Keep `DIR/held` open for writing and append one block per file up to this size
    /// (`hold=`); 0 = no held file.
    pub hold: u64,
    /// `op` mode: `create`, `append`, `unlink`, `rename`, `truncate`, `rewrite` (open
    /// with O_TRUNC and write `size` bytes of the pattern), `fork` (open for writing,
    /// fork; the child adopts the descriptor, writes 5 bytes if `to=write`, and is
    /// SIGKILLed; then the parent appends `size` bytes and closes), or `hold` (open for
    /// reading, print `opened`, wait to be killed) (`op=`).
    pub op: String,
    /// `op` mode: the path operated on (`path=`).
    pub path: String,
    /// `op` mode: rename target (`to=`).
    pub to: String,
    /// `files` mode: before the last `keep` files (or the last one), wait until this
    /// path exists on the real file system (`gate=`), so a test can make sure other
    /// things happen while this writer is still running.
    pub gate: String,
}

impl Spec {
    /// A spec for `mode` on `store` with the defaults of the other fields.
    pub fn new(store: &str, mode: &str) -> Spec {
        Spec {
            store: store.into(),
            mode: mode.into(),
            dir: "/w".into(),
            blocks: vec![65536],
            size: 100_000,
            ..Default::default()
        }
    }

    /// Parse `key=value` arguments.
    pub fn parse<S: AsRef<str>>(args: &[S]) -> Result<Spec, String> {
        let mut s = Spec::new("", "files");
        for a in args {
            let a = a.as_ref();
            let (k, v) = a
                .split_once('=')
                .ok_or_else(|| format!("argument {a:?} is not key=value"))?;
            let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{k}={v}: {e}"));
            match k {
                "store" => s.store = v.into(),
                "private" => s.private = v == "1",
                "mem" => s.mem = Some(num(v)?),
                "chunk" => s.chunk = Some(num(v)?),
                "mode" => s.mode = v.into(),
                "dir" => s.dir = v.into(),
                "count" => s.count = num(v)?,
                "size" => s.size = num(v)?,
                "min" => s.min = num(v)?,
                "blocks" => {
                    s.blocks = v
                        .split(',')
                        .map(|b| b.parse::<usize>().map_err(|e| format!("blocks={v}: {e}")))
                        .collect::<Result<_, _>>()?
                }
                "seed" => s.seed = num(v)?,
                "tmp" => s.tmp = v == "1",
                "keep" => s.keep = num(v)?,
                "hold" => s.hold = num(v)?,
                "op" => s.op = v.into(),
                "path" => s.path = v.into(),
                "to" => s.to = v.into(),
                "gate" => s.gate = v.into(),
                _ => return Err(format!("unknown argument {k}")),
            }
        }
        if s.store.is_empty() {
            return Err("store= is required".into());
        }
        if s.blocks.is_empty() || s.blocks.contains(&0) {
            return Err("blocks must be positive".into());
        }
        Ok(s)
    }

    /// The arguments that [`Spec::parse`] turns back into this spec.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("store={}", self.store),
            format!("mode={}", self.mode),
            format!("dir={}", self.dir),
            format!("count={}", self.count),
            format!("size={}", self.size),
            format!("min={}", self.min),
            format!(
                "blocks={}",
                self.blocks
                    .iter()
                    .map(|b| b.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            format!("seed={}", self.seed),
            format!("tmp={}", self.tmp as u8),
            format!("keep={}", self.keep),
            format!("hold={}", self.hold),
            format!("private={}", self.private as u8),
        ];
        if let Some(m) = self.mem {
            v.push(format!("mem={m}"));
        }
        if let Some(c) = self.chunk {
            v.push(format!("chunk={c}"));
        }
        for (k, x) in [
            ("op", &self.op),
            ("path", &self.path),
            ("to", &self.to),
            ("gate", &self.gate),
        ] {
            if !x.is_empty() {
                v.push(format!("{k}={x}"));
            }
        }
        v
    }

    /// Size of file number `i` (same in the writer and in the checking test).
    pub fn file_size(&self, i: u64) -> u64 {
        let span = self.size.saturating_sub(self.min) + 1;
        self.min + mix(self.seed ^ 0x5151, i) % span
    }

    /// write() block size used for file number `i`.
    pub fn block_size(&self, i: u64) -> usize {
        self.blocks[(mix(self.seed ^ 0xb10c, i) % self.blocks.len() as u64) as usize]
    }

    /// Content seed of file number `i`.
    pub fn file_seed(&self, i: u64) -> u64 {
        mix(self.seed, i)
    }

    /// Content seed of the held file.
    pub fn held_seed(&self) -> u64 {
        mix(self.seed, u64::MAX)
    }

    /// Path of file `i` under its final name.
    pub fn file_path(&self, i: u64) -> String {
        format!("{}/f{i}", self.dir)
    }

    /// Path of the held file.
    pub fn held_path(&self) -> String {
        format!("{}/held", self.dir)
    }

    fn options(&self) -> StoreOptions {
        StoreOptions {
            name: self.store.clone(),
            mem_size: self.mem,
            chunk_size: self.chunk,
            private: self.private,
            // A test running the writer on a store outside /dev/shm passes its directory.
            shm_dir: std::env::var_os("CKPTFS_SHM_DIR")
                .filter(|d| !d.is_empty())
                .map(std::path::PathBuf::from),
            ..Default::default()
        }
    }
}

/// SplitMix64 finaliser of `a` and `b`: a cheap, well-mixed deterministic hash.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_add(b.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x6a09_e667_f3bc_c909);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Fill `buf` with the pattern of content `seed` at file offset `off`. Every byte depends
/// on the seed and its absolute offset, so misplaced, stale or foreign data is detected.
pub fn fill_pattern(seed: u64, off: u64, buf: &mut [u8]) {
    let mut i = 0usize;
    while i < buf.len() {
        let x = off + i as u64;
        let w = mix(seed, x >> 3).to_le_bytes();
        let from = (x & 7) as usize;
        let n = (8 - from).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&w[from..from + n]);
        i += n;
    }
}

/// The pattern of content `seed` for `[off, off + len)`.
pub fn pattern(seed: u64, off: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill_pattern(seed, off, &mut v);
    v
}

/// First offset in `data` (which starts at file offset `off`) that differs from the
/// pattern of `seed`, if any.
pub fn first_mismatch(seed: u64, off: u64, data: &[u8]) -> Option<u64> {
    let mut buf = vec![0u8; 64 << 10];
    let mut i = 0;
    while i < data.len() {
        let n = buf.len().min(data.len() - i);
        fill_pattern(seed, off + i as u64, &mut buf[..n]);
        if buf[..n] != data[i..i + n] {
            let j = (0..n).find(|&j| buf[j] != data[i + j]).unwrap();
            return Some(off + (i + j) as u64);
        }
        i += n;
    }
    None
}

/// Byte of generation `g` in overwrite mode (two values, so that a torn write shows).
pub fn gen_byte(g: u64) -> u8 {
    if g.is_multiple_of(2) {
        0xaa
    } else {
        0x55
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe (parent gone) must not turn into a panic in the middle of a write.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn mkdir_p(store: &Store, dir: &str) -> Result<(), StoreError> {
    let mut cur = String::new();
    for c in dir.split('/').filter(|c| !c.is_empty()) {
        cur.push('/');
        cur.push_str(c);
        match store.mkdir(&cur, 0o755) {
            Ok(_) | Err(StoreError::Exists(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Write the pattern of `seed` for `[off, off + len)` with write() calls of `block` bytes.
fn write_pattern(
    f: &mut ckptfs_store::FileHandle,
    seed: u64,
    off: u64,
    len: u64,
    block: usize,
) -> Result<(), StoreError> {
    let mut buf = vec![0u8; block];
    let mut done = 0u64;
    while done < len {
        let n = (block as u64).min(len - done) as usize;
        fill_pattern(seed, off + done, &mut buf[..n]);
        f.write_all(&buf[..n])?;
        done += n as u64;
    }
    Ok(())
}

fn write_flags() -> OpenFlags {
    OpenFlags {
        write: true,
        ..Default::default()
    }
}

/// Run the writer described by `spec`.
pub fn run(spec: &Spec) -> Result<(), StoreError> {
    let store = if spec.mem.is_some() {
        Store::open_or_create(&spec.options())?
    } else {
        Store::attach(&spec.options())?
    };
    match spec.mode.as_str() {
        "files" => run_files(&store, spec),
        "fill" => run_fill(&store, spec),
        "overwrite" => run_overwrite(&store, spec),
        "trunc" => run_trunc(&store, spec),
        "op" => run_op(&store, spec),
        "links" => run_links(&store, spec),
        m => Err(StoreError::Invalid(format!("unknown mode {m}"))),
    }
}

fn run_files(store: &Store, spec: &Spec) -> Result<(), StoreError> {
    mkdir_p(store, &spec.dir)?;
    let mut held = if spec.hold > 0 {
        Some(store.open(&spec.held_path(), OpenFlags::CREATE, 0o644)?)
    } else {
        None
    };
    let mut held_size = 0u64;
    let mut i = 0u64;
    while spec.count == 0 || i < spec.count {
        if !spec.gate.is_empty() && i == spec.count.saturating_sub(spec.keep.max(1)) {
            while !std::path::Path::new(&spec.gate).exists() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        let (size, block, seed) = (spec.file_size(i), spec.block_size(i), spec.file_seed(i));
        let fin = spec.file_path(i);
        let path = if spec.tmp {
            format!("{fin}.tmp")
        } else {
            fin.clone()
        };
        let mut f = store.open(&path, OpenFlags::CREATE, 0o644)?;
        write_pattern(&mut f, seed, 0, size, block)?;
        f.close()?;
        say(&format!("closed {path} {size}"));
        if spec.tmp {
            store.rename(&path, &fin)?;
            say(&format!("renamed {path} {fin}"));
        }
        if spec.keep > 0 && i >= spec.keep {
            let old = spec.file_path(i - spec.keep);
            store.unlink(&old)?;
            say(&format!("unlinked {old}"));
        }
        if let Some(h) = held.as_mut() {
            let n = (block as u64).min(spec.hold - held_size);
            if n > 0 {
                write_pattern(h, spec.held_seed(), held_size, n, block)?;
                held_size += n;
                say(&format!("held {} {held_size}", spec.held_path()));
            }
        }
        i += 1;
    }
    if let Some(h) = held {
        h.close()?;
        say(&format!("closed {} {held_size}", spec.held_path()));
    }
    say("done");
    Ok(())
}

fn run_fill(store: &Store, spec: &Spec) -> Result<(), StoreError> {
    mkdir_p(store, &spec.dir)?;
    let path = format!("{}/fill", spec.dir);
    let mut f = store.open(&path, OpenFlags::CREATE, 0o644)?;
    let block = spec.blocks[0];
    let mut buf = vec![0u8; block];
    let mut size = 0u64;
    loop {
        fill_pattern(spec.seed, size, &mut buf);
        match f.write(&buf) {
            Ok(n) => {
                size += n as u64;
                if n < block {
                    say(&format!("short {path} {size}"));
                }
            }
            Err(e) if e.errno() == libc::ENOSPC => {
                say(&format!("enospc {path} {size}"));
                break;
            }
            Err(e) => return Err(e),
        }
    }
    f.close()?;
    say(&format!("closed {path} {size}"));
    say("done");
    Ok(())
}

fn run_overwrite(store: &Store, spec: &Spec) -> Result<(), StoreError> {
    mkdir_p(store, &spec.dir)?;
    let path = format!("{}/ow", spec.dir);
    let mut f = store.open(&path, OpenFlags::CREATE, 0o644)?;
    f.write_all(&vec![gen_byte(0); spec.size as usize])?;
    f.close()?;
    say(&format!("closed {path} {}", spec.size));
    let mut f = store.open(&path, write_flags(), 0)?;
    let bufs = [
        vec![gen_byte(0); spec.size as usize],
        vec![gen_byte(1); spec.size as usize],
    ];
    say("ready");
    let mut g = 1u64;
    loop {
        let n = f.pwrite(&bufs[(g % 2) as usize], 0)?;
        assert_eq!(n as u64, spec.size);
        g += 1;
    }
}

fn run_trunc(store: &Store, spec: &Spec) -> Result<(), StoreError> {
    mkdir_p(store, &spec.dir)?;
    let files = spec.count.max(1);
    let mut i = 0u64;
    loop {
        let j = i % files;
        let (path, seed) = (spec.file_path(j), spec.file_seed(j));
        let size = spec.file_size(i);
        let mut f = store.open(&path, OpenFlags::CREATE, 0o644)?;
        write_pattern(&mut f, seed, 0, size, spec.block_size(i))?;
        f.close()?;
        say(&format!("closed {path} {size}"));
        let mut f = store.open(&path, write_flags(), 0)?;
        let to = size / 2 + size % 3;
        f.set_len(to)?;
        f.close()?;
        say(&format!("shrunk {path} {to}"));
        i += 1;
    }
}

/// Hard links (links mode): files `f0..` are written once (`ready`); then, endlessly,
/// names of file j (`fj`, `lj_0..2`) are added with link, removed with unlink (never
/// the last one), moved with rename among themselves, and the file's xattr `user.n`
/// set, so that a SIGKILL lands inside every namespace change of a linked file.
fn run_links(store: &Store, spec: &Spec) -> Result<(), StoreError> {
    mkdir_p(store, &spec.dir)?;
    let files = spec.count.max(1);
    for j in 0..files {
        let mut f = store.open(&spec.file_path(j), OpenFlags::CREATE, 0o644)?;
        write_pattern(&mut f, spec.file_seed(j), 0, spec.size, spec.block_size(j))?;
        f.close()?;
    }
    say("ready");
    let names = |j: u64| -> Vec<String> {
        let mut v = vec![spec.file_path(j)];
        v.extend((0..3).map(|k| format!("{}/l{j}_{k}", spec.dir)));
        v
    };
    let mut i = 0u64;
    loop {
        let j = i % files;
        let all = names(j);
        let live: Vec<&String> = all.iter().filter(|p| store.stat(p).is_ok()).collect();
        let free: Vec<&String> = all.iter().filter(|p| store.stat(p).is_err()).collect();
        let pick = |v: &[&String], k: u64| -> Option<String> {
            (!v.is_empty()).then(|| v[(k % v.len() as u64) as usize].clone())
        };
        match (i / files) % 4 {
            0 | 1 => {
                if let (Some(a), Some(b)) = (pick(&live, i), pick(&free, i / 3)) {
                    store.link(&a, &b)?;
                }
            }
            2 if live.len() > 1 => store.unlink(&pick(&live, i / 5).unwrap_or_default())?,
            2 => {}
            _ => {
                if let (Some(a), Some(b)) = (pick(&live, i), pick(&all.iter().collect::<Vec<_>>(), i / 7)) {
                    store.rename(&a, &b)?;
                }
                if let Some(a) = pick(&live, i + 1) {
                    if store.stat(&a).is_ok() {
                        store.setxattr(&a, b"user.n", i.to_string().as_bytes(), Default::default())?;
                    }
                }
            }
        }
        i += 1;
    }
}

fn run_op(store: &Store, spec: &Spec) -> Result<(), StoreError> {
    match spec.op.as_str() {
        "create" => store.open(&spec.path, OpenFlags::CREATE, 0o644)?.close()?,
        "append" => {
            let mut f = store.open(&spec.path, write_flags(), 0)?;
            let off = f.size();
            f.pwrite(&pattern(spec.seed, off, spec.size as usize), off)?;
            f.close()?;
        }
        "unlink" => store.unlink(&spec.path)?,
        // Another process's chunks on top of the free stack, this one's below: the
        // append takes one of its own back (the allocation affinity swaps it up).
        "reuse" => {
            let other = Store::attach(&spec.options())?;
            let (mine, theirs) = (format!("{}.mine", spec.path), format!("{}.theirs", spec.path));
            for (s, p, n) in [(store, &mine, 2usize), (&other, &theirs, 16)] {
                let mut f = s.open(p, OpenFlags::CREATE, 0o644)?;
                f.write_all(&pattern(spec.seed, 0, n << 16))?;
                f.close()?;
            }
            store.unlink(&mine)?;
            other.unlink(&theirs)?;
            let mut f = store.open(&spec.path, write_flags(), 0)?;
            let off = f.size();
            f.pwrite(&pattern(spec.seed, off, spec.size as usize), off)?;
            f.close()?;
        }
        "symlink" => {
            store.symlink(spec.to.as_bytes(), &spec.path)?;
        }
        "rename" => store.rename(&spec.path, &spec.to)?,
        "link" => {
            store.link(&spec.path, &spec.to)?;
        }
        "setxattr" => store.setxattr(&spec.path, b"user.k", spec.to.as_bytes(), Default::default())?,
        "truncate" => store.truncate(&spec.path, spec.size)?,
        "rewrite" => {
            let mut f = store.open(&spec.path, OpenFlags::CREATE, 0)?;
            f.write_all(&pattern(spec.seed, 0, spec.size as usize))?;
            f.close()?;
        }
        "fork" => {
            let mut f = store.open(&spec.path, write_flags(), 0)?;
            // SAFETY: the child only adopts the handle, writes and kills itself.
            let pid = unsafe { libc::fork() };
            if pid < 0 {
                return Err(StoreError::Invalid("fork failed".into()));
            }
            if pid == 0 {
                let _ = f.adopt_after_fork();
                if spec.to == "write" {
                    let end = f.size();
                    let _ = f.pwrite(b"child", end);
                }
                // SAFETY: raising a signal on ourselves.
                unsafe { libc::raise(libc::SIGKILL) };
                unreachable!("SIGKILL returned");
            }
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            let off = f.size();
            f.pwrite(&pattern(spec.seed, off, spec.size as usize), off)?;
            f.close()?;
        }
        // Keep the file open for reading until killed.
        "hold" => {
            let _f = store.open(&spec.path, OpenFlags::READ, 0)?;
            say("opened");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        o => return Err(StoreError::Invalid(format!("unknown op {o}"))),
    }
    say("done");
    Ok(())
}

/// Parse arguments, run, and exit: 0 on success, 2 on an error (printed as `error ...`).
pub fn main_with_args<S: AsRef<str>>(args: &[S]) -> ! {
    let code = match Spec::parse(args) {
        Ok(spec) => match run(&spec) {
            Ok(()) => 0,
            Err(e) => {
                say(&format!("error {e} (errno {})", e.errno()));
                2
            }
        },
        Err(e) => {
            say(&format!("error {e}"));
            2
        }
    };
    std::process::exit(code)
}

#[allow(dead_code)] // unused when the tests include this file as a module
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    main_with_args(&args)
}
