// The build flags a user gives on the command line (`braid convert`, `braid run`).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "braid/convert/build_flags.hpp"
#include "braid/convert/header_inline.hpp"

namespace braid {

struct UserFlags {
  std::vector<std::string> includes, defines, lib_dirs, lib_names;  // -I -D -L -l
  std::string nvcc_flags;                                           // other nvcc flags, one string
  std::vector<std::string> sources;  // the program's other source or object files, linked as they are
  bool keep_headers = false;         // --keep-headers: the program's headers stay files (their NCCL calls host)
};

// nvcc runs in folders of its own: folders become absolute (-I, -L); the other flags stay as given.
convert::BuildFlags to_build_flags(const UserFlags& user);

// The program as braid reads it: its own headers whose code calls NCCL, allocates or frees written
// into it (convert/header_inline.hpp), unless the user keeps them as files.
convert::InlinedSource read_user_program(const std::filesystem::path& input, const UserFlags& user);

}  // namespace braid
