/* The library's own copies and fills: fa__memcpy, fa__memmove and
 * fa__memset, which every file of the library calls instead of the
 * standard names.
 *
 * The hardened library exports bounded memcpy, memset and their kin
 * (12-api/bounds.c), which stop the program when a write would pass the
 * end of the heap block it lands in.  The library's own writes must not
 * go through them: a large block's canary lies past the bytes asked for,
 * a calloc zeroes a reused block before its record says its new size, a
 * fresh span is zeroed across many blocks at once.  So these call glibc
 * under names that nobody interposes (its __*_chk entry points, with no
 * bound).  Elsewhere they are the compiler's built-ins, which it may
 * inline.  FA_BOUNDS says whether the bounded names are exported. */
#ifndef FA_BASE_MEM_H
#define FA_BASE_MEM_H

#include "00-base/asan.h"
#include "00-base/config.h"

#ifndef FA_BOUNDS /* -DFA_BOUNDS=0: a hardened build without them, to measure */
#if FA_SECURE && defined(FA_OVERRIDE) && !defined(FA_ASAN) && !defined(__SANITIZE_THREAD__)
#define FA_BOUNDS 1
#else
#define FA_BOUNDS 0
#endif
#endif

#if FA_BOUNDS
/* glibc's checked copies, under names gcc does not know as built-ins (it
 * would turn an unbounded __memcpy_chk back into a call of memcpy). */
extern void *fa__libc_memcpy(void *, const void *, size_t, size_t) __asm__("__memcpy_chk");
extern void *fa__libc_memmove(void *, const void *, size_t, size_t) __asm__("__memmove_chk");
extern void *fa__libc_memset(void *, int, size_t, size_t) __asm__("__memset_chk");
/* The rest of the family, for 12-api/bounds.c alone. */
extern void *fa__libc_mempcpy(void *, const void *, size_t, size_t) __asm__("__mempcpy_chk");
extern char *fa__libc_strcpy(char *, const char *, size_t) __asm__("__strcpy_chk");
extern char *fa__libc_stpcpy(char *, const char *, size_t) __asm__("__stpcpy_chk");
extern char *fa__libc_strcat(char *, const char *, size_t) __asm__("__strcat_chk");
extern char *fa__libc_strncpy(char *, const char *, size_t, size_t) __asm__("__strncpy_chk");
extern char *fa__libc_strncat(char *, const char *, size_t, size_t) __asm__("__strncat_chk");
/* No bound, as a value the compiler cannot see: clang knows the __*_chk
 * functions by their symbols, and would lower a call with a bound it can
 * see to be no bound into a call of the plain name, which is the bounded
 * one here (and, inside it, itself). */
FA_INLINE size_t fa__unbounded(void)
{
    size_t n = (size_t)-1;
    __asm__("" : "+r"(n));
    return n;
}
#define FA_UNBOUNDED ((size_t)-1)
#define fa__memcpy(d, s, n) fa__libc_memcpy((d), (s), (n), fa__unbounded())
#define fa__memmove(d, s, n) fa__libc_memmove((d), (s), (n), fa__unbounded())
#define fa__memset(d, c, n) fa__libc_memset((d), (c), (n), fa__unbounded())
#else
#define fa__memcpy(d, s, n) __builtin_memcpy((d), (s), (n))
#define fa__memmove(d, s, n) __builtin_memmove((d), (s), (n))
#define fa__memset(d, c, n) __builtin_memset((d), (c), (n))
#endif

#endif
