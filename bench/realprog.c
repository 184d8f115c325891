/*
 * realprog: a real program's run, timed, under whatever allocator was
 * preloaded, with its output checked.  run.py starts realprog with
 * LD_PRELOAD set; the program realprog starts inherits it, and so do the
 * programs that one starts in turn (gcc's cc1, as, collect2 and ld).
 *
 *   --program python: python3 (--exe, default python3) runs --script
 *     (bench/programs/dicts.py) with --n records: dicts and lists built,
 *     indexed, grouped, counted, deleted from, sorted, joined.  With
 *     PYTHONMALLOC=malloc, so that its small objects come from malloc rather
 *     than from its own arenas, and PYTHONHASHSEED=0, so that every run
 *     builds the same hash tables.
 *   --program sqlite: sqlite3 (--exe) on an in-memory database reads a
 *     script written here: --n rows inserted one INSERT at a time in one
 *     transaction, two indexes created, grouped and ranged queries, a third
 *     of the rows deleted, a last count.
 *   --program gcc: gcc (--exe) compiles and links, at -O2, a C file written
 *     here with --n functions (straight-line arithmetic, a branch, a short
 *     loop, a switch each) and a main that calls them all through a table.
 *   --program cc: the compiler --exe (gcc, g++) compiles the file --src at
 *     -O2 to an object file (-c), with --incdir's folders (separated by
 *     ':') as -I: a real translation unit (this project's
 *     src/09-diag/trace.c; bench/programs/stdcpp.cpp, the C++ standard
 *     library whole with containers, regex and streams instantiated).  Its
 *     output is nothing; the object file must be ELF and name --symbol.
 *     --n is 1.
 *
 * Timed: from just before the fork to the program's end (wait4); writing
 * its input before and checking its output after are not.  Every check
 * that fails exits 3 after saying what differed:
 *   - the program must exit 0 (a crash or an error is the allocator's doing:
 *     the same run passes under glibc);
 *   - its stdout must be, byte for byte, what this program computes itself
 *     from --n (for gcc, what the compiled program prints when run, after
 *     the timing);
 *   - the preload must have reached every process the run started: each
 *     runs with LD_DEBUG=files and LD_DEBUG_OUTPUT in a folder of its own
 *     here, where the dynamic loader writes a log per process, and each log
 *     must show the libraries of LD_PRELOAD loaded (a program linked
 *     statically writes none and is not counted; gcc's and cc's runs must
 *     include cc1 or cc1plus).
 * A program that cannot be started (not installed) exits 2.
 *
 * Output: elapsed_s (the timed part), the processes' names, and "checked":
 * outputs (1: the output compared), lines and bytes (of that output; for
 * cc, symbols, 1, and bytes, of the object file), items
 * (--n: records, rows, functions), processes (loader logs read) and, under
 * a preload, preloaded (the processes that had it: all of them).
 *
 * The input and output files live in a temporary folder, removed at the end
 * (also when a check fails).
 */
#include "bench_common.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char usage[] =
    "usage: realprog --program python|sqlite|gcc|cc --n N [--exe PATH] [--script PATH]\n"
    "                [--src PATH --symbol NAME [--incdir DIR[:DIR...]]]\n"
    "  --program  python: run --script (bench/programs/dicts.py) with N records;\n"
    "             sqlite: N rows inserted into an in-memory database, indexed, queried;\n"
    "             gcc: compile and link at -O2 a C file of N functions;\n"
    "             cc: compile --src at -O2 to an object file that must define --symbol\n"
    "  --n        the size of the work (at least 1; python at least 16, sqlite 97; cc 1)\n"
    "  --exe      the program to run (default python3, sqlite3, gcc, gcc)\n"
    "  --script   the python script (python only)\n"
    "  --src      the file to compile (cc only), --incdir its -I folders, --symbol a name\n"
    "             its object file must hold\n";

enum { PROG_PYTHON, PROG_SQLITE, PROG_GCC, PROG_CC };
static const char *const prog_names[] = {"python", "sqlite", "gcc", "cc"};
static const char *const default_exe[] = {"python3", "sqlite3", "gcc", "gcc"};

