// The workload folder `braid run` writes for a converted program: workload.yaml (the seed
// folder's own when it has a GPU one, else one generated for the program), config.yaml and a
// README. Plain values in and out; the caller writes the files.
#pragma once
#include <filesystem>
#include <string>

#include "braid/convert/build_flags.hpp"

namespace braid {

struct SeedWorkloadInput {
  std::filesystem::path input;  // the seed, as given
  std::string source;           // its text
  int ranks = 2;
  bool uses_harness = false;  // the seed takes braid's harness arguments (--size)
  convert::BuildFlags flags;  // as the gate used them
  std::string gate_status;    // verified / unverified
};

struct SeedWorkloadFiles {
  std::string workload_yaml, config_yaml, readme;
};

// Reads the seed folder's own workload.yaml and config.yaml when they exist.
SeedWorkloadFiles seed_workload_files(const SeedWorkloadInput& in);

}  // namespace braid
