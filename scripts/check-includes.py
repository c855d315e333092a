#!/usr/bin/env python3
"""The module include check: a file of src/braid/<module> may include "braid/<other>/..." only
when <other> is the module itself or a DIRECT dependency declared in CMakeLists.txt
(braid_module(<module> DEPS braid_<other> ...); the cli's are the braid executable's
target_link_libraries). A transitive dependency is not enough: a module that uses another says so.

CMakeLists.txt is the one source of truth; the "depends on" column of docs/architecture.md's
module table is checked against it, so the map cannot drift from the build.

Usage: scripts/check-includes.py [repo root]   (default: this script's repository)
Exit 0: clean; 1: violations, one line each; 2: the inputs cannot be read or parsed.
"""
import pathlib
import re
import sys

SOURCE_SUFFIXES = {".hpp", ".cpp", ".h", ".cuh", ".cu"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]braid/([A-Za-z0-9_]+)/')
MODULE_CALL = re.compile(r"^\s*braid_module\(\s*(\w+)(.*?)\)", re.M | re.S)
CLI_LINK = re.compile(r"^\s*target_link_libraries\(\s*braid\s+(.*?)\)", re.M | re.S)
TABLE_ROW = re.compile(r"^\|\s*`([a-z_0-9]+)/`\s*\|.*\|\s*([^|]*?)\s*\|\s*$")


def fail_input(msg):
    print(f"check-includes: {msg}", file=sys.stderr)
    sys.exit(2)


def braid_targets(text):
    """Module names of the braid_<name> targets in a CMake argument list (others are external)."""
    text = re.sub(r"#.*", "", text)
    return {t[len("braid_"):] for t in text.split() if t.startswith("braid_")}


def declared_deps(cmake_file):
    """{module: set of direct braid dependencies} from CMakeLists.txt."""
    try:
        text = cmake_file.read_text()
    except OSError as e:
        fail_input(f"{cmake_file}: {e.strerror}")
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    deps = {name: braid_targets(args) for name, args in MODULE_CALL.findall(text)}
    cli = CLI_LINK.search(text)
    if not deps or not cli:
        fail_input(f"{cmake_file}: no braid_module(...) calls or no target_link_libraries(braid ...) found")
    deps["cli"] = braid_targets(cli.group(1))
    return deps


def table_deps(doc_file, modules):
    """{module: (line number, set of dependencies)} from the module table of docs/architecture.md."""
    try:
        lines = doc_file.read_text().splitlines()
    except OSError as e:
        fail_input(f"{doc_file}: {e.strerror}")
    rows = {}
    for number, line in enumerate(lines, 1):
        m = TABLE_ROW.match(line)
        if not m:
            continue
        cell = m.group(2)
        if cell == "-":
            names = set()
        elif cell == "all":
            names = set(modules) - {m.group(1)}
        else:
            names = {n.strip() for n in cell.split(",")}
        rows[m.group(1)] = (number, names)
    return rows


def fmt_set(names):
    return ", ".join(sorted(names)) or "-"


def check(root):
    deps = declared_deps(root / "CMakeLists.txt")
    src = root / "src" / "braid"
    if not src.is_dir():
        fail_input(f"{src}: not a folder")
    problems = []

    folders = sorted(p.name for p in src.iterdir() if p.is_dir())
    for name in folders:
        if name not in deps:
            problems.append(f"src/braid/{name}: module folder without braid_module({name} ...) in CMakeLists.txt")
    for name, names in sorted(deps.items()):
        for unknown in sorted(names - set(folders)):
            problems.append(f"CMakeLists.txt: module {name} depends on braid_{unknown}, which has no src/braid/{unknown}")

    # The map must say what the build says.
    doc = root / "docs" / "architecture.md"
    rows = table_deps(doc, deps)
    for name in sorted(deps):
        if name not in rows:
            problems.append(f"docs/architecture.md: module {name} has no row in the module table")
        elif rows[name][1] != deps[name]:
            problems.append(f"docs/architecture.md:{rows[name][0]}: module {name}: the table says "
                            f"[{fmt_set(rows[name][1])}], CMakeLists.txt declares [{fmt_set(deps[name])}]")

    files = 0
    for name in folders:
        allowed = deps.get(name, set()) | {name}
        for path in sorted((src / name).rglob("*")):
            if path.suffix not in SOURCE_SUFFIXES or not path.is_file():
                continue
            files += 1
            rel = path.relative_to(root)
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) not in allowed:
                    problems.append(f"{rel}:{number}: module {name} includes braid/{m.group(1)}/, "
                                    f"not among its declared dependencies [{fmt_set(deps.get(name, set()))}]")
    return files, problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    files, problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"check-includes: {len(problems)} problem(s); declare the dependency in CMakeLists.txt "
              f"(and docs/architecture.md) or move the code to the module that owns it", file=sys.stderr)
        return 1
    print(f"check-includes: {files} files, every include of another module is a declared direct dependency")
    return 0


if __name__ == "__main__":
    sys.exit(main())
