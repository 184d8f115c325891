/* The options table and its parsers.  Nothing here allocates: the
 * environment is read at start-up, before the allocator can serve. */
#include "00-base/options.h"
#include "00-base/diag.h"
#include "00-base/mem.h"

#include <errno.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <strings.h>

struct fa__options fa__opt;

#define FIELD(f) offsetof(struct fa__options, f)
#define SIZE_LIMIT ((long long)1 << 62) /* far beyond any machine, and no overflow */

const struct fa__option_def fa__option_defs[] = {
    /* The age of a free span is kept in 32-bit milliseconds and compared by
     * unsigned difference, so a delay must stay below 2^31 ms. */
    {"purge_delay_ms", "FASTALLOC_PURGE_DELAY_MS", FA_OPT_LONG, -1, INT32_MAX, {0}, 1000, "1000",
     "free pages go back to the OS after this many ms; `0` at once, `-1` never (when use "
     "falls to half its recent peak, frees purge at once)",
     FIELD(purge_delay_ms), false},
    {"background", "FASTALLOC_BACKGROUND", FA_OPT_BOOL, 0, 1, {0}, 0, "0",
     "`1`: a background thread does the timed purging and scavenging instead of the "
     "allocation slow paths",
     FIELD(background), false},
    {"thread_cache_max", "FASTALLOC_THREAD_CACHE_MAX", FA_OPT_SIZE, 0, SIZE_LIMIT, {0},
     (long long)64 << 20, "64M",
     "bound on all thread caches together (`K`, `M`, `G` suffixes)",
     FIELD(thread_cache_max), false},
    {"thread_cache_bytes", "FASTALLOC_THREAD_CACHE_BYTES", FA_OPT_SIZE, 0, SIZE_LIMIT, {0},
     (long long)2 << 20, "2M",
     "bound on one thread's cache",
     FIELD(thread_cache_bytes), false},
    {"limit", "FASTALLOC_LIMIT", FA_OPT_SIZE, 0, SIZE_LIMIT, {0}, 0, "none",
     "bytes in use or resident (`K`, `M`, `G` suffixes; `0` none); past it an allocation "
     "purges, then fails with `ENOMEM`",
     FIELD(limit), false},
    {"hugepages", "FASTALLOC_HUGEPAGES", FA_OPT_BOOL, 0, 1, {0}, 0, "0",
     "`1`: ask for transparent huge pages; purging keeps whole huge pages",
     FIELD(hugepages), false},
    {"purge_madv_free", "FASTALLOC_PURGE", FA_OPT_WORD, 0, 1, {"dontneed", "free"}, 0, "dontneed",
     "`free`: purge with `MADV_FREE` (RSS falls only under memory pressure); `dontneed`: "
     "`MADV_DONTNEED`, RSS falls at once",
     FIELD(purge_madv_free), false},
    /* Debug mode changes where every block comes from, so it is chosen
     * before the first allocation and never after. */
    {.name = "debug", .env = "FASTALLOC_DEBUG", .type = FA_OPT_BOOL, .min = 0, .max = 1,
     .value = 0, .dflt = "0",
     .doc = "`1`: debug mode: blocks filled, guarded by a canary, held in a quarantine "
            "after free, and traced; errors reported with backtraces; a leak report at exit",
     .off = FIELD(debug), .startup_only = true},
    {.name = "debug_quarantine", .env = "FASTALLOC_DEBUG_QUARANTINE", .type = FA_OPT_SIZE,
     .min = 0, .max = SIZE_LIMIT, .value = (long long)16 << 20, .dflt = "16M",
     .doc = "debug mode: bytes of freed blocks held back before reuse, checked for writes "
            "when they leave",
     .off = FIELD(debug_quarantine)},
    {.name = "debug_continue", .env = "FASTALLOC_DEBUG_CONTINUE", .type = FA_OPT_BOOL, .min = 0,
     .max = 1, .value = 0, .dflt = "0",
     .doc = "debug mode: `1` reports an error and goes on; `0` reports it and aborts",
     .off = FIELD(debug_continue)},
    /* The hardened build is a library of its own (docs/SECURITY.md): the
     * variable chooses it in fastalloc-run, and the library checks that it
     * is the one asked for. */
    {.name = "secure", .env = "FASTALLOC_SECURE", .type = FA_OPT_BOOL, .min = 0, .max = 1,
     .value = 0, .dflt = "0",
     .doc = "`1`: the hardened build (docs/SECURITY.md): `fastalloc-run` preloads `libfastalloc-secure.so`; the default library says at start-up that it is not that build",
     .off = FIELD(secure), .startup_only = true},
    /* Zeroing every freed block is the hardened build's costliest part on
     * the loops that reuse blocks, and mimalloc's and snmalloc's secure
     * modes do not zero (docs/DECISIONS.md, #26): an option of that build,
     * off unless asked for. */
    {.name = "secure_zero", .env = "FASTALLOC_SECURE_ZERO", .type = FA_OPT_BOOL, .min = 0,
     .max = 1, .value = 0, .dflt = "0",
     .doc = "hardened build: `1` zeroes each freed block and checks at its reuse that its "
            "ends are still zero (docs/SECURITY.md); the default library ignores it",
     .off = FIELD(secure_zero), .startup_only = true},
    /* Exact-size tails were most of the hardened build's time (1.19x of
     * its 1.39x on make bench, #26): the team took them out of its
     * default set, into an option of that build (#41, SECURITY.md). */
    {.name = "secure_tails", .env = "FASTALLOC_SECURE_TAILS", .type = FA_OPT_BOOL, .min = 0,
     .max = 1, .value = 0, .dflt = "0",
     .doc = "hardened build: `1` gives every small block a tail that records the bytes asked "
            "for and a canary past them, checked at each free and bounding the copy functions "
            "to those bytes (docs/SECURITY.md); the default library ignores it",
     .off = FIELD(secure_tails), .startup_only = true},
    /* A random order cost about 1.05x of the hardened build's time on
     * make bench, 1.4x to 1.6x where a program walks its blocks in the
     * order it got them, and catches none of the errors its default set is
     * measured by: an option of that build, off unless asked for (#41,
     * SECURITY.md). */
    {.name = "secure_shuffle", .env = "FASTALLOC_SECURE_SHUFFLE", .type = FA_OPT_BOOL, .min = 0,
     .max = 1, .value = 0, .dflt = "0",
     .doc = "hardened build: `1` hands out each small span's blocks in a random order, drawn "
            "once as they are cut (docs/SECURITY.md); the default library ignores it",
     .off = FIELD(secure_shuffle), .startup_only = true},
    {.name = "stats", .env = "FASTALLOC_STATS", .type = FA_OPT_TEXT, .min = 0, .max = 1,
     .words = {"1", "json:"}, .value = 0, .dflt = "0",
     .doc = "`1`: print statistics to stderr at exit; `json:PATH`: write them to PATH as JSON "
            "(`%p` in PATH: the process id, so that each process of a pipeline writes its own)",
     .off = FIELD(stats), .startup_only = true},
    {.name = "trace", .env = "FASTALLOC_TRACE", .type = FA_OPT_TEXT, .min = 0, .max = 1,
     .words = {NULL, ""}, .value = 0, .dflt = "0",
     .doc = "a path: record every malloc-family call to this file (`fastalloc-trace` reads it; "
            "a forked or exec'd child writes PATH.PID)",
     .off = FIELD(trace), .startup_only = true},
    /* The profile's blocks are sampled from the first allocation on, and
     * its interval is what pprof scales by: both are fixed at start-up. */
    {.name = "profile", .env = "FASTALLOC_PROFILE", .type = FA_OPT_TEXT, .min = 0, .max = 1,
     .words = {NULL, ""}, .value = 0, .dflt = "0",
     .doc = "a path: keep a sampled heap profile and write the live heap to it at exit, in the "
            "form `google-pprof` reads (`%p` in PATH: the process id; a forked child writes PATH.PID)",
     .off = FIELD(profile), .startup_only = true},
    /* tcmalloc's and jemalloc's default (512 KiB): a few hundred samples
     * for a heap of 100 MiB, and one page per sample is under 2% more. */
    {.name = "profile_interval", .env = "FASTALLOC_PROFILE_INTERVAL", .type = FA_OPT_SIZE,
     .min = 1, .max = (long long)1 << 40, .value = (long long)512 << 10, .dflt = "512K",
     .doc = "the profile: mean bytes allocated between two sampled blocks (each is a page or more "
            "of its own)",
     .off = FIELD(profile_interval), .startup_only = true},
    {.name = "profile_signal", .env = "FASTALLOC_PROFILE_SIGNAL", .type = FA_OPT_LONG, .min = 0,
     .max = 64, .value = 0, .dflt = "0",
     .doc = "the profile: a signal number (12 is `SIGUSR2`) that asks for a dump to PATH.N, "
            "written at the next malloc or free; `0`: none",
     .off = FIELD(profile_signal), .startup_only = true},
};
const unsigned fa__option_count = sizeof fa__option_defs / sizeof fa__option_defs[0];

