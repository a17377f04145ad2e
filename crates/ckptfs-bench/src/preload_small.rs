//! `ckptfs bench preload`, small-file rows: one process (a C program making the calls an
//! application makes) creates, writes (one write) and closes `--small-files` files of
//! `--small-size` bytes in one directory, stats them, reads them back (open, read, close,
//! content checked) and removes them: through the shim in the store, and without the
//! shim on /dev/shm (the tmpfs baseline), alternating in each repetition. Rates are files
//! per second (`files_per_s`, from the median time); the store's memory taken by the files
//! is read from the store between the create and stat phases (`store_bytes_used`).

use crate::report::{median, Measurement};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

/// `small ROOT N SIZE`: mkdir ROOT; create+write+close ROOT/fI (I = 0..N-1, SIZE bytes
/// each, the first 8 bytes the index); print "created" and wait for a byte on stdin; stat
/// each; open+read+close each, comparing; unlink each; rmdir ROOT. Prints "times C S R U"
/// (seconds of the four phases). Any failure: a message and exit 1.
pub(super) const SMALL_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static void die(const char *w, const char *p) { fprintf(stderr, "%s %s: %s\n", w, p, strerror(errno)); exit(1); }
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    const char *root = argv[1];
    long n = atol(argv[2]);
    size_t size = atoll(argv[3]);
    char p[4096], c;
    unsigned char *data = malloc(size + 8), *got = malloc(size + 8);
    for (size_t k = 0; k < size + 8; k++) data[k] = (unsigned char)(k * 7 + 1);
    if (mkdir(root, 0755)) die("mkdir", root);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%ld", root, i);
        memcpy(data, &i, size < 8 ? size : 8);
        int fd = open(p, O_CREAT | O_EXCL | O_WRONLY, 0644);
        if (fd < 0) die("open", p);
        if (write(fd, data, size) != (ssize_t)size) die("write", p);
        if (close(fd)) die("close", p);
    }
    double t1 = now();
    printf("created\n");
    fflush(stdout);
    if (read(0, &c, 1) != 1) return 3;
    struct stat st;
    double t2 = now();
    for (long i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%ld", root, i);
        if (stat(p, &st)) die("stat", p);
        if (st.st_size != (off_t)size) { fprintf(stderr, "stat %s: size %lld\n", p, (long long)st.st_size); return 1; }
    }
    double t3 = now();
    for (long i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%ld", root, i);
        memcpy(data, &i, size < 8 ? size : 8);
        int fd = open(p, O_RDONLY);
        if (fd < 0) die("open", p);
        if (read(fd, got, size + 1) != (ssize_t)size || memcmp(got, data, size)) {
            fprintf(stderr, "read %s: not what was written\n", p);
            return 1;
        }
        if (close(fd)) die("close", p);
    }
    double t4 = now();
    for (long i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%ld", root, i);
        if (unlink(p)) die("unlink", p);
    }
    double t5 = now();
    if (rmdir(root)) die("rmdir", root);
    printf("times %.9f %.9f %.9f %.9f\n", t1 - t0, t3 - t2, t4 - t3, t5 - t4);
    return 0;
}
"#;

/// Seconds of the four phases of one run.
#[derive(Clone, Copy)]
struct Phases([f64; 4]);

const PHASES: [&str; 4] = ["create+write+close", "stat", "open+read+close", "unlink"];

/// Run the worker once on `root`; `at_created` runs while it waits between the create and
/// stat phases.
fn run_once(
    worker: &Path,
    root: &str,
    files: usize,
    size: u64,
    env: &[(String, String)],
    at_created: &mut dyn FnMut() -> Result<()>,
) -> Result<Phases> {
    let mut child = Command::new(worker)
        .args([root, &files.to_string(), &size.to_string()])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the small-file worker")?;
    let mut out = BufReader::new(child.stdout.take().context("worker stdout")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    let measured = if line.trim() == "created" {
        at_created()
    } else {
        Ok(())
    };
    // Always let the worker go on (and finish removing its files), even if that failed.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"g");
    }
    let mut last = String::new();
    out.read_line(&mut last)?;
    let st = child.wait()?;
    if !st.success() || line.trim() != "created" {
        bail!("small-file worker on {root}: {st} (output {line:?} {last:?})");
    }
    measured?;
    let v: Vec<f64> = last
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("small-file worker output {last:?}"))?;
    let p: [f64; 4] = v
        .try_into()
        .map_err(|v| anyhow::anyhow!("small-file worker printed {v:?}"))?;
    Ok(Phases(p))
}

/// The store memory a new file set may need: its data in runs of at least 4 KiB and one
/// inode's worth (8 KiB) per file, so that the file count derived from memory covers them.
pub(super) fn store_room(files: usize, size: u64) -> u64 {
    files as u64 * (size.next_power_of_two().max(4096) + ckptfs_settings::BYTES_PER_FILE)
}

/// Add the small-file rows to `results` and a note comparing the rates.
#[allow(clippy::too_many_arguments)]
pub(super) fn small_rows(
    worker: &Path,
    store: &str,
    shim_env: &[(String, String)],
    shm: &Path,
    files: usize,
    size: u64,
    reps: usize,
    results: &mut Vec<Measurement>,
    notes: &mut Vec<String>,
) -> Result<()> {
    let st = ckptfs_store::Store::attach(&ckptfs_store::StoreOptions::named(store))?;
    let (mut ck, mut tm) = (Vec::new(), Vec::new());
    let mut used = 0u64;
    for rep in 0..reps {
        let before = st.info();
        let mut measure = || {
            let i = st.info();
            used = (i.mem_free_chunks.abs_diff(before.mem_free_chunks) as u64) * i.chunk_size;
            anyhow::ensure!(
                i.files >= before.files + files as u32,
                "the store holds {} files after the create phase, expected {} more than {}",
                i.files,
                files,
                before.files
            );
            Ok(())
        };
        let root = format!("/ckpt/small{rep}");
        ck.push(run_once(worker, &root, files, size, shim_env, &mut measure)?);
        let root = shm.join(format!("small{rep}")).display().to_string();
        tm.push(run_once(worker, &root, files, size, &[], &mut || Ok(()))?);
    }
    let bytes = files as u64 * size;
    let mut ratios = Vec::new();
    for (k, phase) in PHASES.iter().enumerate() {
        let c: Vec<f64> = ck.iter().map(|p: &Phases| p.0[k]).collect();
        let t: Vec<f64> = tm.iter().map(|p: &Phases| p.0[k]).collect();
        let (rc, rt) = (files as f64 / median(&c), files as f64 / median(&t));
        let mut m = Measurement::new(format!("s {phase}, shim"), 1, bytes, c)
            .with("files", files)
            .with("file_size", size)
            .with("files_per_s", rc.round())
            .with("vs /dev/shm", rc / rt);
        if k == 0 {
            m = m.with("store_bytes_used", used);
        }
        results.push(m);
        results.push(
            Measurement::new(format!("s {phase} /dev/shm"), 1, bytes, t)
                .with("files", files)
                .with("file_size", size)
                .with("files_per_s", rt.round()),
        );
        ratios.push(format!("{phase} {rc:.0}/s ({:.2}x /dev/shm)", rc / rt));
    }
    notes.push(format!(
        "small files through the shim ({files} of {size} B, one process): {}; they took {:.1} MiB of the store for {:.1} MiB of data",
        ratios.join(", "),
        used as f64 / (1 << 20) as f64,
        bytes as f64 / (1 << 20) as f64
    ));
    Ok(())
}
