//! Unit tests of the exported functions (each through its C signature).

use super::*;
use ckptfs_store::StoreError;
use std::ffi::CString;

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

fn last_error() -> String {
    // SAFETY: ckptfs_last_error never returns NULL and the string is NUL-terminated.
    unsafe { CStr::from_ptr(ckptfs_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// A store mounted at a unique prefix, unmounted and destroyed on drop.
struct TestMount {
    prefix: String,
    store: String,
}

impl TestMount {
    fn new(tag: &str, mem: u64, max_files: u32) -> Self {
        let store = format!("capi-ut-{tag}-{}", std::process::id());
        let _ = Store::destroy(&store);
        let name = c(&store);
        let opts = CkptfsOptions {
            size: std::mem::size_of::<CkptfsOptions>() as u32,
            flags: MOUNT_EXCL,
            store: name.as_ptr(),
            mem_size: mem,
            chunk_size: 64 << 10,
            spill_dir: std::ptr::null(),
            spill_size: 0,
            max_files,
        };
        let prefix = format!("/ut-{tag}");
        assert_eq!(
            // SAFETY: valid C strings and options.
            unsafe { ckptfs_mount(c(&prefix).as_ptr(), &opts) },
            0,
            "{}",
            last_error()
        );
        TestMount { prefix, store }
    }

    fn path(&self, rel: &str) -> CString {
        c(&format!("{}/{rel}", self.prefix))
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        // SAFETY: valid C strings.
        unsafe {
            ckptfs_unmount(c(&self.prefix).as_ptr());
            ckptfs_destroy_store(c(&self.store).as_ptr());
        }
    }
}

#[test]
fn panic_becomes_eio_with_message() {
    let r = call(|| panic!("boom in the store"));
    assert_eq!(r, -(libc::EIO as i64));
    assert!(last_error().contains("boom in the store"), "{}", last_error());
    let r = call(|| std::panic::panic_any(42u8));
    assert_eq!(r, -(libc::EIO as i64));
    assert!(last_error().contains("panic"));
}

#[test]
fn store_errors_map_through_store_errno() {
    let cases = [
        StoreError::NotFound("/x".into()),
        StoreError::Exists("/x".into()),
        StoreError::NotDir("/x".into()),
        StoreError::IsDir("/x".into()),
        StoreError::NotEmpty("/x".into()),
        StoreError::NameTooLong("x".into()),
        StoreError::NoSpace,
        StoreError::TooManyFiles(8),
        StoreError::BadHandle("not open for reading"),
        StoreError::Invalid("x".into()),
        StoreError::FileTooLarge,
        StoreError::BadSegment {
            path: "/dev/shm/ckptfs.x".into(),
            reason: "bad magic".into(),
        },
        StoreError::Io {
            context: "spill".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        },
    ];
    for e in cases {
        let (errno, msg) = (e.errno(), e.to_string());
        assert!(errno > 0);
        let r = call(move || Err(e.into()));
        assert_eq!(r, -(errno as i64), "{msg}");
        assert_eq!(last_error(), msg);
    }
    assert_eq!(call(|| Ok(7)), 7);
}

#[test]
fn last_error_is_per_thread() {
    assert_eq!(
        call(|| Err(CapiError::new(libc::EPERM, "only here"))),
        -(libc::EPERM as i64)
    );
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "");
    assert_eq!(last_error(), "only here");
    set_last_error("with\0nul");
    assert_eq!(last_error(), "withnul");
}

#[test]
fn null_pointers_are_efault() {
    let m = TestMount::new("null", 1 << 20, 16);
    let p = m.path("f");
    let efault = -libc::EFAULT;
    let mut st = CkptfsStat::default();
    // SAFETY: NULL is what is being tested; every other pointer is valid.
    unsafe {
        assert_eq!(ckptfs_mount(std::ptr::null(), std::ptr::null()), efault);
        assert_eq!(ckptfs_unmount(std::ptr::null()), efault);
        assert_eq!(ckptfs_destroy_store(std::ptr::null()), efault);
        assert_eq!(ckptfs_open(std::ptr::null(), libc::O_RDONLY, 0), efault);
        assert_eq!(ckptfs_stat(std::ptr::null(), &mut st), efault);
        assert_eq!(ckptfs_stat(p.as_ptr(), std::ptr::null_mut()), efault);
        assert_eq!(ckptfs_unlink(std::ptr::null()), efault);
        assert_eq!(ckptfs_rename(p.as_ptr(), std::ptr::null()), efault);
        assert_eq!(ckptfs_mkdir(std::ptr::null(), 0o755), efault);
        assert_eq!(ckptfs_rmdir(std::ptr::null()), efault);
        assert_eq!(ckptfs_opendir(std::ptr::null()), efault);
        assert_eq!(
            ckptfs_get_chunk_list(std::ptr::null(), std::ptr::null_mut(), 0),
            efault as isize
        );
        assert_eq!(
            ckptfs_get_spill_path(std::ptr::null(), std::ptr::null_mut(), 0),
            efault as isize
        );
        let fd = ckptfs_open(p.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o644);
        assert!(fd >= 0, "{}", last_error());
        assert_eq!(ckptfs_write(fd, std::ptr::null(), 3), efault as isize);
        assert_eq!(ckptfs_read(fd, std::ptr::null_mut(), 3), efault as isize);
        assert_eq!(ckptfs_pwrite(fd, std::ptr::null(), 3, 0), efault as isize);
        assert_eq!(ckptfs_pread(fd, std::ptr::null_mut(), 3, 0), efault as isize);
        assert_eq!(ckptfs_write(fd, std::ptr::null(), 0), 0);
        assert_eq!(ckptfs_read(fd, std::ptr::null_mut(), 0), 0);
        assert_eq!(ckptfs_fstat(fd, std::ptr::null_mut()), efault);
        assert_eq!(ckptfs_readdir(fd, std::ptr::null_mut()), efault);
        assert_eq!(
            ckptfs_get_chunk_list(p.as_ptr(), std::ptr::null_mut(), 4),
            efault as isize
        );
        assert_eq!(ckptfs_close(fd), 0);
    }
}

#[test]
fn roundtrip_bad_descriptors_and_offsets() {
    let m = TestMount::new("rt", 1 << 20, 16);
    let p = m.path("data");
    // SAFETY: valid pointers and lengths throughout.
    unsafe {
        let fd = ckptfs_open(p.as_ptr(), libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o600);
        assert!(fd >= 0);
        assert_eq!(ckptfs_write(fd, b"abcdef".as_ptr().cast(), 6), 6);
        assert_eq!(ckptfs_pwrite(fd, b"Z".as_ptr().cast(), 1, 100_000), 1);
        assert_eq!(ckptfs_lseek(fd, 0, libc::SEEK_END), 100_001);
        let mut buf = vec![0xffu8; 100_010];
        assert_eq!(ckptfs_pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0), 100_001);
        assert_eq!(&buf[..6], b"abcdef");
        assert!(buf[6..100_000].iter().all(|&b| b == 0));
        assert_eq!(buf[100_000], b'Z');
        assert_eq!(
            ckptfs_open(p.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, 0o600),
            -libc::EOPNOTSUPP
        );
        let einval = -(libc::EINVAL as isize);
        assert_eq!(ckptfs_pread(fd, buf.as_mut_ptr().cast(), 1, -1), einval);
        assert_eq!(ckptfs_pwrite(fd, buf.as_ptr().cast(), 1, i64::MIN), einval);
        assert_eq!(ckptfs_lseek(fd, -1, libc::SEEK_SET), -(libc::EINVAL as i64));
        assert_eq!(ckptfs_lseek(fd, 0, libc::SEEK_DATA), -(libc::EINVAL as i64));
        assert_eq!(ckptfs_ftruncate(fd, -5), -libc::EINVAL);
        let mut st = CkptfsStat::default();
        assert_eq!(ckptfs_fstat(fd, &mut st), 0);
        assert_eq!((st.size, st.kind, st.state), (100_001, KIND_FILE, STATE_WRITING));
        assert_eq!(st.mode, libc::S_IFREG | 0o600);
        assert_eq!(ckptfs_close(fd), 0);
        for bad in [fd, -1, i32::MIN, i32::MAX, MAX_DESCRIPTORS as i32] {
            assert_eq!(ckptfs_close(bad), -libc::EBADF);
            assert_eq!(
                ckptfs_read(bad, buf.as_mut_ptr().cast(), 1),
                -(libc::EBADF as isize)
            );
            assert_eq!(ckptfs_lseek(bad, 0, libc::SEEK_SET), -(libc::EBADF as i64));
            assert_eq!(ckptfs_fsync(bad), -libc::EBADF);
        }
        assert_eq!(ckptfs_stat(p.as_ptr(), &mut st), 0);
        assert_eq!(st.state, STATE_COMPLETE);

        // The data region holds the bytes the chunk list points at.
        let (mut base, mut size, mut cs) = (std::ptr::null_mut(), 0usize, 0usize);
        assert_eq!(
            ckptfs_get_data_region(p.as_ptr(), &mut base, &mut size, &mut cs),
            0
        );
        assert_eq!((size, cs), (1 << 20, 64 << 10));
        let n = ckptfs_get_chunk_list(p.as_ptr(), std::ptr::null_mut(), 0);
        assert_eq!(n, 2);
        let mut list = vec![CkptfsChunkMeta::default(); 2];
        assert_eq!(
            ckptfs_get_chunk_list(p.as_ptr(), list.as_mut_ptr(), 1),
            -(libc::ERANGE as isize)
        );
        assert_eq!(ckptfs_get_chunk_list(p.as_ptr(), list.as_mut_ptr(), 2), 2);
        assert_eq!((list[0].logical, list[1].logical), (0, 1));
        assert_eq!(list[0].location, CHUNK_MEMORY);
        let first = std::slice::from_raw_parts(base.cast::<u8>().add(list[0].offset as usize), 6);
        assert_eq!(first, b"abcdef");
        assert_eq!(list[0].crc_valid, 1);
        assert_eq!(
            list[0].crc32c,
            ckptfs_store::checksum::crc32c(std::slice::from_raw_parts(
                base.cast::<u8>().add(list[0].offset as usize),
                list[0].written as usize
            ))
        );
    }
}

#[test]
fn mount_options_are_checked() {
    let mut o = CkptfsOptions {
        size: 12,
        flags: 0,
        store: std::ptr::null(),
        mem_size: 0,
        chunk_size: 0,
        spill_dir: std::ptr::null(),
        spill_size: 0,
        max_files: 0,
    };
    let prefix = c("/ut-opts");
    // SAFETY: valid pointers.
    unsafe {
        assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::EINVAL);
        assert!(last_error().contains("CKPTFS_OPTIONS_INIT"));
        o.size = std::mem::size_of::<CkptfsOptions>() as u32;
        o.flags = 0x80;
        assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::EINVAL);
        o.flags = MOUNT_ATTACH | MOUNT_EXCL;
        assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::EINVAL);
        let none = c("capi-ut-never-created");
        o.flags = MOUNT_ATTACH;
        o.store = none.as_ptr();
        assert_eq!(ckptfs_mount(prefix.as_ptr(), &o), -libc::ENOENT);
        assert!(last_error().starts_with("mount /ut-opts: "), "{}", last_error());
        assert_eq!(ckptfs_unmount(prefix.as_ptr()), -libc::EINVAL);
    }
}

