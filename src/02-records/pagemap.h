/* Page map: a two-level radix tree from an address to the span that holds it,
 * that span's size class, and the thread cache that owns it.  A free reads
 * the owner first: one load from the root and one from the leaf tell it
 * whether the block's span is its own thread's, and only then does it read
 * the span.  An entry that no span ever had reads NULL as its owner, which no
 * thread is, so a stray pointer into the heap's range falls into the slow
 * path instead of following a NULL span. */
#ifndef FA_RECORDS_PAGEMAP_H
#define FA_RECORDS_PAGEMAP_H

#include "00-base/config.h"

struct fa__span;

/* A leaf covers 4 GiB (2^19 pages of 8 KiB), so its index is the low 32 bits
 * of the address shifted by the page size.  The root covers 48 bits of
 * address space; user space on x86-64 and AArch64 is at most 47 bits, so the
 * upper half of the root stays empty and kernel or non-canonical addresses
 * find no leaf. */
#define FA_PM_LEAF_BITS (32 - FA_PAGE_SHIFT)
#define FA_PM_ROOT_BITS 16
#define FA_PM_LEAF_LEN ((size_t)1 << FA_PM_LEAF_BITS)
#define FA_PM_ROOT_LEN ((size_t)1 << FA_PM_ROOT_BITS)

struct fa__pm_leaf {
    /* The thread cache that owns the page's span (08-tcache), NULL for
     * a span no thread owns and for everything that is not a small span.
     * First, so that the free path indexes it with no offset to add. */
    const void *owner[FA_PM_LEAF_LEN];
    struct fa__span *span[FA_PM_LEAF_LEN];
    uint8_t cls[FA_PM_LEAF_LEN];
};

/* The root: for each 4 GiB of address space, where its leaf lies, as an
 * offset from the root; 0 for none.  The free path adds the entry to the
 * root's address and reads the owner, with no test for a missing leaf: a
 * missing one reads the root itself as if it were a leaf
 * (fa__pm_leaf_any), whose owners are then zero or root entries.  Every
 * leaf starts FA_PM_BIAS bytes into its mapping, so that these are
 * FA_PM_BIAS modulo 16, where every thread cache is 16-byte aligned: no
 * thread owns such a page, and its free leaves for the slow path.  The
 * root is followed by enough words for all of a leaf's owners, so that
 * every such read stays inside it, in zero pages never written. */
#define FA_PM_BIAS ((uintptr_t)sizeof(uintptr_t))
struct fa__pm_dir {
    uintptr_t root[FA_PM_ROOT_LEN];
    char rest[(FA_PM_LEAF_LEN - FA_PM_ROOT_LEN) * sizeof(void *)];
};
extern struct fa__pm_dir fa__pm_dir FA_HIDDEN;

/* The leaf for a, or the root seen as one when a has none: only its
 * owners may be read then (above).  The free fast path's: an entry is set
 * once, never changed, and the leaf's words are read through it (an
 * address dependency, which orders them after it on every processor that
 * this runs on), so the entry is read as a plain word, which the compiler
 * adds from memory, an instruction less than a load and an add. */
FA_INLINE struct fa__pm_leaf *fa__pm_leaf_any(uintptr_t a)
{
    uintptr_t base = (uintptr_t)&fa__pm_dir;
    return (struct fa__pm_leaf *)(base + FA_ONCE_WORD(fa__pm_dir.root[(a >> 32) & (FA_PM_ROOT_LEN - 1)]));
}

/* A large span of more pages than this has its first and last page mapped
 * and a slot in the table of huge spans, not an entry for every page: the
 * map is 17 bytes a page, so a block of 64 GiB would have written 136 MiB
 * of it, and one of 1 TiB 2.2 GiB, for pages the program may never touch.
 * Below it a block maps every page (at most 136 KiB of map for 64 MiB), and
 * so does a huge span when the table is full.  A slot is looked at only
 * where a page's own entry does not hold the address: an interior pointer
 * of a large block, on the slow paths and the hardened build's bounds. */
