// Test program for the confirmation of a new best: never compiled; evaluate.py reads the knob.
// EVOLVE-BLOCK-START level
constexpr int kLevel = 1;  // braid:knob 1|2|3|4
// EVOLVE-BLOCK-END
