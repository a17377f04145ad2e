// capi_test.cpp - the C ABI from C++: header compatibility, RAII use and threads.
//
// Several threads write and read back their own files through one shared descriptor
// table while others list the directory and open/close descriptors; one descriptor is
// closed while another thread is reading it (it must see -EBADF, never crash).
// Prints "N passed, M failed" and exits non-zero on failure.
#include "ckptfs.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

std::atomic<int> passed{0}, failed{0};

void check(bool ok, const char *what, int line) {
    if (ok) {
        ++passed;
    } else {
        ++failed;
        std::fprintf(stderr, "FAIL capi_test.cpp:%d: %s  [last error: %s]\n", line, what,
                     ckptfs_last_error());
    }
}
#define CHECK(c) check((c), #c, __LINE__)

// A ckptfs descriptor closed on scope exit.
class File {
  public:
    File(const std::string &path, int flags, mode_t mode = 0644)
        : fd_(ckptfs_open(path.c_str(), flags, mode)) {}
    ~File() {
        if (fd_ >= 0)
            ckptfs_close(fd_);
    }
    File(const File &) = delete;
    File &operator=(const File &) = delete;
    int fd() const { return fd_; }
    bool ok() const { return fd_ >= 0; }

  private:
    int fd_;
};

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
    std::vector<unsigned char> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = static_cast<unsigned char>(i * 131 + seed);
    return v;
}

bool writer(const std::string &path, unsigned seed) {
    const auto data = pattern(3 << 20, seed);
    {
        File f(path, O_CREAT | O_WRONLY | O_TRUNC);
        if (!f.ok())
            return false;
        // Alternate write and pwrite in odd-sized pieces.
        size_t off = 0, piece = 4093 + seed * 7;
        bool alt = false;
        while (off < data.size()) {
            size_t n = std::min(piece, data.size() - off);
            ssize_t w = alt ? ckptfs_pwrite(f.fd(), &data[off], n, static_cast<int64_t>(off))
                            : ckptfs_write(f.fd(), &data[off], n);
            if (w != static_cast<ssize_t>(n))
                return false;
            off += n;
            if (alt && ckptfs_lseek(f.fd(), static_cast<int64_t>(off), SEEK_SET) != static_cast<int64_t>(off))
                return false;
            alt = !alt;
        }
        if (ckptfs_fsync(f.fd()) != 0)
            return false;
    }
    std::vector<unsigned char> back(data.size() + 1);
    File r(path, O_RDONLY);
    size_t got = 0;
    ssize_t n;
    while ((n = ckptfs_read(r.fd(), &back[got], back.size() - got)) > 0)
        got += static_cast<size_t>(n);
    struct ckptfs_stat st;
    return got == data.size() && std::memcmp(back.data(), data.data(), data.size()) == 0 &&
           ckptfs_fstat(r.fd(), &st) == 0 && st.size == data.size() &&
           st.state == CKPTFS_STATE_COMPLETE;
}

} // namespace

int main() {
    const std::string store = "capi-cpp-" + std::to_string(getpid());
    ckptfs_options o = CKPTFS_OPTIONS_INIT;
    o.store = store.c_str();
    o.mem_size = 64 << 20;
    o.chunk_size = 256 << 10;
    o.max_files = 128;
    o.flags = CKPTFS_MOUNT_EXCL;
    CHECK(ckptfs_mount("/cpp", &o) == 0);
    CHECK(ckptfs_mkdir("/cpp/run", 0755) == 0);

    // Writers, a lister and an open/close churner at the same time.
    const int nwriters = 4;
    std::vector<std::thread> threads;
    std::atomic<int> ok_writers{0};
    std::atomic<bool> stop{false};
    for (int i = 0; i < nwriters; i++)
        threads.emplace_back([i, &ok_writers] {
            if (writer("/cpp/run/rank" + std::to_string(i), static_cast<unsigned>(i + 1)))
                ++ok_writers;
        });
    std::atomic<int> listings{0}, churn_errors{0};
    // Both loops run at least once: on a busy machine the writers can finish
    // before either thread is first scheduled.
    std::thread lister([&] {
        do {
            int d = ckptfs_opendir("/cpp/run");
            ckptfs_dirent e;
            while (d >= 0 && ckptfs_readdir(d, &e) == 1) {
            }
            if (d >= 0 && ckptfs_close(d) == 0)
                ++listings;
        } while (!stop);
    });
    std::thread churner([&] {
        do {
            int fd = ckptfs_open("/cpp/churn", O_CREAT | O_RDWR, 0600);
            if (fd < 0 || ckptfs_write(fd, "x", 1) != 1 || ckptfs_close(fd) != 0)
                ++churn_errors;
        } while (!stop);
    });
    for (auto &t : threads)
        t.join();
    stop = true;
    lister.join();
    churner.join();
    CHECK(ok_writers == nwriters);
    CHECK(listings > 0);
    CHECK(churn_errors == 0);

    // Close a descriptor while another thread reads it: the reader ends with -EBADF.
    {
        int fd = ckptfs_open("/cpp/run/rank0", O_RDONLY, 0);
        CHECK(fd >= 0);
        std::atomic<long> last{1};
        std::atomic<bool> started{false};
        std::thread reader([&] {
            char buf[4096];
            long r;
            do {
                r = ckptfs_pread(fd, buf, sizeof buf, 0);
                started = true;
            } while (r > 0);
            last = r;
        });
        while (!started)
            std::this_thread::yield();
        CHECK(ckptfs_close(fd) == 0);
        reader.join();
        CHECK(last == -EBADF);
    }

    // The struct tag and function name coexist, as with POSIX stat.
    struct ckptfs_stat st;
    CHECK(ckptfs_stat("/cpp/run/rank1", &st) == 0 && st.size == (3u << 20));
    CHECK(ckptfs_stat("/cpp/run/none", &st) == -ENOENT);
    CHECK(std::string(ckptfs_version()) == CKPTFS_VERSION);

    for (int i = 0; i < nwriters; i++)
        CHECK(ckptfs_unlink(("/cpp/run/rank" + std::to_string(i)).c_str()) == 0);
    CHECK(ckptfs_unlink("/cpp/churn") == 0);
    CHECK(ckptfs_rmdir("/cpp/run") == 0);
    CHECK(ckptfs_unmount("/cpp") == 0);
    CHECK(ckptfs_destroy_store(store.c_str()) == 0);

    std::printf("capi_test_cpp: %d passed, %d failed\n", passed.load(), failed.load());
    return failed ? 1 : 0;
}
