// A translation unit for the compiler rows of make bench (#54): the whole
// standard library through <bits/stdc++.h>, and containers, regex and
// streams instantiated for a few types, so that g++ -O2 -c builds, inlines
// and optimizes a large program's worth of templates.  Compiled only, never
// run; realprog checks the object file's symbols.
#include <bits/stdc++.h>

namespace bench_stdcpp {

struct Point {
    double x, y;
    bool operator<(const Point &o) const { return x < o.x || (x == o.x && y < o.y); }
    bool operator==(const Point &o) const { return x == o.x && y == o.y; }
};

struct PointHash {
    size_t operator()(const Point &p) const { return std::hash<double>()(p.x) * 31 + std::hash<double>()(p.y); }
};

template <class K, class V>
V total(const std::map<K, V> &m)
{
    V t{};
    for (const auto &kv : m)
        t += kv.second;
    return t;
}

std::string containers(int n)
{
    std::vector<int> v(n);
    std::iota(v.begin(), v.end(), 0);
    std::shuffle(v.begin(), v.end(), std::mt19937(n));
    std::sort(v.begin(), v.end(), std::greater<int>());
    std::map<std::string, long> words;
    std::unordered_map<Point, std::vector<std::string>, PointHash> at;
    std::set<Point> points;
    std::multimap<int, std::string> byLen;
    std::deque<std::pair<int, double>> dq;
    std::list<std::shared_ptr<std::string>> owned;
    std::priority_queue<std::tuple<int, std::string, double>> pq;
    for (int i = 0; i < n; i++) {
        std::string s = std::to_string(v[i]) + "-" + std::to_string(i * 7);
        words[s] += i;
        Point p{double(i % 17), double(v[i] % 13)};
        at[p].push_back(s);
        points.insert(p);
        byLen.emplace(int(s.size()), s);
        dq.emplace_back(i, i * 0.5);
        owned.push_back(std::make_shared<std::string>(s));
        pq.emplace(i % 5, s, i * 1.5);
    }
    std::ostringstream out;
    out << total(words) << ' ' << at.size() << ' ' << points.size() << ' ' << byLen.size() << ' '
        << dq.size() << ' ' << owned.size() << ' ' << std::get<1>(pq.top());
    return out.str();
}

std::vector<std::string> matches(const std::string &text)
{
    static const std::regex word(R"(([A-Za-z]+)-(\d{2,}))");
    static const std::regex mail(R"(([\w.]+)@([\w-]+\.)+[a-z]{2,6})", std::regex::icase);
    std::vector<std::string> found;
    for (std::sregex_iterator it(text.begin(), text.end(), word), end; it != end; ++it)
        found.push_back((*it)[1].str() + ":" + (*it)[2].str());
    std::smatch m;
    if (std::regex_search(text, m, mail))
        found.push_back(m.str());
    found.push_back(std::regex_replace(text, word, "$2-$1"));
    return found;
}

std::map<std::string, double> parse(std::istream &in)
{
    std::map<std::string, double> values;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string key;
        double value;
        if (fields >> key >> value)
            values[key] += value;
    }
    return values;
}

void report(std::ostream &out, const std::map<std::string, double> &values)
{
    out << std::fixed << std::setprecision(3);
    for (const auto &[key, value] : values)
        out << std::setw(20) << std::left << key << std::setw(12) << std::right << value << '\n';
    std::vector<std::pair<double, std::string>> ranked;
    for (const auto &[key, value] : values)
        ranked.emplace_back(value, key);
    std::stable_sort(ranked.begin(), ranked.end());
    std::for_each(ranked.rbegin(), ranked.rend(), [&](const auto &r) { out << r.second << ' '; });
    out << std::endl;
}

std::optional<std::variant<int, std::string, std::vector<double>>> pick(int i)
{
    if (i % 3 == 0)
        return std::nullopt;
    if (i % 3 == 1)
        return std::variant<int, std::string, std::vector<double>>(std::to_string(i));
    return std::variant<int, std::string, std::vector<double>>(std::vector<double>(i, 0.25));
}

} // namespace bench_stdcpp

// Entry points with C names, which realprog finds in the object file.
extern "C" int bench_stdcpp_run(int n)
{
    std::string c = bench_stdcpp::containers(n);
    std::vector<std::string> m = bench_stdcpp::matches(c + " abc-123 x@y.org");
    std::istringstream in(c);
    std::ostringstream out;
    bench_stdcpp::report(out, bench_stdcpp::parse(in));
    auto p = bench_stdcpp::pick(n);
    return int(c.size() + m.size() + out.str().size() + (p ? p->index() : 9));
}
