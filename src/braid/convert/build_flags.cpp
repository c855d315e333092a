#include "braid/convert/build_flags.hpp"

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "braid/eval/nvcc_builder.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid::convert {

std::vector<std::string> BuildFlags::compile_flags() const {
  // A default the user gives otherwise (`-std=c++17` for a program that is not C++20 code, `-O0`)
  // is left out, not overridden with nvcc's "incompatible redefinition" warning.
  auto option = [](const std::string& flag) {
    return flag.rfind("-O", 0) == 0 ? "-O" : flag.substr(0, flag.find('='));
  };
  std::vector<std::string> f;
  for (const std::string& d : default_nvcc_flags())
    if (std::none_of(extra.begin(), extra.end(), [&](const std::string& e) { return option(e) == option(d); }))
      f.push_back(d);
  for (const auto& d : defines) f.push_back("-D" + d);
  for (const auto& i : includes) f.push_back("-I" + i);
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

std::vector<std::string> split_flags(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  bool any = false;
  for (char c : text) {
    if (quote) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      any = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (any || !cur.empty()) out.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += c;
    }
  }
  if (any || !cur.empty()) out.push_back(cur);
  return out;
}

namespace {

// `mpicxx --showme:<what>` (Open MPI) or `mpicxx -show` (MPICH), as flags; empty when neither answers.
std::vector<std::string> ask_mpi(const std::string& what) {
  for (const char* wrapper : {"mpicxx", "mpic++", "mpicc"}) {
    SubprocessOptions o;
    o.argv = {wrapper, "--showme:" + what};
    o.timeout_s = 20;
    SubprocessResult r = run_subprocess(o);
    if (r.succeeded() && !r.stdout_text.empty()) return split_flags(r.stdout_text);
    o.argv = {wrapper, what == "compile" ? "-compile_info" : "-link_info"};
    r = run_subprocess(o);
    if (r.succeeded() && !r.stdout_text.empty()) {
      std::vector<std::string> out;
      for (const std::string& f : split_flags(r.stdout_text))
        if (f.rfind("-I", 0) == 0 || f.rfind("-L", 0) == 0 || f.rfind("-l", 0) == 0 || f.rfind("-Wl,", 0) == 0)
          out.push_back(f);
      return out;
    }
  }
  return {};
}

// Whether `source` includes mpi.h, itself or through the headers it includes with quotes (llm.c's
// train_gpt2.cu through llmc/zero.cuh), found beside the including file or in `dirs`.
bool includes_mpi(const std::filesystem::path& from, const std::string& source, const std::vector<std::string>& dirs,
                  std::set<std::string>& seen) {
  static const std::regex kMpiInclude(R"(#\s*include\s*[<"]mpi\.h[>"])");
  static const std::regex kQuoted(R"re(#\s*include\s*"([^"]+)")re");
  if (std::regex_search(source, kMpiInclude)) return true;
  for (std::sregex_iterator it(source.begin(), source.end(), kQuoted), end; it != end; ++it) {
    std::vector<std::filesystem::path> candidates = {from / (*it)[1].str()};
    for (const std::string& d : dirs) candidates.push_back(std::filesystem::path(d) / (*it)[1].str());
    for (const auto& c : candidates) {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(c, ec) ||
          !seen.insert(std::filesystem::weakly_canonical(c, ec).string()).second)
        continue;
      try {
        if (includes_mpi(c.parent_path(), read_file(c), dirs, seen)) return true;
      } catch (const std::exception&) {
      }
      break;
    }
  }
  return false;
}

}  // namespace

BuildFlags resolve_build_flags(const std::string& file, const std::string& source, BuildFlags user) {
  std::set<std::string> seen;
  if (!includes_mpi(std::filesystem::path(file).parent_path(), source, user.includes, seen)) return user;
  user.mpi = true;
  const std::vector<std::string> compile = ask_mpi("compile");
  if (compile.empty()) {
    if (!user.includes.empty()) return user;  // the user says where mpi.h is
    throw UserError(
        file, "includes mpi.h, but no MPI compiler wrapper (mpicxx --showme) answers here: pass -I/-L/-l for MPI");
  }
  for (const std::string& f : compile) {
    if (f.rfind("-I", 0) == 0) user.includes.push_back(f.substr(2));
    else if (f.rfind("-D", 0) == 0) user.defines.push_back(f.substr(2));
    else if (f != "-pthread") user.extra.push_back(f);
  }
  for (const std::string& f : ask_mpi("link"))
    if (f.rfind("-L", 0) == 0 || f.rfind("-l", 0) == 0) user.libs.push_back(f);
  return user;
}

}  // namespace braid::convert
