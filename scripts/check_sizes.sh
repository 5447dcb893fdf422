#!/usr/bin/env bash
# The size limits of the style guide: a source file of at most
# 800 lines, a function of at most 80. Checks every tracked C++ and CUDA file
# (git ls-files, or find outside a git checkout); the suite runs it
# (ctest -R SourceSizeLimits). The files and functions over a limit before the
# check existed are listed in scripts/size_exceptions.txt with the size they
# had: they may shrink, never grow, and a new one fails. A function is what
# starts at column 0 with a line ending in ") {" (or "const {", ...) and ends
# at the next "}" alone at column 0, as every function of this tree is laid out.
#   scripts/check_sizes.sh            exit 1 and a line per finding
set -euo pipefail
cd "$(dirname "$0")/.."
exceptions=scripts/size_exceptions.txt
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print |
                         sed 's|^\./||' | grep -v '^build')
fi
awk -v exceptions="$exceptions" '
  BEGIN {
    FS = "\t"
    while ((getline line < exceptions) > 0) {
      if (line ~ /^#/ || line == "") continue
      split(line, f, "\t")
      cap[f[1]] = f[2]
    }
    FS = " "
  }
  FNR == 1 { if (prev != "") file_done(prev, prev_lines); start = 0 }
  { prev = FILENAME; prev_lines = FNR }
  /^[A-Za-z].*(\)|const|override|noexcept|final) *\{$/ && !/^(namespace|struct|class|enum|union|extern)/ {
    start = FNR
    sig = $0
    sub(/ *\{$/, "", sig)
  }
  /^\}$/ && start {
    check(FILENAME ":" sig, FNR - start + 1, 80)
    start = 0
  }
  END { if (prev != "") file_done(prev, prev_lines); exit failed }
  function file_done(name, lines) { check(name, lines, 800) }
  function check(key, lines, limit) {
    if (lines <= limit) return
    if (key in cap) {
      if (lines > cap[key] + 0) {
        printf "%s: %d lines, more than the %d it had when the limit of %d came in (scripts/size_exceptions.txt)\n", key, lines, cap[key], limit
        failed = 1
      }
      return
    }
    printf "%s: %d lines, over the limit of %d: split it by concern (the style guide: about 800 lines a file, 80 a function)\n", key, lines, limit
    failed = 1
  }
' "${files[@]}"