/* opt: the command line, over the defaults; cfg: its copy that the
 * measured code reads (see bench_options). */
static struct {
    int program;
    const char *exe;
    const char *script;
    const char *src, *incdir, *symbol;
    uint64_t n;
} opt = {.program = PROG_PYTHON}, cfg;

static const struct bench_opt opts[] = {
    CHOICE_OPT("program", &opt.program, "python|sqlite|gcc|cc", NULL), /* PROG_* */
    STRING_OPT("exe", &opt.exe),       STRING_OPT("script", &opt.script), STRING_OPT("src", &opt.src),
    STRING_OPT("incdir", &opt.incdir), STRING_OPT("symbol", &opt.symbol), COUNT_OPT("n", &opt.n),
    OPT_END};

static char dir[4096]; /* the temporary folder; "" once removed */

/* ---- the temporary folder */

static void path_in(char *buf, size_t size, const char *name)
{
    if ((size_t)snprintf(buf, size, "%s/%s", dir, name) >= size)
        die(2, "path too long: %s/%s", dir, name);
}

static void remove_dir(void)
{
    if (dir[0] == '\0')
        return;
    DIR *d = opendir(dir);
    if (d != NULL) {
        struct dirent *e;
        char p[4096 + 256];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
    dir[0] = '\0';
}

/* die() once the temporary folder is gone. */
#define FAIL(code, ...) (remove_dir(), die((code), __VA_ARGS__))
#define CHECK_FAIL(...) FAIL(3, "VALIDATION FAILED: " __VA_ARGS__)

/* ---- text buffers: the expected output, and what the program printed */

struct text {
    char *p;
    size_t len, cap;
};

static void text_init(struct text *t, size_t cap)
{
    t->p = bench_map(cap, 0);
    t->len = 0;
    t->cap = cap;
}

__attribute__((format(printf, 2, 3))) static void text_add(struct text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= t->cap - t->len)
        FAIL(2, "expected output over %zu bytes", t->cap);
    t->len += (size_t)n;
}

/* The whole file into t (at most its capacity: more fails the comparison). */
static void text_read(struct text *t, const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        FAIL(2, "cannot open %s: %s", path, strerror(errno));
    t->len = 0;
    for (;;) {
        ssize_t r = read(fd, t->p + t->len, t->cap - t->len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            FAIL(2, "cannot read %s: %s", path, strerror(errno));
        if (r == 0 || (t->len += (size_t)r) == t->cap)
            break;
    }
    close(fd);
}

static FILE *create_file(const char *name)
{
    char p[4096 + 64];
    path_in(p, sizeof p, name);
    FILE *f = fopen(p, "w");
    if (f == NULL)
        FAIL(2, "cannot create %s: %s", p, strerror(errno));
    return f;
}

static void close_file(FILE *f, const char *name)
{
    if (ferror(f) || fclose(f) != 0)
        FAIL(2, "cannot write %s/%s", dir, name);
}

/* The pseudo-random 32-bit number of item i (dicts.py's spread). */
static inline uint32_t spread(uint64_t i)
{
    return (uint32_t)(i * 2654435761u);
}

/* ---- python: what dicts.py prints for n records */

static void python_expected(struct text *e, uint64_t n)
{
    const uint64_t m = n / 16 + 1;
    uint64_t *count = bench_map(m * sizeof *count, 0), *score_sum = bench_map(m * sizeof *score_sum, 0);
    uint64_t tags[7] = {0}, by_score[1000] = {0}, text_len = n - 1, groups = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t x = spread(i);
        count[x % m]++;
        score_sum[x % m] += x % 1000;
        tags[x % 7] += x % 4;
        by_score[x % 1000]++;
        text_len += 12 + 1 + (x % 1000 >= 100 ? 3 : x % 1000 >= 10 ? 2 : 1); /* user%08x,score */
    }
    uint64_t acc = 0;
    for (uint64_t g = 0; g < m; g++)
        if (count[g] != 0) {
            groups++;
            acc = acc * 1000003 + g * 7 + count[g] * 31 + score_sum[g];
        }
    /* sorted by (score, -id): positions by score, ids from the highest down */
    uint32_t *order = bench_map(n * sizeof *order, 0);
    uint64_t start[1000], at = 0;
    for (int s = 0; s < 1000; s++) {
        start[s] = at;
        at += by_score[s];
    }
    for (uint64_t i = n; i-- > 0;)
        order[start[spread(i) % 1000]++] = (uint32_t)i;
    uint64_t oacc = 0;
    for (uint64_t pos = 0; pos < n; pos++)
        oacc = oacc * 31 + (pos + 1) * order[pos];

    text_add(e, "records %" PRIu64 " groups %" PRIu64 "\ngroups %" PRIu64 "\ntags", n, groups, acc);
    int any = 0;
    for (int t = 0; t < 7; t++)
        if (tags[t] != 0) {
            text_add(e, " t%d=%" PRIu64, t, tags[t]);
            any = 1;
        }
    text_add(e, "%s\nfound %" PRIu64 "\norder %" PRIu64 "\ntext %" PRIu64 "\n", any ? "" : " ",
             n - (n + 2) / 3, oacc, text_len);
    bench_unmap(count, m * sizeof *count);
    bench_unmap(score_sum, m * sizeof *score_sum);
    bench_unmap(order, n * sizeof *order);
}

