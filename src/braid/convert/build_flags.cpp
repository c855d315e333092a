#include "braid/convert/build_flags.hpp"

#include <regex>

#include "braid/eval/nvcc_builder.hpp"
#include "braid/util/error.hpp"
#include "braid/util/subprocess.hpp"

namespace braid::convert {

std::vector<std::string> BuildFlags::compile_flags() const {
  std::vector<std::string> f = default_nvcc_flags();
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
        if (f.rfind("-I", 0) == 0 || f.rfind("-L", 0) == 0 || f.rfind("-l", 0) == 0 || f.rfind("-Wl,", 0) == 0) out.push_back(f);
      return out;
    }
  }
  return {};
}

}  // namespace

BuildFlags resolve_build_flags(const std::string& file, const std::string& source, BuildFlags user) {
  static const std::regex kMpiInclude(R"(#\s*include\s*[<"]mpi\.h[>"])");
  if (!std::regex_search(source, kMpiInclude)) return user;
  user.mpi = true;
  const std::vector<std::string> compile = ask_mpi("compile");
  if (compile.empty()) {
    if (!user.includes.empty()) return user;  // the user says where mpi.h is
    throw UserError(file, "includes mpi.h, but no MPI compiler wrapper (mpicxx --showme) answers here: pass -I/-L/-l for MPI");
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
