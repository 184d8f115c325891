/* The standard names.  With FA_OVERRIDE (the default build), each api file
 * exports the malloc family's standard names as aliases of its fa_
 * functions, beside them: an alias must sit in the file that defines its
 * target, and an alias costs no instruction, where a wrapper would cost a
 * jump on every call. */
#ifndef FA_API_OVERRIDE_H
#define FA_API_OVERRIDE_H

#ifdef FA_OVERRIDE
#if defined(__GNUC__) && !defined(__clang__)
/* The aliases share their targets' code; gcc wants their attributes (malloc,
 * alloc_size) repeated, which adds nothing here. */
#pragma GCC diagnostic ignored "-Wmissing-attributes"
#endif
#define FA_ALIAS(name, target) \
    __typeof__(target) name __attribute__((alias(#target), visibility("default"), used))
#endif

#endif
