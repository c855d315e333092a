#!/usr/bin/env bash
# The format check: every file named in .clang-format-enforced (one path a line, relative to the
# repository root; # comments) must be unchanged by clang-format under the root's .clang-format.
# The tree is formatted file by file: format a file, then add it to the list, so the list only grows.
# Exit 0: all formatted; 1: some are not (clang-format names the lines); 2: bad list;
# 77: no clang-format here (CI installs it through scripts/setup.sh).
set -uo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
list="$root/.clang-format-enforced"
cf="${CLANG_FORMAT:-clang-format}"
if ! command -v "$cf" >/dev/null 2>&1; then
  echo "check-format: no $cf on PATH: skipped"
  exit 77
fi
[ -f "$list" ] || { echo "check-format: $list: missing"; exit 2; }

files=()
while IFS= read -r line || [ -n "$line" ]; do
  line="${line%%#*}"
  line="${line//[[:space:]]/}"
  [ -n "$line" ] || continue
  [ -f "$root/$line" ] || { echo "check-format: .clang-format-enforced: $line: no such file"; exit 2; }
  files+=("$line")
done <"$list"

cd "$root" || exit 2
bad=0
for f in "${files[@]}"; do
  "$cf" --dry-run --Werror "$f" || { echo "check-format: $f: not formatted (clang-format -i $f)"; bad=1; }
done
[ "$bad" = 0 ] && echo "check-format: ${#files[@]} files formatted ($("$cf" --version))"
exit "$bad"
