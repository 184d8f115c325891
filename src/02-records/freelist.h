/* The free-list seam: the only code that reads or writes the link word of
 * a free block.  Thread caches, central caches and the fast paths all keep
 * free blocks as singly linked lists threaded through the blocks' first
 * word, and reach that word through these functions alone.
 *
 * A mode that changes what a link is (an encoded link in a hardened build,
 * a fill or a check in a debug build, a trace of every push and pop)
 * changes this file and nothing else.  Today a link is the plain address
 * of the next free block, NULL at the end, and each function compiles to
 * the one load or store it names; the fast paths' instruction counts
 * depend on that (tools/icount.sh).
 *
 * A free block's second word is its free mark: the address of its span's
 * record, written by every free and cleared by every hand-out.  A free
 * that finds the mark already there is a double free, or else (the mark
 * is an address the program never sees) a block whose bytes were copied
 * from a freed one: the slow path tells the two apart by looking for the
 * block on the lists that hold free blocks (glibc's tcache key works the
 * same way).  Blocks are 16 bytes or more, so every block has the word.
 *
 * The hardened build (FA_SECURE, libfastalloc-secure.so; SECURITY.md)
 * changes what both words hold and what a free and a hand-out do:
 *  - a link is stored XORed with a per-process random key, and a decoded
 *    link must be 16-byte aligned and a user-space address, or the
 *    program stops: a link that a write after free or an overflow forged
 *    decodes to noise.  The slot's own address is not mixed in as well
 *    (glibc's safe-linking, which has no secret key): with a secret key it
 *    hides nothing more, since both are XORs, and it cost instructions
 *    on both malloc's and free's fast paths (docs/HISTORY.md, #26);
 *  - the mark is the block's own address XORed with a second key (with
 *    `secure_zero`, checked again when the block is handed out);
 *  - with the `secure_zero` option, a freed block is zeroed past its two
 *    words (scrubbed), and a block handed out must still be zero at both
 *    ends (check_scrubbed); a block handed out has both words cleared.
 * Its blocks' last bytes are their tails (02-records/tail.h), which a
 * scrub leaves as a fresh block's. */
#ifndef FA_RECORDS_FREELIST_H
#define FA_RECORDS_FREELIST_H

#include "00-base/asan.h"
#include "00-base/config.h"
#include "02-records/pagemap.h"

#if FA_SECURE
/* The hardened build's secrets, random, set once at start-up before any
 * list exists, and the `secure_zero` option: read together by every
 * malloc and free, so kept on one line. */
struct fa__fl_secrets {
    uintptr_t link; /* XORed into links */
    uintptr_t mark; /* XORed into free marks */
    uint64_t tail;  /* the tails' canary, one byte repeated (tail.h) */
    uint16_t tail_len; /* XORed into tails */
    bool zero;      /* scrub freed blocks, check them at hand-out */
    bool tails;     /* small blocks carry tails (`secure_tails`, tail.h) */
    bool rare;      /* zero or tails: the fast paths leave for zeroed.c */
    bool shuffle;   /* cut blocks in a random order (`secure_shuffle`, span.c) */
    /* The fast paths' own tests, which `secure_zero` and `secure_tails`
     * turn into ones that always fail, so that neither path tests either
     * option as well: free's test of a pointer's low bits (FA_MIN_ALIGN -
     * 1, or every bit) and malloc's bound on the sizes the small table
     * serves (past it, or 0). */
    uintptr_t free_mask;
    size_t small_limit;
} __attribute__((aligned(64)));
extern struct fa__fl_secrets fa__fl_key FA_HIDDEN;
/* Stop the program: the word `what` of the free block b is not what the
 * allocator wrote there. */
_Noreturn FA_COLD void fa__fl_corrupt(const void *b, const char *what) FA_HIDDEN;
/* Stop the program unless the block of size bytes at b is zero past its two
 * words, in its first 128 bytes and its last 64, its tail apart. */
void fa__fl_check_scrubbed(const void *b, size_t size) FA_HIDDEN;
#endif
void fa__fl_init(void) FA_HIDDEN;

/* The block after b, a block of class cls, on its list (NULL at the end).
 * The hardened build checks that it is 16-byte aligned and below 2^47 (no
 * user-space address is higher): a forged link decodes to noise, which
 * fails one or the other but once in 2^21. */
#define FA_FL_BAD_LINK (~(((uintptr_t)1 << 47) - 1) | (FA_MIN_ALIGN - 1))
FA_INLINE void *fa__fl_next_of(void *b, unsigned cls)
{
    (void)cls;
#if FA_SECURE
    uintptr_t n = *(uintptr_t *)b ^ fa__fl_key.link;
    if (FA_UNLIKELY(n & FA_FL_BAD_LINK))
        fa__fl_corrupt(b, "link");
    return (void *)n;
#else
    return *(void **)b;
#endif
}

/* The block after b on its list (NULL at the end). */
FA_INLINE void *fa__fl_next(void *b)
{
    return fa__fl_next_of(b, 0);
}

