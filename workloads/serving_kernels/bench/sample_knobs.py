#!/usr/bin/env python3
"""Valid knob vectors of a gen0.cu, drawn at random: sample_knobs.py gen0.cu N [SEED]

Prints N lines "kName=value ..." (all knobs), each satisfying every braid:require line and none
equal to the defaults or to one another (fewer when the space is smaller). The first line sets
every knob to the last value of its domain where the constraints allow (the far corner). Used by
scripts/gpu.sh bench serving-kernels --verify to check knob vectors other than the defaults on a GPU."""
import itertools
import random
import re
import sys

KNOB = re.compile(r"^[ \t]*constexpr[ \t]+(\S+)[ \t]+(\w+)[ \t]*=[ \t]*([^;\n]+);[ \t]*//[ \t]*braid:knob[ \t]*([^\n]*)$", re.M)
REQUIRE = re.compile(r"//[ \t]*braid:require[ \t]+([^\n]+)")


def parse(text):
    knobs = []
    for m in KNOB.finditer(text):
        domain = m.group(4).strip().split("|") if m.group(4).strip() else ["true", "false"]
        knobs.append((m.group(2), m.group(3).strip(), domain))
    return knobs, [m.group(1).strip() for m in REQUIRE.finditer(text)]


def to_python(expr):
    expr = re.sub(r"\b(\w+::\w+)\b", r"'\1'", expr)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    expr = re.sub(r"(?<![/])/(?![/])", "//", expr)
    return re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", expr))


def value(v):
    if v in ("true", "false"):
        return v == "true"
    if re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def valid(vector, requires):
    env = {name: value(v) for name, v in vector.items()}
    return all(eval(to_python(r), {}, env) for r in requires)  # noqa: S307 -- our own program's constraints


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    knobs, requires = parse(open(path).read())
    defaults = {name: v for name, v, _ in knobs}
    space = [dict(zip([k[0] for k in knobs], combo)) for combo in itertools.product(*[k[2] for k in knobs])]
    space = [v for v in space if valid(v, requires) and v != defaults]
    if not valid(defaults, requires):
        sys.exit(f"sample_knobs.py: {path}: the defaults violate a braid:require line")
    # The far corner: the last domain value of each knob in turn, kept where the constraints allow.
    corner = dict(defaults)
    for name, _, domain in knobs:
        trial = dict(corner, **{name: domain[-1]})
        if valid(trial, requires):
            corner = trial
    chosen = [corner] if corner != defaults else []
    rest = [v for v in space if v != corner]
    chosen += rng.sample(rest, min(len(rest), max(0, n - len(chosen))))
    for v in chosen[:n]:
        print(" ".join(f"{k}={x}" for k, x in v.items()))


if __name__ == "__main__":
    main()