/* ---- sqlite: the script, and what it prints for n rows */

static uint64_t row_group(uint64_t x) { return x % 97; }
static uint64_t row_val(uint64_t x) { return x * 7919 % 10007; }

static void sqlite_script(uint64_t n)
{
    FILE *f = create_file("bulk.sql");
    fputs("CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER NOT NULL, name TEXT NOT NULL, "
          "val INTEGER NOT NULL);\nBEGIN;\n", f);
    for (uint64_t x = 1; x <= n; x++)
        fprintf(f, "INSERT INTO t VALUES(%" PRIu64 ", %" PRIu64 ", 'n%08" PRIx32 "', %" PRIu64 ");\n", x,
                row_group(x), spread(x), row_val(x));
    fputs("COMMIT;\n"
          "CREATE INDEX t_grp ON t(grp, val);\n"
          "CREATE INDEX t_name ON t(name);\n"
          "SELECT count(*), sum(val), sum(length(name)) FROM t;\n"
          "SELECT grp, count(*), sum(val), min(val), max(val) FROM t GROUP BY grp ORDER BY grp;\n"
          "SELECT count(*) FROM t WHERE grp = 13 AND val BETWEEN 2000 AND 4000;\n"
          "SELECT count(*), min(id) FROM t WHERE name >= 'n8' AND name < 'n9';\n"
          "DELETE FROM t WHERE val % 3 = 0;\n"
          "SELECT count(*), sum(val) FROM t;\n", f);
    close_file(f, "bulk.sql");
}

static void sqlite_expected(struct text *e, uint64_t n)
{
    uint64_t count[97] = {0}, sum[97] = {0}, lo[97], hi[97] = {0};
    uint64_t total = 0, ranged = 0, eights = 0, first_eight = 0, kept = 0, kept_sum = 0;
    for (int g = 0; g < 97; g++)
        lo[g] = UINT64_MAX;
    for (uint64_t x = 1; x <= n; x++) {
        uint64_t g = row_group(x), v = row_val(x);
        count[g]++;
        sum[g] += v;
        lo[g] = v < lo[g] ? v : lo[g];
        hi[g] = v > hi[g] ? v : hi[g];
        total += v;
        ranged += g == 13 && v >= 2000 && v <= 4000;
        if (spread(x) >> 28 == 8 && eights++ == 0)
            first_eight = x;
        if (v % 3 != 0) {
            kept++;
            kept_sum += v;
        }
    }
    /* n >= 97: every group has rows.  A name is 'n' and 8 hex digits.  An
     * aggregate over no rows (min, sum) is NULL, printed as nothing. */
    text_add(e, "%" PRIu64 "|%" PRIu64 "|%" PRIu64 "\n", n, total, 9 * n);
    for (int g = 0; g < 97; g++)
        if (count[g] != 0)
            text_add(e, "%d|%" PRIu64 "|%" PRIu64 "|%" PRIu64 "|%" PRIu64 "\n", g, count[g], sum[g], lo[g], hi[g]);
    text_add(e, "%" PRIu64 "\n", ranged);
    if (eights != 0)
        text_add(e, "%" PRIu64 "|%" PRIu64 "\n", eights, first_eight);
    else
        text_add(e, "0|\n");
    if (kept != 0)
        text_add(e, "%" PRIu64 "|%" PRIu64 "\n", kept, kept_sum);
    else
        text_add(e, "0|\n");
}

