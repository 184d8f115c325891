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
 * same way).  Blocks are 16 bytes or more, so every block has the word. */
#ifndef FA_CORE_FREELIST_H
#define FA_CORE_FREELIST_H

#include "base/asan.h"
#include "base/config.h"

/* The block after b on its list (NULL at the end). */
FA_INLINE void *fa__fl_next(void *b)
{
    return *(void **)b;
}

/* Make next follow b. */
FA_INLINE void fa__fl_set_next(void *b, void *next)
{
    *(void **)b = next;
}

/* The check a free makes before its block joins a list (*head is the
 * list's first block): none in this build.  A hardened or debug build
 * checks here for a block pushed twice in a row and for a link that
 * points outside the block's span. */
FA_INLINE void fa__fl_check_push(void *const *head, const void *b)
{
    (void)head;
    (void)b;
}

/* Mark b, a block of the span whose record is at key, free. */
FA_INLINE void fa__fl_mark(void *b, const void *key)
{
    ((const void **)b)[1] = key;
}

/* Whether b carries key's free mark. */
FA_INLINE bool fa__fl_marked(const void *b, const void *key)
{
    return ((const void *const *)b)[1] == key;
}

/* A block of size bytes goes free: all but its link and its mark is
 * poisoned in an AddressSanitizer build (base/asan.h); nothing elsewhere. */
FA_INLINE void fa__fl_poison(void *b, size_t size)
{
    FA_POISON((char *)b + 2 * sizeof(void *), size - 2 * sizeof(void *));
    (void)b;
    (void)size;
}

/* A block of size bytes is handed out: its mark cleared, and the program
 * may touch all of it. */
FA_INLINE void fa__fl_hand_out(void *b, size_t size)
{
    FA_UNPOISON(b, size);
    ((void **)b)[1] = NULL;
    (void)size;
}

/* Push b on the list at *head. */
FA_INLINE void fa__fl_push(void **head, void *b)
{
    fa__fl_check_push(head, b);
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
