#!/usr/bin/env python3
"""braid's evaluator for a KernelBench-format problem (written by `braid init --kernelbench`).

    python3 evaluate.py --program_path P --results_dir D [--seed S] [--trials 5]
                        [--atol 1e-2] [--rtol 1e-2] [--reps 30] [--no-compile]

reference.py (beside this file) is the problem: Model, get_inputs(), get_init_inputs(). P is a
candidate defining ModelNew. Steps:
  1. import P (its inline CUDA extension compiles here: a compiler error is build_failed);
  2. correctness: `trials` trials, each with fresh random inputs from its own seed; Model and
     ModelNew are built from get_init_inputs() under the same seed (ModelNew takes Model's
     parameters when both have the same state_dict layout); outputs must match in shape and
     dtype and be allclose(atol, rtol); the allocator's free memory is filled with NaN before
     each ModelNew call, and an output that shares storage with an earlier trial's output is
     rejected (no cached results);
  3. timing: CUDA events around single calls, interleaved rounds of ModelNew, eager Model and
     torch.compile(Model) on the first trial's inputs, medians; ModelNew's last timed output is
     checked again.
combined_score = eager median / ModelNew median (speedup over eager PyTorch).

The verdict: under braid (BRAID_RESULT_FD set) one record through braid's verdict channel, the
nonce read before the candidate is imported; by hand D/correct.json and D/metrics.json.
Python and PyTorch are the user's; braid never imports them.
"""
import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
CHANNEL_NAMES = ("BRAID_RESULT_" + "FD", "braid_" + "verdict")  # split: this file is not a candidate
MAX_ERROR_CHARS = 3000


class Failure(Exception):
    """A verdict of `kind` (braid's failure kinds: build_failed, run_failed, verify_failed, ...)."""

    def __init__(self, kind, error):
        super().__init__(error)
        self.kind = kind
        self.error = error


# ---- verdict ---------------------------------------------------------------------------------

def open_channel():
    """(fd, nonce) of braid's verdict channel, or (None, "") run by hand. Called first thing."""
    name = os.environ.get(CHANNEL_NAMES[0])
    if not name:
        return None, ""
    fd = int(name)
    os.set_inheritable(fd, False)  # never passed on to anything the candidate starts
    nonce = b""
    while len(nonce) < 128:
        ch = os.read(fd, 1)
        if not ch or ch == b"\n":
            break
        nonce += ch
    return fd, nonce.decode(errors="replace")


def write_json(path, value):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def report(channel, results_dir, seed, verdict, metrics, timed_ms):
    """verdict: {"correct", "error"[, "failure"]}; metrics: {} or the metrics.json fields."""
    fd, nonce = channel
    if fd is None:
        write_json(os.path.join(results_dir, "correct.json"), verdict)
        if metrics:
            write_json(os.path.join(results_dir, "metrics.json"), metrics)
        return
    record = {CHANNEL_NAMES[1]: 1, "token": nonce, "mode": "bench", "seed": seed, "rank": 0,
              "timed_ms": timed_ms, "correct": verdict["correct"], "error": verdict["error"]}
    if "failure" in verdict:
        record["failure"] = verdict["failure"]
    record.update(metrics)
    os.write(fd, (json.dumps(record) + "\n").encode())


def failure_metrics(kind, error):
    first = error.splitlines()[0] if error else kind
    return {"combined_score": 0.0, "public": {}, "private": {"failure": kind}, "text_feedback": first[:500]}


# ---- loading ---------------------------------------------------------------------------------

def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def short_trace(exc):
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-MAX_ERROR_CHARS:]


def load_candidate(program_path):
    with open(program_path, errors="replace") as f:
        text = f.read()
    for name in CHANNEL_NAMES:
        if name in text:
            raise Failure("verify_failed", "the candidate names braid's verdict channel (%s)" % name)
    try:
        module = load_module(program_path, "braid_candidate")
    except Exception as exc:  # noqa: BLE001 - any error importing the candidate is its verdict
        text = short_trace(exc)
        compile_error = "Error building extension" in text or "CalledProcessError" in text or "ninja" in text
        raise Failure("build_failed" if compile_error else "run_failed", "importing the candidate failed:\n" + text)
    if not hasattr(module, "ModelNew"):
        raise Failure("run_failed", "the candidate defines no class ModelNew")
    return module


# ---- tensors ---------------------------------------------------------------------------------

def to_device(value, device):
    import torch
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def clone(value):
    import torch
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone(v) for v in value)
    return value