/* ---- gcc: the C file, and what the compiled program prints */

/* Function i's constants (the same in the C file and in gcc_function). */
static uint64_t fn_mul(uint64_t i) { return (2 * i + 1) * 0x9e3779b1ull; }
static uint64_t fn_xor(uint64_t i) { return i * 0x9e3779b97f4a7c15ull; }
static unsigned fn_rshift(uint64_t i) { return 1 + (unsigned)(i % 31); }
static unsigned fn_lshift(uint64_t i) { return 1 + (unsigned)(i % 29); }
static unsigned fn_loops(uint64_t i) { return 2 + (unsigned)(i % 5); }

/* What function i of the C file computes. */
static uint64_t gcc_function(uint64_t i, uint64_t x)
{
    uint64_t y = x * fn_mul(i) + i;
    if (y & 1)
        y ^= y >> fn_rshift(i);
    else
        y += x << fn_lshift(i);
    for (unsigned k = 0; k < fn_loops(i); k++)
        y = y * 31 + k;
    switch ((unsigned)(y % 4)) {
    case 0: return y ^ fn_xor(i);
    case 1: return y + x * (3 * i + 1);
    case 2: return (y << 3) - x;
    default: return y + x;
    }
}

static void gcc_source(uint64_t n)
{
    FILE *f = create_file("big.c");
    fputs("#include <stdio.h>\n\n", f);
    for (uint64_t i = 0; i < n; i++)
        fprintf(f,
                "static unsigned long long f%" PRIu64 "(unsigned long long x)\n{\n"
                "    unsigned long long y = x * %" PRIu64 "ULL + %" PRIu64 "ULL;\n"
                "    if (y & 1)\n        y ^= y >> %u;\n    else\n        y += x << %u;\n"
                "    for (unsigned k = 0; k < %u; k++)\n        y = y * 31 + k;\n"
                "    switch ((unsigned)(y %% 4)) {\n"
                "    case 0: return y ^ %" PRIu64 "ULL;\n"
                "    case 1: return y + x * %" PRIu64 "ULL;\n"
                "    case 2: return (y << 3) - x;\n"
                "    default: return y + x;\n    }\n}\n\n",
                i, fn_mul(i), i, fn_rshift(i), fn_lshift(i), fn_loops(i), fn_xor(i), 3 * i + 1);
    fputs("static unsigned long long (*const table[])(unsigned long long) = {\n", f);
    for (uint64_t i = 0; i < n; i++)
        fprintf(f, "    f%" PRIu64 ",\n", i);
    fputs("};\n\nint main(void)\n{\n    unsigned long long acc = 1;\n"
          "    for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++)\n"
          "        acc = table[i](acc ^ i) + acc * 6364136223846793005ULL;\n"
          "    printf(\"%u %llu\\n\", (unsigned)(sizeof table / sizeof table[0]), acc);\n"
          "    return 0;\n}\n", f);
    close_file(f, "big.c");
}

static void gcc_expected(struct text *e, uint64_t n)
{
    uint64_t acc = 1;
    for (uint64_t i = 0; i < n; i++)
        acc = gcc_function(i, acc ^ i) + acc * 6364136223846793005ull;
    text_add(e, "%" PRIu64 " %" PRIu64 "\n", n, acc);
}

/* ---- running */

/* Runs argv with stdin from in (NULL: /dev/null), stdout to the folder's
 * file out, stderr inherited, and extra environment settings ("NAME=VALUE",
 * NULL-terminated); returns the seconds from the fork to its end.  A
 * program that cannot be executed exits 2 here; one that fails, 3. */
