// Test program for stop_when confirmation: never compiled; evaluate.py reads the knob.
// EVOLVE-BLOCK-START speed
constexpr int kSpeed = 3;  // braid:knob 1|2|3|4|5
// EVOLVE-BLOCK-END
