// The quick run's stand-in for stdcpp.cpp (make bench QUICK=1): the same
// compiler row, proved to run under every allocator and to name its
// symbol, on a unit that g++ compiles in a fraction of the time, so that
// the smoke run stays within its minute.
#include <map>
#include <string>
#include <vector>

extern "C" size_t bench_stdcpp_run(int n)
{
    std::map<std::string, std::vector<int>> m;
    for (int i = 0; i < n; i++)
        m[std::to_string(i % 7)].push_back(i);
    std::string out;
    for (const auto &kv : m)
        out += kv.first + ":" + std::to_string(kv.second.size()) + " ";
    return out.size();
}
