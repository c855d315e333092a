#!/usr/bin/env python3
"""Writes a copy of gen0.cu with some knobs set: make_variant.py gen0.cu out.cu kEngine=Engine::LsaKernel kChunks=4

Only the value on a knob's declaration line changes (as braid's knob mutator does); a name that is
not a knob or a value outside its declared domain is an error (exit 2)."""
import re
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: make_variant.py SOURCE OUT [kName=value ...]")
    src, out, settings = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = open(src).read()
    for setting in settings:
        name, _, value = setting.partition("=")
        pattern = re.compile(r"^([ \t]*constexpr[ \t]+\S+[ \t]+" + re.escape(name) + r"[ \t]*=[ \t]*)([^;\n]+)(;[ \t]*//[ \t]*braid:knob[ \t]*([^\n]*))$", re.M)
        m = pattern.search(text)
        if m is None:
            print(f"make_variant.py: {src}: no knob named {name}", file=sys.stderr)
            sys.exit(2)
        domain = m.group(4).strip().split("|") if m.group(4).strip() else ["true", "false"]
        if value not in domain:
            print(f"make_variant.py: {src}: {value} is not in {name}'s domain {'|'.join(domain)}", file=sys.stderr)
            sys.exit(2)
        text = text[: m.start(2)] + value + text[m.end(2):]
    with open(out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
