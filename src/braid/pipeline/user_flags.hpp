// The build flags a user gives on the command line (`braid convert`, `braid run`).
#pragma once
#include <string>
#include <vector>

#include "braid/convert/build_flags.hpp"

namespace braid {

struct UserFlags {
  std::vector<std::string> includes, defines, lib_dirs, lib_names;  // -I -D -L -l
  std::string nvcc_flags;                                           // other nvcc flags, one string
};

// nvcc runs in folders of its own: folders become absolute (-I, -L); the other flags stay as given.
convert::BuildFlags to_build_flags(const UserFlags& user);

}  // namespace braid
