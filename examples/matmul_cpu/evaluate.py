#!/usr/bin/env python3
"""External evaluator for matmul_cpu with the CUCo/ShinkaEvolve contract.

    python3 evaluate.py --program_path P --results_dir D [--seed S]

Builds P with g++, runs its verify and bench modes (the program's frozen harness writes
D/correct.json and D/metrics.json), and on any failure writes the verdict itself:
correct.json {"correct": false, "error": ..., "failure": <braid failure kind>} and
metrics.json {"combined_score": 0, ...}. Uses only the Python standard library.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))  # braid_split.hpp, which program.cpp includes
BUILD_TIMEOUT_S = 60
RUN_TIMEOUT_S = 30
BENCH_TIMEOUT_S = 60
MAX_ERROR_BYTES = 3000


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def fail(results_dir, kind, error):
    write_json(os.path.join(results_dir, "correct.json"),
               {"correct": False, "error": error, "failure": kind})
    write_json(os.path.join(results_dir, "metrics.json"),
               {"combined_score": 0.0, "public": {}, "private": {"failure": kind},
                "text_feedback": error.splitlines()[0] if error else kind})
    return 0


def trim_compiler_errors(text, program_path):
    """First errors with their source and caret lines; notes and include chains dropped."""
    text = text.replace(program_path, os.path.basename(program_path))
    kept, keeping, errors = [], False, 0
    for line in text.splitlines():
        if ": error:" in line or ": fatal error:" in line:
            keeping = errors < 4
            errors += 1
            if keeping:
                kept.append(line)
        elif ": note:" in line or ": warning:" in line or line.startswith("In file included") \
                or ": In function" in line or "required from" in line:
            keeping = False
        elif keeping:
            kept.append(line)
    out = "\n".join(kept) if kept else text[-MAX_ERROR_BYTES:]
    return out[:MAX_ERROR_BYTES]


def describe_end(proc):
    if proc.returncode < 0:
        sig = -proc.returncode
        return "killed by signal %s" % signal.Signals(sig).name if sig in signal.valid_signals() else "signal %d" % sig
    return "exit code %d" % proc.returncode


def run_mode(binary, mode, seed, results_dir, timeout_s):
    """Returns (failure kind or None, error text)."""
    try:
        proc = subprocess.run([binary, "--mode", mode, "--seed", str(seed), "--results_dir", results_dir],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout", "%s timed out after %d s" % (mode, timeout_s)
    verdict = None
    try:
        with open(os.path.join(results_dir, "correct.json")) as f:
            verdict = json.load(f)
    except (OSError, ValueError):
        pass
    if verdict is not None and verdict.get("correct") is False:
        return "verify_failed", verdict.get("error") or "verification failed"
    if proc.returncode != 0:
        stderr = proc.stderr.decode(errors="replace")[-1500:]
        return ("run_failed" if mode == "verify" else "bench_failed"), "%s: %s\n%s" % (mode, describe_end(proc), stderr)
    if verdict is None:
        return "run_failed", "%s exited 0 but wrote no correct.json" % mode
    return None, ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program_path", required=True)
    parser.add_argument("--results_dir", required=True)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("BRAID_SEED", "0")))
    args = parser.parse_args()
    program_path = os.path.abspath(args.program_path)
    results_dir = os.path.abspath(args.results_dir)
    os.makedirs(results_dir, exist_ok=True)
    for name in ("correct.json", "metrics.json"):
        if os.path.exists(os.path.join(results_dir, name)):
            os.remove(os.path.join(results_dir, name))

    with tempfile.TemporaryDirectory(prefix="matmul_eval_") as build_dir:
        binary = os.path.join(build_dir, "program")
        try:
            build = subprocess.run(["g++", "-O2", "-std=c++17", "-I", HERE, "-o", binary, program_path],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return fail(results_dir, "timeout", "build timed out after %d s" % BUILD_TIMEOUT_S)
        if build.returncode != 0:
            return fail(results_dir, "build_failed",
                        trim_compiler_errors(build.stdout.decode(errors="replace"), program_path))

        kind, error = run_mode(binary, "verify", args.seed, results_dir, RUN_TIMEOUT_S)
        if kind:
            return fail(results_dir, kind, error)
        kind, error = run_mode(binary, "bench", args.seed, results_dir, BENCH_TIMEOUT_S)
        if kind:
            return fail(results_dir, kind, error)
        try:
            with open(os.path.join(results_dir, "metrics.json")) as f:
                json.load(f)["combined_score"]
        except (OSError, ValueError, KeyError):
            return fail(results_dir, "bench_failed", "bench wrote no metrics.json with combined_score")
    return 0


if __name__ == "__main__":
    sys.exit(main())
