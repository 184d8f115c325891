/* Intrusive doubly linked lists, circular through a sentinel head: the
 * node lives in the record it links, so linking takes no memory and no
 * call, and unlinking needs no search.  Spans are kept this way by the page
 * heap (free spans by length, dirty ones by age), the central cache (by
 * fullness) and each thread cache (its spans of each class).  A head must
 * be set up with fa__list_init (a zeroed one is not a list); an unlinked
 * node has NULL links. */
#ifndef FA_BASE_LIST_H
#define FA_BASE_LIST_H

#include "00-base/config.h"

#include <stddef.h>

struct fa__list {
    struct fa__list *next, *prev;
};

FA_INLINE void fa__list_init(struct fa__list *h)
{
    h->next = h->prev = h;
}

FA_INLINE bool fa__list_empty(const struct fa__list *h)
{
    return h->next == h;
}

/* Link n after at (at the head's front when at is the head). */
FA_INLINE void fa__list_insert(struct fa__list *at, struct fa__list *n)
{
    n->next = at->next;
    n->prev = at;
    at->next->prev = n;
    at->next = n;
}

FA_INLINE void fa__list_push(struct fa__list *h, struct fa__list *n)
{
    fa__list_insert(h, n);
}

FA_INLINE void fa__list_push_back(struct fa__list *h, struct fa__list *n)
{
    fa__list_insert(h->prev, n);
}

FA_INLINE void fa__list_del(struct fa__list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->next = n->prev = NULL;
}

/* The record of type that holds the node n in its field member. */
#define fa__list_entry(n, type, member) ((type *)(void *)((char *)(n) - offsetof(type, member)))

#endif
