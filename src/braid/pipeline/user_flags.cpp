#include "braid/pipeline/user_flags.hpp"

#include <filesystem>

#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid {

convert::BuildFlags to_build_flags(const UserFlags& user) {
  namespace fs = std::filesystem;
  convert::BuildFlags flags;
  for (const auto& d : user.includes) flags.includes.push_back(fs::absolute(d).string());
  flags.defines = user.defines;
  // The other files of a program split over several (`jacobi.cpp` beside `jacobi_kernels.cu`): nvcc
  // compiles and links them with the program wherever it is linked (the gate, the workload).
  for (const auto& f : user.sources) {
    if (!fs::is_regular_file(f)) throw UserError(f, "no such file (an other source or object file of the program)");
    flags.libs.push_back(fs::absolute(f).lexically_normal().string());
  }
  for (const auto& d : user.lib_dirs) flags.libs.push_back("-L" + fs::absolute(d).string());
  for (const auto& l : user.lib_names) flags.libs.push_back("-l" + l);
  flags.extra = convert::split_flags(user.nvcc_flags);
  return flags;
}

convert::InlinedSource read_user_program(const std::filesystem::path& input, const UserFlags& user) {
  std::string source = read_file(input);
  if (user.keep_headers) return {std::move(source), {}};
  const convert::BuildFlags flags = to_build_flags(user);
  return convert::inline_headers(input.string(), source, convert::SourceContext{flags.includes, flags.defines});
}

}  // namespace braid
