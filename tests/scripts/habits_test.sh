#!/usr/bin/env bash
# CTest `cpu`: the habit checks catch what they are for, on small fake trees. The include check
# (scripts/check-includes.py) passes a tree whose modules include only themselves and declared
# direct dependencies, and fails one that includes a transitive-only dependency, one whose map
# disagrees with CMakeLists.txt, and one with an undeclared module folder; unreadable CMake is
# exit 2. The format check (scripts/check-format.sh) passes a formatted listed file, fails an
# unformatted one, and refuses a list naming a missing file (exit 2).
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect() {  # name got want
  if [ "$2" = "$3" ]; then echo "ok   $1"; else echo "FAIL $1: got '$2', want '$3'"; fails=$((fails + 1)); fi
}
includes() { python3 "$src/scripts/check-includes.py" "$1" >"$tmp/out" 2>&1; echo $?; }

# util <- low <- high: high may include low, not util (transitive only); cli uses every module.
t=$tmp/tree
mkdir -p "$t/docs" "$t/src/braid/util" "$t/src/braid/low" "$t/src/braid/high" "$t/src/braid/cli"
cat >"$t/CMakeLists.txt" <<'CMAKE'
braid_module(util DEPS fmt::fmt)
braid_module(low  DEPS braid_util)
braid_module(high DEPS braid_low Threads::Threads)
target_link_libraries(braid PRIVATE braid_high braid_low braid_util)
CMAKE
cat >"$t/docs/architecture.md" <<'DOC'
| folder | concept | depends on |
|---|---|---|
| `util/` | helpers | - |
| `low/` | low things | util |
| `high/` | high things | low |
| `cli/` | commands | all |
DOC
echo '#include "braid/util/a.hpp"' >"$t/src/braid/low/b.hpp"
printf '#include <vector>\n#include "braid/low/b.hpp"\n#include "braid/high/c.hpp"\n' >"$t/src/braid/high/c.cpp"
printf '#include "braid/high/c.hpp"\n#include "braid/util/a.hpp"\n' >"$t/src/braid/cli/main.cpp"
expect "includes: clean tree passes" "$(includes "$t")" 0

echo '#include "braid/util/a.hpp"' >>"$t/src/braid/high/c.cpp"
expect "includes: a transitive-only dependency fails" "$(includes "$t")" 1
expect "includes: the violation names file:line, modules and the declared deps" \
  "$(head -1 "$tmp/out")" "src/braid/high/c.cpp:4: module high includes braid/util/, not among its declared dependencies [low]"

sed -i 's/braid_module(high DEPS braid_low/braid_module(high DEPS braid_low braid_util/' "$t/CMakeLists.txt"
expect "includes: CMake and map disagree" "$(includes "$t")" 1
expect "includes: the disagreement names the row" "$(head -1 "$tmp/out")" \
  "docs/architecture.md:5: module high: the table says [low], CMakeLists.txt declares [low, util]"
sed -i 's/| high things | low |/| high things | low, util |/' "$t/docs/architecture.md"
expect "includes: declared and mapped passes" "$(includes "$t")" 0

mkdir -p "$t/src/braid/stray"
expect "includes: a module folder without braid_module fails" "$(includes "$t")" 1
rmdir "$t/src/braid/stray"
echo 'project(x)' >"$t/CMakeLists.txt"
expect "includes: CMake without modules is bad input" "$(includes "$t")" 2

if command -v clang-format >/dev/null 2>&1; then
  f=$tmp/fmt
  mkdir -p "$f/scripts"
  cp "$src/.clang-format" "$f/"
  printf 'int add(int a, int b) { return a + b; }\n' >"$f/good.cpp"
  printf 'int  add(int a,int b){return a+b;}\n' >"$f/bad.cpp"
  printf '# held files\ngood.cpp\n' >"$f/.clang-format-enforced"
  bash "$src/scripts/check-format.sh" "$f" >/dev/null 2>&1
  expect "format: a formatted listed file passes" $? 0
  echo 'bad.cpp  # not yet' >>"$f/.clang-format-enforced"
  bash "$src/scripts/check-format.sh" "$f" >/dev/null 2>&1
  expect "format: an unformatted listed file fails" $? 1
  echo 'gone.cpp' >>"$f/.clang-format-enforced"
  bash "$src/scripts/check-format.sh" "$f" >/dev/null 2>&1
  expect "format: a listed file that does not exist is bad input" $? 2
else
  echo "skip format cases: no clang-format on PATH"
fi

[ "$fails" = 0 ] && echo "habits: all cases pass"
exit "$fails"
