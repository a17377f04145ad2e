// std::filesystem: create_directories, remove_all (libstdc++ calls remove() per entry),
// remove, exists, directory_iterator.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
namespace fs = std::filesystem;

int main(int, char **argv) {
    fs::path r = argv[1];
    fs::create_directories(r / "run/a/b");
    for (auto d : {"run", "run/a", "run/a/b"})
        for (int i = 0; i < 3; i++) std::ofstream(r / d / ("f" + std::to_string(i))) << d << i << "\n";
    fs::create_directories(r / "keep");
    std::ofstream(r / "keep/k") << "k\n";
    std::set<std::string> names;
    for (auto &e : fs::recursive_directory_iterator(r)) names.insert(fs::relative(e.path(), r).string());
    for (auto &n : names) std::cout << n << "\n";
    std::cout << "removed " << fs::remove_all(r / "run") << " exists " << fs::exists(r / "run") << "\n";
    std::cout << "remove file " << fs::remove(r / "keep/k") << " again " << fs::remove(r / "keep/k") << "\n";
    std::error_code ec;
    fs::remove(r / "nope/x", ec);
    std::cout << "missing parent: " << ec.value() << "\n";
    std::cout << "remove empty dir " << fs::remove(r / "keep") << " exists " << fs::exists(r / "keep") << "\n";
    return 0;
}