static void store(const struct fa__option_def *d, long long v)
{
    char *field = (char *)&fa__opt + d->off;
    switch (d->type) {
    case FA_OPT_SIZE:
        __atomic_store_n((size_t *)field, (size_t)v, __ATOMIC_RELAXED);
        break;
    case FA_OPT_LONG:
        __atomic_store_n((long *)field, (long)v, __ATOMIC_RELAXED);
        break;
    case FA_OPT_BOOL:
    case FA_OPT_WORD:
    case FA_OPT_TEXT:
        __atomic_store_n((bool *)field, v != 0, __ATOMIC_RELAXED);
        break;
    }
}

static long long load(const struct fa__option_def *d)
{
    const char *field = (const char *)&fa__opt + d->off;
    switch (d->type) {
    case FA_OPT_SIZE:
        return (long long)__atomic_load_n((const size_t *)field, __ATOMIC_RELAXED);
    case FA_OPT_LONG:
        return __atomic_load_n((const long *)field, __ATOMIC_RELAXED);
    case FA_OPT_BOOL:
    case FA_OPT_WORD:
    case FA_OPT_TEXT:
        return __atomic_load_n((const bool *)field, __ATOMIC_RELAXED);
    }
    return 0;
}

/* Decimal digits into *v; NULL on success, else what is wrong.  No sign,
 * no space, no base prefix: strtoull would take "-5" and wrap it. */