static double run(char *const argv[], const char *in, const char *out, const char *const env[])
{
    char out_path[4096 + 64];
    path_in(out_path, sizeof out_path, out);
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0)
        FAIL(2, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fi = open(in != NULL ? in : "/dev/null", O_RDONLY);
        int fo = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fi < 0 || fo < 0 || dup2(fi, 0) < 0 || dup2(fo, 1) < 0)
            die(126, "cannot set up the input and output of %s: %s", argv[0], strerror(errno));
        for (int i = 0; env != NULL && env[i] != NULL; i++)
            if (putenv((char *)env[i]) != 0)
                die(126, "cannot set %s", env[i]);
        execvp(argv[0], argv);
        die(127, "cannot execute %s: %s", argv[0], strerror(errno));
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            FAIL(2, "waitpid: %s", strerror(errno));
    double t = now_s() - t0;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        FAIL(2, "%s is not installed or cannot be run: this workload needs it", argv[0]);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 126)
        FAIL(2, "could not start %s", argv[0]);
    if (WIFSIGNALED(status))
        CHECK_FAIL("%s was killed by signal %d (%s)", argv[0], WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (WEXITSTATUS(status) != 0)
        CHECK_FAIL("%s exited with status %d", argv[0], WEXITSTATUS(status));
    return t;
}

/* The first line where got and want differ: its number (1-based) and the
 * offset where it starts. */
static size_t first_difference(const struct text *got, const struct text *want, size_t *start)
{
    size_t line = 1, i = 0;
    *start = 0;
    for (; i < got->len && i < want->len && got->p[i] == want->p[i]; i++)
        if (got->p[i] == '\n') {
            line++;
            *start = i + 1;
        }
    return line;
}

/* The length of the line at p, within len bytes and at most 100. */
static int line_length(const char *p, size_t len)
{
    size_t n = 0;
    while (n < len && n < 100 && p[n] != '\n')
        n++;
    return (int)n;
}

static void compare(const struct text *got, const struct text *want, const char *what)
{
    if (got->len == want->len && memcmp(got->p, want->p, got->len) == 0)
        return;
    size_t start, line = first_difference(got, want, &start);
    const char *g = got->p + start, *w = want->p + start;
    CHECK_FAIL("%s: output differs at line %zu: got '%.*s', expected '%.*s' (%zu bytes, expected %zu)", what,
               line, line_length(g, got->len - start), g, line_length(w, want->len - start), w, got->len,
               want->len);
}

/* The compiler's object file: ELF, and the name of symbol in it (its
 * symbol table's strings). */
static size_t check_object(const char *path, const char *symbol)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        CHECK_FAIL("the compiler wrote no object file %s: %s", path, strerror(errno));
    size_t size = (size_t)st.st_size;
    void *p = size >= 4 ? mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED || memcmp(p, "\177ELF", 4) != 0)
        CHECK_FAIL("%s is no ELF object file (%zu bytes)", path, size);
    bool named = memmem(p, size, symbol, strlen(symbol) + 1) != NULL; /* with its NUL */
    munmap(p, size);
    if (!named)
        CHECK_FAIL("the object file does not name %s", symbol);
    return size;
}

/* ---- the loader's logs: one per process (LD_DEBUG_OUTPUT=<dir>/ld.<pid>) */

struct loaded {
    unsigned processes, preloaded, cc1;
    char names[512];
};

/* The program a loader log is about: the first "needed by NAME [0]". */
static void log_program(const char *log, char *name, size_t size)
{
    const char *p = strstr(log, "needed by ");
    snprintf(name, size, "?");
    if (p == NULL)
        return;
    p += strlen("needed by ");
    const char *end = strstr(p, " [");
    const char *nl = strchr(p, '\n');
    if (end == NULL || (nl != NULL && nl < end))
        return;
    const char *base = p;
    for (const char *q = p; q < end; q++)
        if (*q == '/')
            base = q + 1;
    snprintf(name, size, "%.*s", (int)(end - base), base);
}

/* Whether the log shows every library of preload (space- or colon-separated)
 * loaded: "file=LIB [0];  generating link map". */