#[test]
fn descriptors_are_unique_across_threads() {
    let m = TestMount::new("thr", 1 << 20, 64);
    let p = m.path("shared");
    // SAFETY: valid C strings.
    let fd = unsafe { ckptfs_open(p.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644) };
    assert_eq!(ckptfs_close(fd), 0);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let p = p.clone();
            std::thread::spawn(move || {
                // SAFETY: valid C strings.
                let fds: Vec<i32> = (0..50)
                    .map(|_| unsafe { ckptfs_open(p.as_ptr(), libc::O_RDONLY, 0) })
                    .collect();
                fds
            })
        })
        .collect();
    let mut all: Vec<i32> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    assert!(all.iter().all(|&fd| fd >= 0));
    all.sort_unstable();
    let n = all.len();
    all.dedup();
    assert_eq!(all.len(), n, "a descriptor was handed out twice");
    for fd in all {
        assert_eq!(ckptfs_close(fd), 0);
    }
}

/// Spawned as a child by the test below: attach the store named in `CKPTFS_UT_HOLD`,
/// say so, and keep it attached until killed.
#[test]
fn store_holder_child() {
    let Ok(name) = std::env::var("CKPTFS_UT_HOLD") else {
        return;
    };
    let _s = Store::attach(&ckptfs_store::StoreOptions::named(&name)).unwrap();
    println!("holding");
    std::thread::sleep(std::time::Duration::from_secs(30));
}

/// Issue "Failures in sequence", item 7: `ckptfs_destroy_store` of a store another
/// process has attached is -EBUSY naming that process (before: 0, the store deleted
/// under it); once it is gone, destroy succeeds.
#[test]
fn destroy_store_of_a_store_another_process_uses_is_ebusy() {
    use std::io::BufRead;
    let m = TestMount::new("busy", 1 << 20, 16);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "ffi::tests::store_holder_child", "--nocapture", "-q"])
        .env("CKPTFS_UT_HOLD", &m.store)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("holding") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "holder child exited");
    }
    let name = c(&m.store);
    // SAFETY: valid C string.
    let rc = unsafe { ckptfs_destroy_store(name.as_ptr()) };
    let err = last_error();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(rc, -libc::EBUSY, "{err}");
    assert!(err.contains(&format!("pid {}", child.id())), "{err}");
    // SAFETY: valid C string.
    let rc = unsafe { ckptfs_destroy_store(name.as_ptr()) };
    assert_eq!(rc, 0, "{}", last_error());
}
