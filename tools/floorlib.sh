#!/bin/sh
# The memory floor's stand-in (#24): this tree's libfastalloc.so with every
# idle-memory cache off by default: threads keep no all-free span, spare or
# large block (thread_cache_bytes 0), and the page heap purges every free
# page at once (purge_delay_ms 0).  What it still holds above the blocks in
# use is the design's own cost (free blocks inside spans that also hold
# blocks in use, metadata, the library), not idle memory; make bench then
# shows how lean fastalloc could be by giving idle memory back alone:
#   tools/floorlib.sh /tmp/floor
#   make bench BENCH_FLAGS="--lib floor=/tmp/floor/build/libfastalloc.so"
# It is slow (whole rows 10 to 150 times): a floor, not a build to use.
set -eu
dir=${1:?usage: tools/floorlib.sh DIR}
top=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dir"
mkdir -p "$dir"
(cd "$top" && git archive HEAD) | tar -x -C "$dir"
opts="$dir/src/00-base/options.c"
# The two defaults, in the options table: grep fails the script when the
# table's text changed and the edit would silently do nothing.
grep -q '{0}, 1000, "1000",' "$opts"
grep -q '(long long)2 << 20, "2M",' "$opts"
sed -i -e 's/{0}, 1000, "1000",/{0}, 0, "0",/' -e 's/(long long)2 << 20, "2M",/(long long)0, "0",/' "$opts"
cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$dir/build" --target fastalloc -j"$(nproc)" >/dev/null
echo "$dir/build/libfastalloc.so"