def flatten(value):
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out.extend(flatten(v))
        return out
    return [value]


def mismatch(expected, got, atol, rtol):
    """"" when `got` matches `expected`, else why not."""
    import torch
    want, have = flatten(expected), flatten(got)
    if len(want) != len(have):
        return "ModelNew returned %d outputs, Model %d" % (len(have), len(want))
    for i, (w, h) in enumerate(zip(want, have)):
        if not isinstance(w, torch.Tensor):
            if w != h:
                return "output %d is %r, expected %r" % (i, h, w)
            continue
        if not isinstance(h, torch.Tensor):
            return "output %d is a %s, expected a tensor" % (i, type(h).__name__)
        if tuple(h.shape) != tuple(w.shape):
            return "output %d has shape %s, expected %s" % (i, tuple(h.shape), tuple(w.shape))
        if h.dtype != w.dtype:
            return "output %d has dtype %s, expected %s" % (i, h.dtype, w.dtype)
        if not torch.allclose(h, w, atol=atol, rtol=rtol):
            diff = (h.double() - w.double()).abs()
            bad = int((diff > atol + rtol * w.double().abs()).sum()) if diff.numel() else 0
            worst = float(torch.nan_to_num(diff, nan=math.inf).max()) if diff.numel() else 0.0
            return "output %d differs: %d of %d values beyond atol=%g rtol=%g (max abs diff %.4g)" % (
                i, bad, w.numel(), atol, rtol, worst)
    return ""


def storages(value):
    import torch
    return {t.untyped_storage().data_ptr() for t in flatten(value) if isinstance(t, torch.Tensor) and t.numel()}


def poison_free_memory(nbytes, device):
    """Fills the caching allocator's free blocks of about this size with NaN, so that an
    output allocated but never written reads as NaN rather than an earlier correct result."""
    import torch
    for size in (nbytes, nbytes // 2, nbytes // 4):
        if size >= 4:
            torch.full((size // 4,), float("nan"), dtype=torch.float32, device=device)
    torch.cuda.synchronize(device)


# ---- models ----------------------------------------------------------------------------------

def derived_seed(seed, trial):
    """The seed of one trial: distinct per trial, within torch.manual_seed's range."""
    return (seed * 1009 + trial) % (1 << 63)


def build_models(reference, candidate, seed, device):
    import torch
    seed = derived_seed(seed, 0)
    torch.manual_seed(seed)
    init = reference.get_init_inputs()
    torch.manual_seed(seed)
    model = reference.Model(*init).to(device)
    torch.manual_seed(seed)
    try:
        model_new = candidate.ModelNew(*init).to(device)
    except Exception as exc:  # noqa: BLE001
        raise Failure("run_failed", "ModelNew(*get_init_inputs()) failed:\n" + short_trace(exc))
    # Same parameters when the layouts agree, so a rewrite that keeps Model's parameters is
    # compared on equal weights whatever order it draws them in.
    ref_state, new_state = model.state_dict(), model_new.state_dict()
    if ref_state.keys() == new_state.keys() and all(ref_state[k].shape == new_state[k].shape for k in ref_state):
        model_new.load_state_dict(ref_state)
    return model, model_new


def check_correctness(reference, model, model_new, args, device):
    import torch
    earlier, held = [], set()  # earlier trials' outputs, kept alive, and their storages
    for trial in range(args.trials):
        trial_seed = derived_seed(args.seed, trial)
        torch.manual_seed(trial_seed)
        inputs = to_device(reference.get_inputs(), device)
        expected = model(*clone(inputs))
        out_bytes = sum(t.numel() * t.element_size() for t in flatten(expected) if isinstance(t, torch.Tensor))
        poison_free_memory(2 * out_bytes, device)
        try:
            got = model_new(*clone(inputs))
            torch.cuda.synchronize(device)
        except Exception as exc:  # noqa: BLE001
            raise Failure("run_failed", "ModelNew failed in trial %d:\n%s" % (trial, short_trace(exc)))
        why = mismatch(expected, got, args.atol, args.rtol)
        if not why and storages(got) & held:
            why = "an output shares memory with an earlier trial's output (results may not be reused)"
        if why:
            raise Failure("verify_failed", "trial %d (seed %d): %s" % (trial, trial_seed, why))
        earlier.append(got)
        held |= storages(got)


def time_calls(candidates, inputs, reps, device):
    """{name: [ms per call]} for each (name, fn), in interleaved rounds after a warm-up."""
    import torch
    times = {name: [] for name, _ in candidates}
    last = {}
    for name, fn in candidates:
        for _ in range(3):
            fn(*inputs)
    torch.cuda.synchronize(device)
    for _ in range(reps):
        for name, fn in candidates:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            last[name] = fn(*inputs)
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end))
    return times, last


def benchmark(reference, model, model_new, args, device):
    """(metrics, timed_ms): ModelNew against eager Model and torch.compile(Model)."""
    import torch
    torch.manual_seed(derived_seed(args.seed, 0))
    inputs = to_device(reference.get_inputs(), device)
    expected = model(*clone(inputs))
    calls = [("new", model_new), ("eager", model)]
    notes = []
    if args.compile:
        try:
            compiled = torch.compile(model)
            compiled(*clone(inputs))  # compiles outside the timed region
            calls.append(("compile", compiled))
        except Exception as exc:  # noqa: BLE001 - a baseline missing is a note, not a failure
            first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            notes.append("torch.compile unavailable: " + first)
    try:
        times, last = time_calls(calls, inputs, args.reps, device)
    except Exception as exc:  # noqa: BLE001
        raise Failure("bench_failed", "timing failed:\n" + short_trace(exc))
    why = mismatch(expected, last["new"], args.atol, args.rtol)
    if why:
        raise Failure("verify_failed", "ModelNew's last timed output is wrong: " + why)
    med = {name: statistics.median(t) for name, t in times.items()}
    timed_ms = sum(sum(t) for t in times.values())
    public = {"ms": med["new"], "eager_ms": med["eager"], "speedup_eager": med["eager"] / med["new"]}
    feedback = "ModelNew median %.4f ms, eager %.4f ms (%.3fx)" % (med["new"], med["eager"], public["speedup_eager"])
    if "compile" in med:
        public.update(compile_ms=med["compile"], speedup_compile=med["compile"] / med["new"])
        feedback += ", torch.compile %.4f ms (%.3fx)" % (med["compile"], public["speedup_compile"])
    if notes:
        feedback += "; " + "; ".join(notes)
    private = {"reps": args.reps, "trials": args.trials, "device": torch.cuda.get_device_name(device),
               "torch": torch.__version__}
    return {"combined_score": public["speedup_eager"], "public": public, "private": private,
            "text_feedback": feedback}, timed_ms


# ---- main ------------------------------------------------------------------------------------

def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program_path", required=True)
    parser.add_argument("--results_dir", required=True)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("BRAID_SEED", "0")))
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--atol", type=float, default=1e-2)
    parser.add_argument("--rtol", type=float, default=1e-2)
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="skip the torch.compile baseline")
    return parser.parse_args()


