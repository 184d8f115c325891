#!/bin/sh
# cppcheck on src/: warnings, portability and performance, which must be
# clean (CI fails otherwise).  Its style checks are not run: on this code
# they report conditions as always false that are not (value-flow through
# min() of a count), and names that shadow functions on purpose.
#   tools/lint.sh
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
cppcheck --quiet --error-exitcode=1 --enable=warning,portability,performance --std=c11 \
    --inline-suppr --suppress=missingIncludeSystem -I src -I include src
echo "cppcheck: src/ clean"