static const char *parse_digits(const char **s, unsigned long long *v)
{
    const char *p = *s;
    if (*p < '0' || *p > '9')
        return *p == '-' ? "negative" : "not a number";
    unsigned long long x = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, (unsigned)(*p - '0'), &x))
            return "too large";
    }
    *s = p;
    *v = x;
    return NULL;
}

const char *fa__option_parse(const struct fa__option_def *d, const char *s, long long *value)
{
    unsigned long long u;
    const char *err;
    switch (d->type) {
    case FA_OPT_SIZE: {
        if ((err = parse_digits(&s, &u)) != NULL)
            return err;
        unsigned shift = 0;
        switch (*s) {
        case 'k': case 'K': shift = 10; s++; break;
        case 'm': case 'M': shift = 20; s++; break;
        case 'g': case 'G': shift = 30; s++; break;
        default: break;
        }
        if (*s != '\0')
            return "not a size (digits, then K, M or G)";
        if (u > (unsigned long long)d->max >> shift)
            return "too large";
        *value = (long long)(u << shift);
        return NULL;
    }
    case FA_OPT_LONG: {
        bool neg = *s == '-';
        if (neg)
            s++;
        if ((err = parse_digits(&s, &u)) != NULL)
            return neg && *err == 'n' ? "not a number" : err;
        if (*s != '\0')
            return "not a number";
        if (u > (unsigned long long)LLONG_MAX)
            return neg ? "too small" : "too large";
        long long v = neg ? -(long long)u : (long long)u;
        if (v < d->min)
            return "too small";
        if (v > d->max)
            return "too large";
        *value = v;
        return NULL;
    }
    case FA_OPT_BOOL: {
        static const char *const yes[] = {"1", "on", "yes", "true"};
        static const char *const no[] = {"0", "off", "no", "false"};
        for (unsigned i = 0; i < 4; i++) {
            if (strcasecmp(s, yes[i]) == 0) {
                *value = 1;
                return NULL;
            }
            if (strcasecmp(s, no[i]) == 0) {
                *value = 0;
                return NULL;
            }
        }
        return "not 0 or 1";
    }
    case FA_OPT_WORD:
        for (long long i = d->min; i <= d->max; i++) {
            if (d->words[i] != NULL && strcmp(s, d->words[i]) == 0) {
                *value = i;
                return NULL;
            }
        }
        return "not one of the accepted words";
    case FA_OPT_TEXT: {
        size_t k = strlen(d->words[1]);
        if (strcmp(s, "0") == 0) {
            *value = 0;
            return NULL;
        }
        if (d->words[0] != NULL && strcmp(s, d->words[0]) == 0) {
            *value = 1;
            return NULL;
        }
        if (strncmp(s, d->words[1], k) != 0 || s[k] == '\0')
            return d->words[0] != NULL ? "not 0, 1 or a prefix and a path" : "not 0 or a path";
        if (strlen(s + k) >= FA_OPT_TEXT_MAX)
            return "path too long";
        *value = 1;
        return NULL;
    }
    }
    return "unknown type";
}