/* Make next follow b. */
FA_INLINE void fa__fl_set_next(void *b, void *next)
{
#if FA_SECURE
    *(uintptr_t *)b = (uintptr_t)next ^ fa__fl_key.link;
#else
    *(void **)b = next;
#endif
}

/* Mark b, a block of the span whose record is at key, free. */
FA_INLINE void fa__fl_mark(void *b, const void *key)
{
    FA_UNPOISON((void **)b + 1, sizeof(void *));
#if FA_SECURE
    (void)key;
    ((uintptr_t *)b)[1] = (uintptr_t)b ^ fa__fl_key.mark;
#else
    ((const void **)b)[1] = key;
#endif
}

/* Whether b carries key's free mark. */
FA_INLINE bool fa__fl_marked(const void *b, const void *key)
{
    if (FA_POISONED((void *const *)b + 1)) /* an AddressSanitizer build's free block */
        return true;
#if FA_SECURE
    (void)key;
    return ((const uintptr_t *)b)[1] == ((uintptr_t)b ^ fa__fl_key.mark);
#else
    return ((const void *const *)b)[1] == key;
#endif
}

/* A block of size bytes has just been marked free: with `secure_zero`,
 * the hardened build zeroes the rest of it, so that what the program left
 * there cannot be read through a stale pointer, and a write after free
 * shows at hand-out.  The tail becomes a fresh block's. */
void fa__fl_scrub_slow(void *b, size_t size) FA_HIDDEN;
FA_INLINE void fa__fl_scrub(void *b, size_t size)
{
#if FA_SECURE
    if (FA_UNLIKELY(fa__fl_key.zero))
        fa__fl_scrub_slow(b, size);
#endif
    (void)b;
    (void)size;
}

/* A block of size bytes goes free: all but its link is poisoned in an
 * AddressSanitizer build (00-base/asan.h); nothing elsewhere. */
FA_INLINE void fa__fl_poison(void *b, size_t size)
{
    FA_POISON((char *)b + sizeof(void *), size - sizeof(void *));
    (void)b;
    (void)size;
}

/* Whether freed blocks are zeroed (the hardened build's `secure_zero`);
 * whether that or tails (`secure_tails`) is on, which the common paths
 * leave for copies of their own. */
#if FA_SECURE
#define FA_FL_ZEROED (fa__fl_key.zero)
#define FA_FL_RARE (fa__fl_key.rare)
#else
#define FA_FL_ZEROED false
#define FA_FL_RARE false
#endif

/* A block of size bytes is handed out: its link and mark cleared (in the
 * hardened build an encoded link would tell the program the key), and the
 * program may touch all of it.  zeroed (FA_FL_ZEROED, or a constant where
 * the caller tested it): the hardened build checks that the block is still
 * free and zero as the free left it. */
FA_INLINE void fa__fl_hand_out(void *b, size_t size, bool zeroed)
{
    FA_UNPOISON(b, size);
#if FA_SECURE
    if (zeroed) {
        if (FA_UNLIKELY(!fa__fl_marked(b, NULL)))
            fa__fl_corrupt(b, "free mark");
        fa__fl_check_scrubbed(b, size);
    }
    ((void **)b)[0] = NULL;
#endif
    ((void **)b)[1] = NULL;
    (void)size;
    (void)zeroed;
}

/* Push b on the list at *head. */
FA_INLINE void fa__fl_push(void **head, void *b)
{
    fa__fl_set_next(b, *head);
    *head = b;
}

/* Pop the first block of a list known not to be empty. */
FA_INLINE void *fa__fl_pop(void **head)
{
    void *b = *head;
    *head = fa__fl_next(b);
    return b;
}

/* Push b, a block of the span whose record is at key, on the list at
 * *head and mark it free: fa__fl_push and fa__fl_mark in one, for the
 * free fast path.  The hardened build reads both keys before it writes
 * either word, since a store through b could alias them and have the
 * compiler read them again. */
FA_INLINE void fa__fl_push_free(void **head, void *b, const void *key)
{
#if FA_SECURE
    uintptr_t link = (uintptr_t)*head ^ fa__fl_key.link;
    uintptr_t mark = (uintptr_t)b ^ fa__fl_key.mark;
    (void)key;
    FA_UNPOISON((void **)b + 1, sizeof(void *));
    ((uintptr_t *)b)[0] = link;
    ((uintptr_t *)b)[1] = mark;
    *head = b;
#else
    fa__fl_push(head, b);
    fa__fl_mark(b, key);
#endif
}

/* Links kept at an offset from the block: the object pool keeps a free
 * object's whole state when the pool has a ctor or dtor, so the link of
 * such an object lives in a header before it (off < 0). */
FA_INLINE void *fa__fl_next_at(void *b, intptr_t off)
{
    return *(void **)((char *)b + off);
}

FA_INLINE void fa__fl_set_next_at(void *b, intptr_t off, void *next)
{
    *(void **)((char *)b + off) = next;
}

/* The n-th block of a list (n = 0 is the first); the list has more than n. */
FA_INLINE void *fa__fl_nth(void *head, unsigned n)
{
    while (n-- > 0)
        head = fa__fl_next(head);
    return head;
}

#endif
