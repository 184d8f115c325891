/* The static probes (src/00-base/probe.h), seen by the tools that use
 * them: `readelf -n` lists every one in the library's notes, and gdb's
 * `break -probe-stap` stops at one in a running program, with the
 * arguments the probe documents.  Skips (77) in a build without probes
 * (no sys/sdt.h: Debian's systemtap-sdt-dev) or without readelf or gdb. */
#define _GNU_SOURCE
#include "check.h"
#include "fastalloc.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef FA_TEST_PROBES
#define FA_TEST_PROBES 0
#endif

/* A size no start-up allocation asks for: the breakpoint's condition. */
#define ODD_SIZE ((3u << 20) + 12345u)

static const char *const probes[] = {"os_map",      "span_alloc", "purge",  "large_alloc",
                                     "tcache_new",  "tcache_exit", "sample", "profile_dump"};

static int have(const char *tool)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "command -v %s >/dev/null 2>&1", tool);
    return system(cmd) == 0;
}

static const char *library(void)
{
    Dl_info info;
    CHECK(dladdr((void *)fa_malloc, &info) != 0 && info.dli_fname != NULL);
    return info.dli_fname;
}

/* 0 when the case can run: the build has probes and tool is installed
 * (package: Debian's, for the message); else 77, said on stdout. */
static int skip_unless(const char *tool, const char *package)
{
    if (!FA_TEST_PROBES) {
        printf("SKIP: this build has no probes (-DFA_PROBES=OFF, or no sys/sdt.h: Debian's systemtap-sdt-dev)\n");
        return 77;
    }
    if (!have(tool)) {
        printf("SKIP: %s is not installed (Debian: %s)\n", tool, package);
        return 77;
    }
    return 0;
}

/* cmd's output, up to 64 KiB, in text; its exit status as pclose gives it. */
static char text[1 << 16];
static int run_tool(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(text, 1, sizeof text - 1, p);
    text[n] = '\0';
    return pclose(p);
}

static int case_notes(void)
{
    if (skip_unless("readelf", "binutils") != 0)
        return 77;
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "readelf -n '%s'", library());
    CHECK(run_tool(cmd) == 0);
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "Name: %s\n", probes[i]);
        CHECKF(strstr(text, want) != NULL, "readelf -n %s lists no probe %s", library(), probes[i]);
    }
    CHECKF(strstr(text, "Provider: fastalloc") != NULL, "no probe of provider fastalloc");
    return check_done("test_probes");
}

/* The program gdb runs: one large block of an odd size. */
__attribute__((noinline)) static int child(void)
{
    void *p = fa_malloc(ODD_SIZE);
    if (p == NULL)
        return 1;
    memset(p, 1, ODD_SIZE);
    fa_free(p);
    return 0;
}

static int case_gdb(void)
{
    if (skip_unless("gdb", "gdb") != 0)
        return 77;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = '\0';
    char cmd[2 * PATH_MAX];
    /* The library is not loaded when the breakpoint is set: pending. */
    snprintf(cmd, sizeof cmd,
             "timeout 120 gdb -nx -batch -ex 'set breakpoint pending on' "
             "-ex 'break -probe-stap fastalloc:large_alloc if $_probe_arg1 == %u' -ex run "
             "-ex 'printf \"probe stopped: size %%lu\\n\", $_probe_arg1' -ex kill --args '%s' child 2>&1",
             ODD_SIZE, self);
    run_tool(cmd); /* gdb's status says nothing: the program was killed */
    fputs(text, stdout);
    char want[64];
    snprintf(want, sizeof want, "probe stopped: size %u\n", ODD_SIZE);
    CHECKF(strstr(text, "Breakpoint 1, ") != NULL, "gdb did not stop at the probe");
    CHECKF(strstr(text, want) != NULL, "gdb did not read the probe's size argument");
    return check_done("test_probes");
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "child") == 0)
        return child();
    static const struct check_case cases[] = {{"notes", case_notes}, {"gdb", case_gdb}};
    return check_run_case("test_probes", cases, sizeof cases / sizeof cases[0], argc, argv);
}
