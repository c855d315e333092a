#include "braid/pipeline/user_flags.hpp"

#include <filesystem>

namespace braid {

convert::BuildFlags to_build_flags(const UserFlags& user) {
  namespace fs = std::filesystem;
  convert::BuildFlags flags;
  for (const auto& d : user.includes) flags.includes.push_back(fs::absolute(d).string());
  flags.defines = user.defines;
  for (const auto& d : user.lib_dirs) flags.libs.push_back("-L" + fs::absolute(d).string());
  for (const auto& l : user.lib_names) flags.libs.push_back("-l" + l);
  flags.extra = convert::split_flags(user.nvcc_flags);
  return flags;
}

}  // namespace braid
