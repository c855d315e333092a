// The compiler flags of a user's program, given to `braid convert` / `braid run` the way a
// compiler takes them (-I, -D, -L, -l, --nvcc-flags "..."), plus MPI's own flags found by asking
// its compiler wrapper (`mpicxx --showme:compile` / `--showme:link`) when the program includes
// <mpi.h>. The same flags serve the compile check, the gate and the workload braid writes.
#pragma once
#include <string>
#include <vector>

namespace braid::convert {

struct BuildFlags {
  std::vector<std::string> includes;  // directories (-I)
  std::vector<std::string> defines;   // NAME or NAME=VALUE (-D)
  std::vector<std::string> libs;      // link arguments: -L<dir>, -l<name>
  std::vector<std::string> extra;     // other nvcc flags, as given
  bool mpi = false;                   // the program includes <mpi.h>: run it under mpirun

  // nvcc flags for compiling: braid's defaults, then -D, -I and the extra flags.
  std::vector<std::string> compile_flags() const;
  bool empty() const { return includes.empty() && defines.empty() && libs.empty() && extra.empty(); }
};

// Splits "a b 'c d'" on blanks (single or double quotes group).
std::vector<std::string> split_flags(const std::string& text);

// The user's flags plus MPI's when `source` includes mpi.h. Throws UserError (naming `file`) when
// the program includes mpi.h and no MPI compiler wrapper answers, unless the user gave -I flags.
BuildFlags resolve_build_flags(const std::string& file, const std::string& source, BuildFlags user);

}  // namespace braid::convert
