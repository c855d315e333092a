#!/usr/bin/env python3
"""Scores by the program's kLevel knob, with one lucky measurement.

kLevel 1 scores 1.0, 2 scores 1.5, 4 scores 2.0, every time. kLevel 3 scores 5.0 the first time
it is evaluated and 1.2 on every later evaluation: a timing that does not repeat. kLevel 0 gives a
wrong answer (the seed that fails its verification). Evaluations are counted per program text in
state/ beside this file. With a file slow_remeasure beside it, every re-measurement (a results
folder under remeasure/) takes 10 minutes: a re-run that a stop must cut short."""
import argparse
import hashlib
import json
import os
import re
import time

ap = argparse.ArgumentParser()
ap.add_argument("--program_path", required=True)
ap.add_argument("--results_dir", required=True)
ap.add_argument("--seed", default="0")
args = ap.parse_args()
here = os.path.dirname(os.path.abspath(__file__))
if os.path.exists(os.path.join(here, "slow_remeasure")) and "remeasure" in args.results_dir:
    time.sleep(600)
text = open(args.program_path).read()
level = int(re.search(r"kLevel = (\d+);", text).group(1))
state = os.path.join(here, "state")
os.makedirs(state, exist_ok=True)
counter = os.path.join(state, hashlib.sha256(text.encode()).hexdigest())
seen = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(seen + 1))
os.makedirs(args.results_dir, exist_ok=True)
if level == 0:
    json.dump({"correct": False, "error": "wrong answer: got 41, expected 42"}, open(os.path.join(args.results_dir, "correct.json"), "w"))
    raise SystemExit(0)
score = {1: 1.0, 2: 1.5, 4: 2.0}.get(level, 5.0 if seen == 0 else 1.2)
json.dump({"correct": True}, open(os.path.join(args.results_dir, "correct.json"), "w"))
json.dump({"combined_score": score, "public": {"evaluation": seen + 1}, "private": {}},
          open(os.path.join(args.results_dir, "metrics.json"), "w"))
