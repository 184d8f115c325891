/* The purge policy: purge what will not be reused, keep what will.
 *
 * Purged pages fault again when they are reused: a program that frees and
 * soon reallocates the same amount of memory should keep its pages, and one
 * whose use really falls should give them back at once, with no timer and no
 * later call.  So:
 *  - at a free, or a thread's exit, dirty memory is purged only after a real
 *    fall: when the memory in use is at most half its recent peak (the
 *    highest over the last one to two purge delays).  Then dirty memory may
 *    stay up to 1/8 of the memory in use, and at least 16 MiB; past that it
 *    is purged down to half that cap, in bursts, so that freed spans
 *    coalesce first and the madvise calls are few and large;
 *  - a thread's exit during a fall drops the 16 MiB floor;
 *  - a fall keeps a reserve, though: the largest rebound of the recent
 *    windows (memory in use that grew again after a fall).  A program that
 *    cycles, whose threads come and go or whose rounds free and take the
 *    same memory again, pays its page faults in the first cycle only;
 *  - with time: a span dirty for the purge delay is purged by the next
 *    look, which the page heap makes at most every delay/4 ms and the
 *    decay tick every delay/2 ms (10 ms to 5 s).  Memory reused within the
 *    delay never faults;
 *  - a delay of 0 purges every free at once, -1 never.
 * A thread's exit used to purge with no floor, and a free past 1/8 of the
 * memory in use even with no fall: a heap churning large blocks or threads
 * then faulted the same pages back in on every cycle (docs/HISTORY.md). */
#include "03-purge/purge.h"
#include "01-os/clock.h"
#include "00-base/options.h"

/* Dirty free memory kept without purging, however little is in use: a
 * program that frees and reallocates a few megabytes should not pay for
 * page faults each time. */
#define DIRTY_FLOOR ((size_t)16 << 20)
/* Above the floor, dirty memory may be at most 1/8 of what is in use. */
#define DIRTY_RATIO_SHIFT 3

static long delay_ms(void)
{
    return __atomic_load_n(&fa__opt.purge_delay_ms, __ATOMIC_RELAXED);
}

/* What the policy remembers, over windows of one purge delay; a value is
 * the higher (or lower) of the current window's and the one before, so it
 * is remembered for one to two delays:
 *  - the peak of the memory in use, to tell a fall;
 *  - whether a fall happened, and the lowest use since: growth after a fall
 *    is a rebound, memory that the program frees and takes again;
 *  - the largest rebound: the reserve of dirty memory a fall keeps, so that
 *    a program that cycles (threads that come and go, a batch job's rounds)
 *    faults its pages in once, not at every cycle. */
struct window {
    size_t peak, low, rebound;
    bool fell;
};

static struct {
    struct window cur, prev;
    uint64_t start;
} hist = {.cur = {.low = SIZE_MAX}, .prev = {.low = SIZE_MAX}};

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }
static size_t min_z(size_t a, size_t b) { return a < b ? a : b; }

void fa__purge_note_use(size_t in_use)
{
    hist.cur.peak = max_z(hist.cur.peak, in_use);
    if (hist.cur.fell || hist.prev.fell) {
        size_t low = min_z(hist.cur.low, hist.prev.low);
        if (low != SIZE_MAX && in_use > low)
            hist.cur.rebound = max_z(hist.cur.rebound, in_use - low);
    }
}

void fa__purge_note_look(uint64_t now, size_t in_use)
{
    long d = delay_ms();
    if (d <= 0 || now - hist.start < (uint64_t)d)
        return;
    /* The current window ends, however long it lasted (looks come at
     * least every delay/4 while dirty memory waits, and with every tick);
     * the next one starts from where use stands. */
    hist.prev = hist.cur;
    hist.cur = (struct window){.peak = in_use, .low = in_use};
    hist.start = now;
}

static size_t shed_target(size_t in_use, size_t dirty, size_t floor)
{
    size_t cap = max_z(in_use >> DIRTY_RATIO_SHIFT, floor);
    if (dirty <= cap)
        return FA_PURGE_NONE;
    size_t peak = max_z(max_z(hist.cur.peak, hist.prev.peak), in_use);
    if (in_use > peak / 2)
        return FA_PURGE_NONE; /* no fall: what was freed will be reused */
    hist.cur.fell = true;
    hist.cur.low = min_z(hist.cur.low, in_use);
    /* The reserve comes on top of half the cap: dirty memory hovers around
     * the rebound itself, and a purge takes whole spans, oldest first, so a
     * reserve of exactly the rebound would purge a large span whenever the
     * program freed a little more than it took back. */
    size_t reserve = max_z(hist.cur.rebound, hist.prev.rebound);
    /* An eighth more: what a cycle takes again lies in spans with gaps
     * between them (a thread's exit, whose cap has no floor, purged a whole
     * span at every other generation of test_decay thread_reuse for want of
     * a sliver of reserve: docs/HISTORY.md). */
    size_t keep = cap / 2 + reserve + reserve / 8;
    return dirty > keep ? keep : FA_PURGE_NONE;
}

/* A free or an exit: the same question, with the given floor. */
static size_t at_event(size_t in_use, size_t dirty, size_t floor)
{
    long d = delay_ms();
    if (d == 0)
        return 0;
    if (d < 0)
        return FA_PURGE_NONE;
    hist.cur.low = min_z(hist.cur.low, in_use);
    return shed_target(in_use, dirty, floor);
}

size_t fa__purge_after_free(size_t in_use, size_t dirty)
{
    return at_event(in_use, dirty, DIRTY_FLOOR);
}

/* A thread's exit during a fall drops the floor: the last threads of a
 * program whose use has fallen leave nothing behind but the reserve.  So
 * does the exit of a thread that no new thread replaced (none was created
 * since the exits before it), with or without a fall: nobody is coming for
 * what it held, past 1/8 of the memory in use.  The exit of one that was
 * replaced keeps it, for the threads that take its place, unless use has
 * fallen. */
size_t fa__purge_at_exit(size_t in_use, size_t dirty, bool replaced)
{
    size_t t = at_event(in_use, dirty, 0);
    if (t == FA_PURGE_NONE && !replaced && delay_ms() > 0) {
        size_t cap = in_use >> DIRTY_RATIO_SHIFT;
        if (dirty > cap)
            t = cap;
    }
    return t;
}

bool fa__purge_look_due(uint64_t last_ms, uint64_t *now_ms)
{
    long d = delay_ms();
    if (d <= 0)
        return false;
    *now_ms = fa__now_ms();
    return *now_ms - last_ms >= (uint64_t)d / 4 + 1;
}

bool fa__purge_span_aged(uint64_t now_ms, uint32_t free_since)
{
    long d = delay_ms();
    /* Unsigned difference: exact across the 32-bit wrap for 49 days. */
    return d >= 0 && (uint32_t)((uint32_t)now_ms - free_since) >= (uint64_t)d;
}

uint64_t fa__purge_tick_interval_ms(void)
{
    long d = delay_ms();
    uint64_t iv = d > 0 ? (uint64_t)d / 2 : 500;
    if (iv < 10)
        iv = 10;
    if (iv > 5000)
        iv = 5000;
    return iv;
}
