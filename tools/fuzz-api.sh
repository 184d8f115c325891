#!/bin/sh
# The fa_ API under libFuzzer, with ASan and UBSan (tools/fuzz-api.c): the
# library's sources and the target compiled together by clang; each input is
# a program of allocator calls whose blocks are checked after every call.
#   tools/fuzz-api.sh [SECONDS [secure]]
# "secure" builds the hardened variant (FA_SECURE) instead.  The corpus
# starts from a few hand-written programs: small blocks, large blocks,
# aligned ones, a realloc chain.
set -eu
secs=${1:-120}
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
defs=""
[ "${2:-}" = secure ] && defs="-DFA_SECURE=1"
# shellcheck disable=SC2086
clang -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all $defs \
    -ftls-model=initial-exec -I"$top/include" -I"$top/src" \
    "$top"/src/*/*.c "$top/tools/fuzz-api.c" -o "$dir/fuzz" -lpthread -ldl -lgcc_s
mkdir "$dir/corpus"
# op byte: op | slot << 3; then the size's two bytes; then flags/alignment.
printf '\000\020\000\000\010\040\000\000\050\000\000\000\020\000\001\000' >"$dir/corpus/small"
printf '\000\000\100\200\011\000\020\300\050\000\000\000\051\000\000\000' >"$dir/corpus/large"
printf '\003\100\000\006\013\000\002\054\033\020\000\012\050\000\000\000' >"$dir/corpus/aligned"
printf '\001\020\000\000\004\000\001\000\004\000\100\200\004\010\000\000\007\000\000\000' >"$dir/corpus/realloc"
"$dir/fuzz" -max_total_time="$secs" -rss_limit_mb=4096 -max_len=4096 -print_final_stats=1 "$dir/corpus"
