// C++ containers through operator new and delete: a std::map from 64-bit
// keys to std::string values (16..255 bytes, past the short-string buffer,
// so each value is a block of its own), churned by random operations, and
// temporary strings built by concatenation.  Every allocation is a new-
// expression inside the standard library; with -fsized-deallocation its
// frees are sized deletes.  Each op picks a random key: an absent key is
// inserted; a present one has its value checked (first and last byte, and
// its length), then is erased or appended to.  Every 64 ops a temporary
// string of 8 numbers is built and dropped.  At the end every value left is
// checked in full.
//
//   cxxmap [--keys N] [--ops N]
//
// Prints one JSON line: ns_per_op, the counts of each kind of op, and
// "checked" (bench/fabench/verify.py).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

extern "C" const char *cxxmap_allocator(void); // cxxmap_detect.c

static uint64_t count_arg(const char *s)
{
    char *end;
    double v = std::strtod(s, &end);
    double mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1e3, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1e6, end++;
    if (*end != 0 || !(v > 0)) {
        std::fprintf(stderr, "cxxmap: bad count %s\n", s);
        std::exit(2);
    }
    return (uint64_t)(v * mult + 0.5);
}

static void fail(const char *what, uint64_t key)
{
    std::fprintf(stderr, "cxxmap: the value of key %llu: %s\n", (unsigned long long)key, what);
    std::exit(3);
}

static char first_of(uint64_t key) { return (char)('a' + key % 26); }
static char last_of(size_t len) { return (char)('A' + len % 26); }

int main(int argc, char **argv)
{
    uint64_t keys = 100000, ops = 2000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--keys") == 0)
            keys = count_arg(argv[i + 1]);
        else if (std::strcmp(argv[i], "--ops") == 0)
            ops = count_arg(argv[i + 1]);
        else {
            std::fprintf(stderr, "usage: cxxmap [--keys N] [--ops N]\n");
            return 2;
        }
    }
    if (argc % 2 != 1) {
        std::fprintf(stderr, "usage: cxxmap [--keys N] [--ops N]\n");
        return 2;
    }
    const char *allocator = cxxmap_allocator();
    std::map<uint64_t, std::string> m;
    uint64_t x = 0x243f6a8885a308d3ull, inserts = 0, erases = 0, appends = 0, looked = 0, temp_bytes = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (uint64_t op = 0; op < ops; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; // xorshift64
        uint64_t k = x % keys;
        auto it = m.find(k);
        if (it == m.end()) {
            size_t len = 16 + (x >> 24) % 240;
            std::string s(len, first_of(k));
            s.back() = last_of(len);
            m.emplace(k, std::move(s));
            inserts++;
        } else {
            std::string &s = it->second;
            if (s.size() < 16 || s.front() != first_of(k) || s.back() != last_of(s.size()))
                fail("its first or last byte, or its length, changed", k);
            looked++;
            if ((x >> 40) & 1) {
                m.erase(it);
                erases++;
            } else {
                s.back() = first_of(k);
                s.append(8, first_of(k));
                s.back() = last_of(s.size());
                appends++;
            }
        }
        if (op % 64 == 0) {
            std::string t;
            for (int i = 0; i < 8; i++)
                t += std::to_string(x + (uint64_t)i) + ",";
            temp_bytes += t.size();
        }
    }
    auto t1 = std::chrono::steady_clock::now();
    uint64_t full = 0, bytes = 0;
    for (const auto &kv : m) {
        const std::string &s = kv.second;
        if (s.size() < 16 || s.back() != last_of(s.size()))
            fail("its last byte, or its length, changed", kv.first);
        for (size_t i = 0; i + 1 < s.size(); i++)
            if (s[i] != first_of(kv.first))
                fail("a byte in its middle changed", kv.first);
        full++;
        bytes += s.size();
    }
    double elapsed = std::chrono::duration<double>(t1 - t0).count();
    std::printf("{\"bench\": \"cxxmap\", \"keys\": %llu, \"ops\": %llu, \"elapsed_s\": %.6f, \"ns_per_op\": %.3f, "
                "\"inserts\": %llu, \"erases\": %llu, \"appends\": %llu, \"live\": %llu, \"temp_bytes\": %llu, "
                "\"allocator\": \"%s\", \"checked\": {\"blocks\": %llu, \"full\": %llu, \"bytes\": %llu}}\n",
                (unsigned long long)keys, (unsigned long long)ops, elapsed, elapsed * 1e9 / (double)ops,
                (unsigned long long)inserts, (unsigned long long)erases, (unsigned long long)appends,
                (unsigned long long)m.size(), (unsigned long long)temp_bytes, allocator,
                (unsigned long long)(looked + full), (unsigned long long)full, (unsigned long long)bytes);
    return 0;
}
