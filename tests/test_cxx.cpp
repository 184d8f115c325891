// C++'s operator new and delete (src/12-api/cxx.c): every form lands in
// fastalloc, whether the program is linked with it (test_cxx) or has it
// preloaded (test_cxx_preload, linked with nothing of fastalloc's).  fa_owns
// and fa_set_hooks are found with dlsym, so that both builds of this file
// are the same program.
//
//   forms     each of the 20 operators resolves into fastalloc's library;
//             its block is fastalloc's, aligned, written whole, and the
//             hooks count each new and each delete
//   handler   an impossible new calls the new_handler that was set, then
//             throws std::bad_alloc; nothrow returns NULL
//   sized     a sized delete with the wrong size stops the program: the
//             size reaches fastalloc, and both libraries check it
//
// Built with g++ -fsized-deallocation -faligned-new.
#include <dlfcn.h>
#include <initializer_list>
#include <new>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "fastalloc.h"
}

static int checks, failures;
#define CHECK(c, ...)                                                                                              \
    do {                                                                                                           \
        checks++;                                                                                                  \
        if (!(c)) {                                                                                                \
            failures++;                                                                                            \
            std::printf("%s:%d: CHECK failed: %s -- ", __FILE__, __LINE__, #c);                                    \
            std::printf(__VA_ARGS__);                                                                              \
            std::printf("\n");                                                                                     \
        }                                                                                                          \
    } while (0)

template <typename F> static F sym(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (f == nullptr) {
        std::printf("%s not found: fastalloc is neither linked nor preloaded\n", name);
        std::exit(1);
    }
    return reinterpret_cast<F>(f);
}

static int (*owns)(const void *);
static unsigned long allocs, frees;

static void on_alloc(void *, size_t, void *) { allocs++; }
static void on_free(void *, size_t) { frees++; }

// One block from an operator: fastalloc's, aligned as asked, writable.
static void got(void *p, size_t n, size_t align, const char *form)
{
    CHECK(p != nullptr, "%s returned NULL", form);
    if (p == nullptr)
        return;
    CHECK(owns(p), "%s: %p is not fastalloc's", form, p);
    CHECK((uintptr_t)p % align == 0, "%s: %p is not aligned to %zu", form, p, align);
    std::memset(p, 0x5a, n);
}

// Every operator's symbol, as the program's calls resolve it, lies in
// fastalloc's library (libstdc++'s operators would call malloc too, and
// their blocks would be fastalloc's all the same).
static const char *const operators[] = {
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
    "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

static int case_forms()
{
    for (const char *name : operators) {
        void *f = dlsym(RTLD_DEFAULT, name);
        Dl_info info;
        bool ours = f != nullptr && dladdr(f, &info) != 0 && info.dli_fname != nullptr &&
                    std::strstr(info.dli_fname, "libfastalloc") != nullptr;
        CHECK(ours, "%s resolves to %s, not to fastalloc", name,
              f == nullptr ? "nothing" : (dladdr(f, &info) && info.dli_fname ? info.dli_fname : "?"));
    }
    fa_hooks h = {on_alloc, on_free, 0};
    int (*set_hooks)(const fa_hooks *) = sym<int (*)(const fa_hooks *)>("fa_set_hooks");
    CHECK(set_hooks(&h) == 0, "fa_set_hooks");
    const std::align_val_t al = static_cast<std::align_val_t>(256);
    for (size_t n : {size_t(1), size_t(100), size_t(5000), size_t(300000)}) {
        unsigned long a0 = allocs, f0 = frees;
        void *p;
        p = ::operator new(n), got(p, n, 16, "new"), ::operator delete(p);
        p = ::operator new[](n), got(p, n, 16, "new[]"), ::operator delete[](p);
        p = ::operator new(n), got(p, n, 16, "new"), ::operator delete(p, n);
        p = ::operator new[](n), got(p, n, 16, "new[]"), ::operator delete[](p, n);
        p = ::operator new(n, std::nothrow), got(p, n, 16, "new(nothrow)"), ::operator delete(p, std::nothrow);
        p = ::operator new[](n, std::nothrow), got(p, n, 16, "new[](nothrow)"),
        ::operator delete[](p, std::nothrow);
        p = ::operator new(n, al), got(p, n, 256, "new(align)"), ::operator delete(p, al);
        p = ::operator new[](n, al), got(p, n, 256, "new[](align)"), ::operator delete[](p, al);
        p = ::operator new(n, al), got(p, n, 256, "new(align)"), ::operator delete(p, n, al);
        p = ::operator new[](n, al), got(p, n, 256, "new[](align)"), ::operator delete[](p, n, al);
        p = ::operator new(n, al, std::nothrow), got(p, n, 256, "new(align, nothrow)"),
        ::operator delete(p, al, std::nothrow);
        p = ::operator new[](n, al, std::nothrow), got(p, n, 256, "new[](align, nothrow)"),
        ::operator delete[](p, al, std::nothrow);
        // 12 news and 12 deletes: 8 new forms and 12 delete forms in all.
        CHECK(allocs - a0 == 12 && frees - f0 == 12, "%zu bytes: the hooks saw %lu news and %lu deletes, not 12",
              n, allocs - a0, frees - f0);
    }
    // The expression forms the compiler emits (sized delete of an object).
    struct obj {
        char bytes[40];
    };
    unsigned long a0 = allocs, f0 = frees;
    obj *o = new obj();
    got(o, sizeof *o, 16, "new obj");
    delete o;
    struct alignas(64) wide {
        char bytes[200];
    };
    wide *w = new wide[3];
    got(w, 3 * sizeof *w, 64, "new wide[3]");
    delete[] w;
    CHECK(allocs - a0 == 2 && frees - f0 == 2, "new-expressions: %lu news, %lu deletes", allocs - a0,
          frees - f0);
    set_hooks(nullptr);
    return 0;
}

static int handler_calls;
static void handler()
{
    handler_calls++;
    std::set_new_handler(nullptr); // the next failure throws
}

static int case_handler()
{
    const size_t huge = SIZE_MAX / 2;
    std::set_new_handler(handler);
    bool threw = false;
    try {
        void *volatile p = ::operator new(huge);
        (void)p;
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw, "an impossible new did not throw std::bad_alloc");
    CHECK(handler_calls == 1, "the new_handler was called %d times, not once", handler_calls);
    threw = false;
    try {
        void *volatile p = ::operator new[](huge, static_cast<std::align_val_t>(64));
        (void)p;
    } catch (const std::bad_alloc &) {
        threw = true;
    }
    CHECK(threw, "an impossible aligned new[] did not throw std::bad_alloc");
    CHECK(::operator new(huge, std::nothrow) == nullptr, "new(nothrow) of %zu bytes", huge);
    CHECK(::operator new[](huge, static_cast<std::align_val_t>(64), std::nothrow) == nullptr, "aligned new[](nothrow)");
    return 0;
}

// A sized delete that names another size than the block was asked for
// stops a child with one line (both libraries: the default one where the
// size is another class's, in the thread's own spans); one that names it
// goes on.  The wrong ones are mimalloc-bench's security suite's: an
// array deleted as one char, one char deleted as a struct of 72 bytes.
static int case_sized()
{
    static const struct {
        size_t asked, said;
        bool stops;
    } cases[] = {
        {100, 64, true},   {1, 72, true},      {4096, 1, true},   {100, 128, true},
        {100, 100, false}, {100, 97, false},   {1, 1, false},     {4096, 4096, false},
        {1000, 1000, false}, {200000, 200000, false},
    };
    for (const auto &c : cases) {
        int fds[2];
        CHECK(pipe(fds) == 0, "pipe");
        std::fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            dup2(fds[1], 2);
            void *p = ::operator new(c.asked);
            std::memset(p, 1, c.asked);
            ::operator delete(p, c.said);
            _exit(4);
        }
        close(fds[1]);
        char err[512] = "";
        ssize_t n = read(fds[0], err, sizeof err - 1);
        err[n > 0 ? n : 0] = 0;
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        std::printf("new(%zu), delete(p, %zu): status %#x %s", c.asked, c.said, status, err[0] ? err : "\n");
        if (c.stops)
            CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT && std::strstr(err, "operator delete(") != nullptr,
                  "a delete of %zu bytes as %zu: status %#x, stderr %s", c.asked, c.said, status, err);
        else
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 4, "a delete of %zu bytes as %zu: status %#x, stderr %s",
                  c.asked, c.said, status, err);
    }
    return 0;
}

int main(int argc, char **argv)
{
    owns = sym<int (*)(const void *)>("fa_owns");
    const char *c = argc > 1 ? argv[1] : "";
    int r;
    if (std::strcmp(c, "forms") == 0)
        r = case_forms();
    else if (std::strcmp(c, "handler") == 0)
        r = case_handler();
    else if (std::strcmp(c, "sized") == 0)
        r = case_sized();
    else {
        std::printf("usage: %s forms|handler|sized\n", argv[0]);
        return 2;
    }
    if (r == 77)
        return 77;
    std::printf("test_cxx %s: %d checks passed\n", c, checks - failures);
    return failures != 0;
}
