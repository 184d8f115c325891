/* Options: one table (options.c) names every knob once, with its
 * environment variable, type, range, default and a line of documentation.
 * The table drives the environment parsing at start-up, fa_option_set and
 * fa_option_get, and the tables in README.md and docs/TUNING.md (a test
 * compares them row by row). */
#ifndef FA_BASE_OPTIONS_H
#define FA_BASE_OPTIONS_H

#include "00-base/config.h"

/* An option that is off, or on with a text (a path). */
#define FA_OPT_TEXT_MAX 256
struct fa__opt_text {
    bool on;                   /* first: the table's load and store read it */
    char text[FA_OPT_TEXT_MAX];
};

/* The values, read by every layer.  Fields that code may change at run time
 * are read and written with relaxed atomics. */
struct fa__options {
    size_t thread_cache_bytes; /* cap on what one thread cache may hold */
    size_t thread_cache_max;   /* cap on all thread caches together */
    long purge_delay_ms;       /* free pages go back after this; 0 now, -1 never */
    bool purge_madv_free;      /* purge with MADV_FREE instead of MADV_DONTNEED */
    bool hugepages;            /* ask for transparent huge pages */
    bool background;           /* a thread does the timed work */
    size_t limit;              /* bytes in use or resident; 0 = none */
    /* Debug mode (src/09-diag/): set from the environment at start-up only. */
    bool debug;                /* every block checked, filled and traced */
    bool debug_continue;       /* report an error and go on, instead of abort */
    size_t debug_quarantine;   /* bytes of freed blocks held back */
    bool secure;               /* the hardened build was asked for (11-init/init.c) */
    bool secure_zero;          /* the hardened build zeroes freed blocks (02-records) */
    bool secure_tails;         /* the hardened build's blocks carry tails (02-records) */
    bool secure_shuffle;       /* the hardened build cuts blocks in a random order (02-records) */
    struct fa__opt_text stats; /* statistics at exit (10-stats/stats.c); text: the JSON
                                  file, "" for the table on stderr */
    struct fa__opt_text trace; /* record an allocation trace (09-diag/trace.c); text:
                                  the file */
    struct fa__opt_text profile; /* the sampled heap profile (09-diag/profile.c); text:
                                    the file written at exit */
    size_t profile_interval;   /* mean bytes allocated between two samples */
    long profile_signal;       /* the signal that asks for a dump; 0: none */
};
extern struct fa__options fa__opt FA_HIDDEN;

enum fa__option_type {
    FA_OPT_SIZE,  /* bytes; the environment takes K, M and G suffixes */
    FA_OPT_LONG,  /* a signed number */
    FA_OPT_BOOL,  /* 0 or 1 (the environment also takes on/off, yes/no, true/false) */
    FA_OPT_WORD,  /* one of words[]; its index is the value */
    /* `0` (off), or words[1] followed by a text (a path), kept in a
     * struct fa__opt_text; with words[0] set, `1` too (on, no text);
     * start-up only */
    FA_OPT_TEXT,
};

struct fa__option_def {
    const char *name;       /* for fa_option_set / fa_option_get */
    const char *env;        /* the environment variable */
    enum fa__option_type type;
    long long min, max;     /* the range, inclusive */
    const char *words[3];   /* FA_OPT_WORD: the accepted words, by value */
    long long value;        /* the default */
    const char *dflt;       /* the default as the docs print it (test_options
                               checks that it parses to value) */
    const char *doc;        /* one line, as README.md and docs/TUNING.md print it */
    size_t off;             /* the field in struct fa__options */
    bool startup_only;      /* read from the environment at start-up, and
                               never changed after: fa_option_set refuses it */
};

extern const struct fa__option_def fa__option_defs[] FA_HIDDEN;
extern const unsigned fa__option_count FA_HIDDEN;

/* Read every variable of the table from the environment.  A value that is
 * malformed, negative where it may not be, out of range or overflowing gets
 * one line on stderr naming the variable, and the default stays; so does a
 * FASTALLOC_ variable the table does not know (a typo). */
void fa__options_from_env(void) FA_HIDDEN;

/* By name: 0, or EINVAL for an unknown name or a value out of range;
 * fa__option_set gives EPERM for an option fixed at start-up. */
int fa__option_set(const char *name, long long value) FA_HIDDEN;
int fa__option_get(const char *name, long long *value) FA_HIDDEN;

/* Parse one environment value for def into *value: 0, or a static string
 * that says what is wrong with it. */
const char *fa__option_parse(const struct fa__option_def *def, const char *text,
                             long long *value) FA_HIDDEN;

#endif
