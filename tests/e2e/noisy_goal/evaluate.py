#!/usr/bin/env python3
"""Evaluator with one lucky measurement: `ratio` (lower is better) by the program's kSpeed knob.

kSpeed 4 measures 1.0 every time; kSpeed 3 measures 1.0 the first time it is evaluated and 1.3
on every later evaluation (a measurement that does not repeat); the others 2.0 - 0.1 * kSpeed.
Evaluations are counted per program text in state/ beside this file (the test removes it); a file
named `slow` beside it makes every evaluation take half a second (room for a kill)."""
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
text = open(args.program_path).read()
speed = int(re.search(r"kSpeed = (\d+);", text).group(1))
here = os.path.dirname(os.path.abspath(__file__))
if os.path.exists(os.path.join(here, "slow")):
    time.sleep(0.5)
state = os.path.join(here, "state")
os.makedirs(state, exist_ok=True)
counter = os.path.join(state, hashlib.sha256(text.encode()).hexdigest())
seen = int(open(counter).read()) if os.path.exists(counter) else 0
open(counter, "w").write(str(seen + 1))
ratio = 1.0 if speed == 4 or (speed == 3 and seen == 0) else 1.3 if speed == 3 else 2.0 - 0.1 * speed
os.makedirs(args.results_dir, exist_ok=True)
json.dump({"correct": True}, open(os.path.join(args.results_dir, "correct.json"), "w"))
json.dump({"combined_score": 1.0 / ratio, "public": {"ratio": ratio, "evaluation": seen + 1}, "private": {}},
          open(os.path.join(args.results_dir, "metrics.json"), "w"))
