#!/usr/bin/env python3
"""The size habit of docs/architecture.md: no source file of the product (src/, device/include/)
over 600 lines and no function over 120 lines, except the data tables listed in
scripts/size-exceptions.txt (one `path` or `path:function` per line, with the reason after a #).

Functions are found by brace matching on the text with comments, strings and raw strings blanked:
a `{` whose statement head ends in `)` (plus qualifiers, a trailing return type or a constructor's
initializer list) outside any other function opens a function; lambdas and blocks count towards
the function that holds them.

Usage: scripts/check-sizes.py [repo root]   Exit 0: clean; 1: violations, one line each.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
ROOTS = ("src", "device/include")
SUFFIXES = {".cpp", ".hpp", ".cu", ".cuh", ".h"}
SCOPE_HEAD = re.compile(r"\b(namespace|class|struct|union|enum)\b[^()]*$|^\s*extern\s+\"C\"\s*$")
FUNCTION_HEAD = re.compile(r"\)\s*(const|noexcept|override|final|mutable|volatile|&|&&|\s)*(->[^{;]*)?$|\)\s*:\s*[\s\S]*\)$|\)\s*:\s*[\s\S]*\}$")


def blank_literals(text):
    """The text with comments, string and char literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]{0,16})\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else "")); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def long_functions(text):
    """(first line, lines, head) of every function longer than the limit."""
    text = blank_literals(text)
    stack, head_start, found = [], 0, []  # stack of (kind, line, head)
    line = 1
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c in ";":
            if not stack or stack[-1][0] == "scope":
                head_start = i + 1
        elif c == "{":
            head = text[head_start:i].strip()
            inside_function = any(k == "function" for k, _, _ in stack)
            if inside_function:
                kind = "block"
            elif SCOPE_HEAD.search(head) or head.endswith("=") or not head:
                kind = "scope"
            elif FUNCTION_HEAD.search(head):
                kind = "function"
            else:
                kind = "scope"
            stack.append((kind, line, " ".join(head.split())))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, first, head = stack.pop()
                if kind == "function" and line - first + 1 > MAX_FUNCTION_LINES:
                    found.append((first, line - first + 1, head))
            if not stack or stack[-1][0] == "scope":
                head_start = i + 1
    return found


def function_name(head):
    """The qualified name before the parameter list of a function's head."""
    m = re.search(r"([~\w:]+)\s*\(", head)
    return m.group(1) if m else head


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    exceptions = set()
    listing = root / "scripts" / "size-exceptions.txt"
    if listing.exists():
        for raw in listing.read_text().splitlines():
            entry = raw.split("#", 1)[0].strip()
            if entry:
                exceptions.add(entry)
    problems = []
    for top in ROOTS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            text = path.read_text(errors="replace")
            lines = text.count("\n") + (0 if text.endswith("\n") else 1)
            if lines > MAX_FILE_LINES and rel not in exceptions:
                problems.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
            for first, n, head in long_functions(text):
                name = function_name(head)
                if f"{rel}:{name}" not in exceptions and rel not in exceptions:
                    problems.append(f"{rel}:{first}: function {name} has {n} lines (at most {MAX_FUNCTION_LINES})")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