extern char **environ;

/* A FASTALLOC_ variable that no row names is most likely a typo. */
static void warn_unknown(void)
{
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, "FASTALLOC_", 10) != 0)
            continue;
        size_t len = strcspn(*e, "=");
        bool known = false;
        for (unsigned i = 0; i < fa__option_count && !known; i++)
            known = strlen(fa__option_defs[i].env) == len &&
                    strncmp(*e, fa__option_defs[i].env, len) == 0;
        if (!known)
            fa__diag("fastalloc: %.*s: unknown variable, ignored", (int)len, *e);
    }
}

void fa__options_from_env(void)
{
    for (unsigned i = 0; i < fa__option_count; i++) {
        const struct fa__option_def *d = &fa__option_defs[i];
        store(d, d->value);
        /* getenv does not allocate, so it is safe before the heap is up. */
        const char *s = getenv(d->env);
        if (s == NULL)
            continue;
        long long v;
        const char *err = fa__option_parse(d, s, &v);
        if (err != NULL) {
            fa__diag("fastalloc: %s=%s ignored: %s; using the default, %s", d->env, s, err, d->dflt);
            continue;
        }
        store(d, v);
        /* A text option's text, after its prefix. */
        if (d->type == FA_OPT_TEXT && v != 0 && (d->words[0] == NULL || strcmp(s, d->words[0]) != 0))
        {
            const char *t = s + strlen(d->words[1]);
            fa__memcpy(((struct fa__opt_text *)((char *)&fa__opt + d->off))->text, t, strlen(t) + 1);
        }
    }
    warn_unknown();
}

static const struct fa__option_def *find(const char *name)
{
    for (unsigned i = 0; name != NULL && i < fa__option_count; i++)
        if (strcmp(name, fa__option_defs[i].name) == 0)
            return &fa__option_defs[i];
    return NULL;
}

int fa__option_set(const char *name, long long value)
{
    const struct fa__option_def *d = find(name);
    if (d == NULL || value < d->min || value > d->max)
        return EINVAL;
    if (d->startup_only)
        return EPERM;
    store(d, value);
    return 0;
}

int fa__option_get(const char *name, long long *value)
{
    const struct fa__option_def *d = find(name);
    if (d == NULL || value == NULL)
        return EINVAL;
    *value = load(d);
    return 0;
}