static int log_has_preload(const char *log, const char *preload)
{
    char lib[4096], needle[4096 + 64];
    for (const char *p = preload; *p != '\0';) {
        size_t n = strcspn(p, " :");
        if (n > 0 && n < sizeof lib) {
            snprintf(lib, sizeof lib, "%.*s", (int)n, p);
            snprintf(needle, sizeof needle, "file=%s [0];  generating link map", lib);
            if (strstr(log, needle) == NULL)
                return 0;
        }
        p += n;
        p += strspn(p, " :");
    }
    return 1;
}

/* s as a JSON string's contents (quotes and backslashes escaped, control
 * characters dropped). */
static void print_json_text(const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            putchar('\\');
        if ((unsigned char)*s >= 0x20)
            putchar(*s);
    }
}

static int by_value(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

#define MAX_LOGS 256

static void check_loader_logs(struct loaded *l, const char *preload, struct text *buf)
{
    /* the logs in the order of their process ids: mostly the order the
     * processes started in, for the names in the output */
    long pids[MAX_LOGS];
    size_t nlogs = 0;
    DIR *d = opendir(dir);
    if (d == NULL)
        FAIL(2, "cannot read %s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "ld.", 3) == 0 && nlogs < MAX_LOGS)
            pids[nlogs++] = strtol(e->d_name + 3, NULL, 10);
    closedir(d);
    qsort(pids, nlogs, sizeof *pids, by_value);

    memset(l, 0, sizeof *l);
    char path[4096 + 256], name[128];
    for (size_t i = 0; i < nlogs; i++) {
        snprintf(path, sizeof path, "%s/ld.%ld", dir, pids[i]);
        text_read(buf, path);
        buf->p[buf->len < buf->cap ? buf->len : buf->cap - 1] = '\0';
        log_program(buf->p, name, sizeof name);
        l->processes++;
        l->cc1 += strcmp(name, "cc1") == 0 || strcmp(name, "cc1plus") == 0;
        size_t used = strlen(l->names);
        snprintf(l->names + used, sizeof l->names - used, "%s%s", used ? " " : "", name);
        if (preload != NULL) {
            if (!log_has_preload(buf->p, preload))
                CHECK_FAIL("the preload (%s) did not reach %s (process %ld): its allocator would not be "
                           "the one measured", preload, name, pids[i]);
            l->preloaded++;
        }
    }
    if (l->processes == 0)
        CHECK_FAIL("no loader log: the program ran no dynamically linked process, so no preload could apply");
    if ((cfg.program == PROG_GCC || cfg.program == PROG_CC) && l->cc1 == 0)
        CHECK_FAIL("%s's run has no cc1 or cc1plus among its processes (%s)", cfg.exe, l->names);
}

int main(int argc, char **argv)
{
    bench_options("realprog", argc, argv, opts, usage, usage);
    cfg = opt;
    const uint64_t least[] = {16, 97, 1, 1};
    if (optind != argc || cfg.n < least[cfg.program] || cfg.n > 100000000 ||
        (cfg.program == PROG_PYTHON) != (cfg.script != NULL) ||
        (cfg.program == PROG_CC) != (cfg.src != NULL && cfg.symbol != NULL) ||
        (cfg.program == PROG_CC && cfg.n != 1) || (cfg.program != PROG_CC && cfg.incdir != NULL))
        bench_usage_error(usage);
    if (cfg.exe == NULL)
        cfg.exe = default_exe[cfg.program];
    const char *allocator = bench_detect_allocator();
    const char *preload = getenv("LD_PRELOAD");
    if (preload != NULL && preload[strspn(preload, " :")] == '\0')
        preload = NULL;

    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fa-realprog.XXXXXX", tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        die(2, "cannot create a temporary folder %s: %s", dir, strerror(errno));

    struct text want, got;
    text_init(&want, 1 << 16);
    text_init(&got, 1 << 20);
    char ld_output[4096 + 64], tmpdir_env[4096 + 16], in_path[4096 + 64];
    snprintf(ld_output, sizeof ld_output, "LD_DEBUG_OUTPUT=%s/ld", dir);
    snprintf(tmpdir_env, sizeof tmpdir_env, "TMPDIR=%s", dir);
    const char *env[] = {"LD_DEBUG=files", ld_output, tmpdir_env, "PYTHONMALLOC=malloc", "PYTHONHASHSEED=0", NULL};
    char count[32];
    snprintf(count, sizeof count, "%" PRIu64, cfg.n);
    double elapsed = 0;
    size_t object_bytes = 0; /* cc: the object file checked */

    switch (cfg.program) {
    case PROG_PYTHON: {
        python_expected(&want, cfg.n);
        char *args[] = {(char *)cfg.exe, "-s", "-S", (char *)cfg.script, count, NULL};
        elapsed = run(args, NULL, "out", env);
        break;
    }
    case PROG_SQLITE: {
        sqlite_script(cfg.n);
        sqlite_expected(&want, cfg.n);
        path_in(in_path, sizeof in_path, "bulk.sql");
        char *args[] = {(char *)cfg.exe, "-batch", "-bail", "-init", "/dev/null", ":memory:", NULL};
        elapsed = run(args, in_path, "out", env);
        break;
    }
    case PROG_GCC: {
        gcc_source(cfg.n);
        gcc_expected(&want, cfg.n);
        char src[4096 + 64], exe[4096 + 64];
        path_in(src, sizeof src, "big.c");
        path_in(exe, sizeof exe, "big");
        char *args[] = {(char *)cfg.exe, "-O2", "-o", exe, src, NULL};
        elapsed = run(args, NULL, "cc.out", env);
        char *prog[] = {exe, NULL};
        run(prog, NULL, "out", NULL); /* untimed: what the compiled program prints */
        break;
    }
    case PROG_CC: {
        char obj[4096 + 64];
        path_in(obj, sizeof obj, "unit.o");
        char *args[16] = {(char *)cfg.exe, "-O2"}, inc[8][4096 + 2];
        size_t na = 2, ni = 0;
        for (const char *d = cfg.incdir; d != NULL && *d != '\0' && ni < 8;) {
            size_t len = strcspn(d, ":");
            snprintf(inc[ni], sizeof inc[ni], "-I%.*s", (int)len, d);
            args[na++] = inc[ni++];
            d += len + (d[len] == ':');
        }
        args[na++] = "-c";
        args[na++] = (char *)cfg.src;
        args[na++] = "-o";
        args[na++] = obj;
        args[na] = NULL;
        elapsed = run(args, NULL, "out", env); /* prints nothing: want stays empty */
        object_bytes = check_object(obj, cfg.symbol);
        break;
    }
    }

    char out_path[4096 + 64];
    path_in(out_path, sizeof out_path, "out");
    text_read(&got, out_path);
    compare(&got, &want, cfg.exe);
    uint64_t lines = 0;
    for (size_t i = 0; i < got.len; i++)
        lines += got.p[i] == '\n';
    struct loaded l;
    check_loader_logs(&l, preload, &got); /* got is read again: its counts are taken */
    remove_dir();

    char preloaded[48] = "";
    if (preload != NULL)
        snprintf(preloaded, sizeof preloaded, ", \"preloaded\": %u", l.preloaded);
    printf("{\"bench\": \"realprog\", \"program\": \"%s\", \"exe\": \"", prog_names[cfg.program]);
    print_json_text(cfg.exe);
    printf("\", \"n\": %" PRIu64 ", \"elapsed_s\": %.6f, \"processes\": \"", cfg.n, elapsed);
    print_json_text(l.names);
    /* cc: its output (nothing) compared, and the one symbol found in the
     * object file of so many bytes. */
    char what[64];
    if (cfg.program == PROG_CC)
        snprintf(what, sizeof what, "\"symbols\": 1, \"bytes\": %zu", object_bytes);
    else
        snprintf(what, sizeof what, "\"lines\": %" PRIu64 ", \"bytes\": %zu", lines, want.len);
    printf("\", \"allocator\": \"%s\", \"checked\": {\"outputs\": 1, %s, \"items\": %" PRIu64
           ", \"processes\": %u%s}}\n",
           allocator, what, cfg.n, l.processes, preloaded);
    return 0;
}
