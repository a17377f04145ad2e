// C++ iostreams: std::ofstream / std::ifstream call fileno() and then write()/read().
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

int main(int argc, char **argv) {
    std::string r = argv[1];
    {
        std::ofstream out(r + "/cpp.txt");
        for (int i = 0; i < 1000; i++) out << "line " << i << '\n';
        std::vector<char> big(3 << 20, 'q');
        out.write(big.data(), big.size());
        out << "\nend\n";
    }
    {
        std::ofstream app(r + "/cpp.txt", std::ios::app);
        app << "appended\n";
    }
    std::ifstream in(r + "/cpp.txt");
    std::string line;
    long lines = 0, bytes = 0;
    std::string last;
    while (std::getline(in, line)) { lines++; bytes += line.size() + 1; last = line; }
    std::cout << "lines=" << lines << " bytes=" << bytes << " last=" << last << "\n";
    std::ifstream bin(r + "/cpp.txt", std::ios::binary);
    bin.seekg(0, std::ios::end);
    std::cout << "tellg=" << bin.tellg() << "\n";
    bin.seekg(5);
    char c[4] = {0};
    bin.read(c, 3);
    std::cout << "at5=" << c << "\n";
    std::fstream rw(r + "/cpp.txt", std::ios::in | std::ios::out);
    rw.seekp(0);
    rw << "LINE";
    rw.close();
    std::ifstream again(r + "/cpp.txt");
    std::getline(again, line);
    std::cout << "first=" << line << "\n";
    return 0;
}