def evaluate(args):
    """(metrics, timed_ms); raises Failure."""
    try:
        import torch
    except ImportError as exc:
        raise Failure("run_failed", "PyTorch is not importable by %s: %s" % (sys.executable, exc))
    if not torch.cuda.is_available():
        raise Failure("run_failed", "no CUDA device visible to PyTorch")
    device = torch.device("cuda", torch.cuda.current_device())
    sys.path.insert(0, HERE)
    reference = load_module(os.path.join(HERE, "reference.py"), "braid_reference")
    candidate = load_candidate(os.path.abspath(args.program_path))
    with torch.no_grad():
        model, model_new = build_models(reference, candidate, args.seed, device)
        check_correctness(reference, model, model_new, args, device)
        return benchmark(reference, model, model_new, args, device)


def main():
    channel = open_channel()  # before any candidate code exists in this process
    args = parse_args()
    results_dir = os.path.abspath(args.results_dir)
    os.makedirs(results_dir, exist_ok=True)
    for name in ("correct.json", "metrics.json"):
        if os.path.exists(os.path.join(results_dir, name)):
            os.remove(os.path.join(results_dir, name))
    try:
        metrics, timed_ms = evaluate(args)
    except Exception as exc:  # noqa: BLE001 - every ending is a verdict, never a missing one
        f = exc if isinstance(exc, Failure) else Failure("run_failed", "evaluation failed:\n" + short_trace(exc))
        error = f.error[-MAX_ERROR_CHARS:]
        report(channel, results_dir, args.seed, {"correct": False, "error": error, "failure": f.kind},
               failure_metrics(f.kind, error), 0.0)
        return 0
    report(channel, results_dir, args.seed, {"correct": True, "error": ""}, metrics, timed_ms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
