# Thin wrapper over CMake.  BUILD picks the build folder; CC the compiler;
# SANITIZE=1 builds with ASan+UBSan, TSAN=1 with ThreadSanitizer (fa_ API
# only), UBSAN=1 with UndefinedBehaviorSanitizer alone (malloc exported);
# STRESS_SECONDS for the long stress test (120 by default).  make bench: QUICK=1 for
# the smoke run, BENCH_FLAGS for more options of bench/run.py.
BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ifeq ($(SANITIZE),1)
CMAKE_FLAGS += -DFA_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo
endif
ifeq ($(TSAN),1)
CMAKE_FLAGS += -DFA_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo
endif
ifneq ($(STRESS_SECONDS),)
CMAKE_FLAGS += -DFA_STRESS_SECONDS=$(STRESS_SECONDS)
endif
ifeq ($(UBSAN),1)
CMAKE_FLAGS += -DFA_SANITIZE=undefined -DCMAKE_BUILD_TYPE=RelWithDebInfo
endif
ifneq ($(CC),)
ifneq ($(origin CC),default)
CMAKE_FLAGS += -DCMAKE_C_COMPILER=$(CC)
endif
endif

.PHONY: all build test bench install clean

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# ctest, then tests/check_skips.py: every skip must be one that
# tests/skips.txt expects of this kind of build, and the closing line counts
# passed, failed and skipped tests (ctest's own summary counts a skip as a
# pass).
test: build
	rm -f $(BUILD)/ctest-results.xml
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --output-junit ctest-results.xml $(CTEST_FLAGS); \
	  python3 $(CURDIR)/tests/check_skips.py $(CURDIR)/tests/skips.txt . $$?

bench: build
	python3 bench/run.py --build $(BUILD) $(if $(QUICK),--quick,) $(BENCH_FLAGS)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD)