#define FA_PM_HUGE_PAGES ((size_t)8192)
#define FA_PM_HUGE_SLOTS 64
extern struct fa__span *fa__pm_huge[FA_PM_HUGE_SLOTS] FA_HIDDEN;
extern unsigned fa__pm_nhuge FA_HIDDEN; /* slots below this may be in use */

/* The leaf for a, NULL when it has none. */
FA_INLINE struct fa__pm_leaf *fa__pm_leaf_of(uintptr_t a)
{
    uintptr_t r = __atomic_load_n(&fa__pm_dir.root[(a >> 32) & (FA_PM_ROOT_LEN - 1)], __ATOMIC_ACQUIRE);
    return r == 0 ? NULL : (struct fa__pm_leaf *)((uintptr_t)&fa__pm_dir + r);
}

FA_INLINE size_t fa__pm_index(uintptr_t a)
{
    return (uint32_t)a >> FA_PAGE_SHIFT;
}

/* Size class of the small block at a, 0 for anything else. */
FA_INLINE unsigned fa__pm_class(uintptr_t a)
{
    struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
    if (FA_UNLIKELY(leaf == NULL))
        return 0;
    return leaf->cls[fa__pm_index(a)];
}

FA_INLINE struct fa__span *fa__pm_span(uintptr_t a)
{
    struct fa__pm_leaf *leaf = fa__pm_leaf_of(a);
    if (leaf == NULL)
        return NULL;
    return __atomic_load_n(&leaf->span[fa__pm_index(a)], __ATOMIC_RELAXED);
}

/* The huge span that holds a, or NULL (pagemap.c). */
struct fa__span *fa__pm_huge_find(uintptr_t a) FA_HIDDEN;

/* The span that holds a, in use or free, or NULL: a huge span's slot, else
 * fa__pm_span where the span it names holds a.  A page's entry inside a
 * free span may be stale, naming a record that now describes other pages;
 * and a huge span's pages inside have none of their own. */
struct fa__span *fa__pm_span_holding(uintptr_t a) FA_HIDDEN;

/* Writers of span and class hold the page-heap lock.  Make sure leaves exist for a range of
 * pages before it is handed out (false if the OS refused the memory). */
bool fa__pm_reserve(uintptr_t start, size_t npages) FA_HIDDEN;
/* Bytes of the leaves that are resident (mincore; for the statistics). */
size_t fa__pm_resident(void) FA_HIDDEN;
/* Map each page in [start, start + npages pages) to span and cls. */
void fa__pm_set(uintptr_t start, size_t npages, struct fa__span *span, unsigned cls) FA_HIDDEN;
/* Map the pages [start, start + npages pages) of the large span s, which
 * now ends with them (a new span's all, or the pages a growth added): each
 * page, or for a huge span its last page and its slot (the first page too
 * when start is s's).  Unlike fa__pm_set, leaves the owners as they are:
 * NULL on every page that no small span holds. */
void fa__pm_set_large(struct fa__span *s, uintptr_t start, size_t npages) FA_HIDDEN;
/* The large span s is freed, or its pages change hands: its huge slot, if
 * it has one, is freed. */
void fa__pm_huge_drop(struct fa__span *s) FA_HIDDEN;
/* Set one page's entry (used for the first and last page of free spans). */
void fa__pm_set_one(uintptr_t page_addr, struct fa__span *span, unsigned cls) FA_HIDDEN;
/* Make owner (NULL: none) the owner of each page in [start, start + npages
 * pages).  The span's owner writes it, or whoever takes a span nobody owns
 * under the protocol of 02-records/span.h; fa__pm_set clears it. */
void fa__pm_set_owner(uintptr_t start, size_t npages, const void *owner) FA_HIDDEN;

#endif
