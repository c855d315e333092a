// platform/toolchain: the one search order of src/braid/platform/toolchain.hpp on fake installs
// (a temp folder with fake nvcc, include/nccl.h, lib/libnccl.so.2, site-packages/nvidia/nccl),
// the precedence of the environment variables, `braid env --shell` parsed back, and the real
// toolchain of this machine. tests/scripts/find_cuda_test.sh holds the bash side of the order.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "braid/platform/toolchain.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

namespace braid {
namespace {

namespace fs = std::filesystem;

// Sets (or unsets, for nullopt) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value) ::setenv(name_.c_str(), value->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// Fake installs under one temp folder. PATH holds only an empty folder, so python3 (a wheel it
// might import on this machine) and any nvcc in the real PATH stay out; the real /usr/local/cuda
// and /usr come last in the order and only serve where the fakes do not.
class FakeInstalls : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("braid_platform_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "empty-path");
    make_nvcc(root_ / "cuda");
    make_nccl(root_ / "cuda", true);
    for (const char* var : {"NCCL_HOME", "BRAID_NCCL_INCLUDE", "BRAID_NCCL_LIB", "VIRTUAL_ENV", "CUDA_PATH", "BRAID_DEVICE_INCLUDE"})
      env_.emplace_back(std::make_unique<ScopedEnv>(var, std::nullopt));
    set("PATH", (root_ / "empty-path").string());
    set("HOME", root_.string());
    set("CUDA_HOME", (root_ / "cuda").string());
  }
  void TearDown() override {
    env_.clear();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void set(const std::string& name, const std::string& value) { env_.emplace_back(std::make_unique<ScopedEnv>(name, value)); }
  static void make_nvcc(const fs::path& home) {
    fs::create_directories(home / "bin");
    write_file_atomic(home / "bin" / "nvcc", "#!/bin/sh\necho 'Cuda compilation tools, fake'\necho 'Build fake'\n");
    ::chmod((home / "bin" / "nvcc").c_str(), 0755);
  }
  // include/nccl.h (+ nccl_device.h), lib/libnccl.so.2 holding a version text.
  static void make_nccl(const fs::path& root, bool device_api, const std::string& lib = "lib") {
    fs::create_directories(root / "include");
    fs::create_directories(root / lib);
    write_file_atomic(root / "include" / "nccl.h", "#define NCCL_MAJOR 2\n#define NCCL_MINOR 28\n#define NCCL_PATCH 9\n");
    if (device_api) write_file_atomic(root / "include" / "nccl_device.h", "\n");
    write_file_atomic(root / lib / "libnccl.so.2", std::string("\x7f" "ELF....NCCL version 2.28.9+cuda13.0\0", 36) + std::string(64, '\0'));
  }
  fs::path wheel() const { return root_ / "venv" / "lib" / "python3.12" / "site-packages" / "nvidia" / "nccl"; }

  fs::path root_;
  std::vector<std::unique_ptr<ScopedEnv>> env_;
};

TEST_F(FakeInstalls, CudaHomeBeforeCudaPathBeforePath) {
  make_nvcc(root_ / "cuda-path");
  set("CUDA_PATH", (root_ / "cuda-path").string());
  EXPECT_EQ(search_toolchain().cuda_home, root_ / "cuda");
  EXPECT_EQ(search_toolchain().nvcc, root_ / "cuda" / "bin" / "nvcc");
  set("CUDA_HOME", "");
  EXPECT_EQ(search_toolchain().cuda_home, root_ / "cuda-path");
  set("CUDA_PATH", (root_ / "cuda-path").string() + "/");  // a trailing '/' reads the same
  EXPECT_EQ(search_toolchain().cuda_home, root_ / "cuda-path");
  // nvcc in PATH: the toolkit is the folder above the real file behind a symlink.
  set("CUDA_PATH", "");
  fs::create_directories(root_ / "bin-link");
  fs::create_symlink(root_ / "cuda-path" / "bin" / "nvcc", root_ / "bin-link" / "nvcc");
  set("PATH", (root_ / "bin-link").string());
  EXPECT_EQ(search_toolchain().cuda_home, root_ / "cuda-path");
  EXPECT_EQ(search_order().cuda_homes.front(), root_ / "cuda-path");
}

TEST_F(FakeInstalls, NcclHomeFirstThenTheWheelThenTheToolkit) {
  Toolchain t = search_toolchain();
  EXPECT_EQ(t.nccl_include, root_ / "cuda" / "include");
  EXPECT_EQ(t.nccl_include_origin, "CUDA toolkit");
  EXPECT_EQ(t.nccl_library, root_ / "cuda" / "lib" / "libnccl.so.2");

  make_nccl(wheel(), true);
  set("VIRTUAL_ENV", (root_ / "venv").string());
  t = search_toolchain();
  EXPECT_EQ(t.nccl_wheel, wheel());
  EXPECT_EQ(t.nccl_include, wheel() / "include");
  EXPECT_EQ(t.nccl_include_origin, "python wheel");
  EXPECT_EQ(t.nccl_library, wheel() / "lib" / "libnccl.so.2");

  make_nccl(root_ / "nccl-home", true, "lib64");
  set("NCCL_HOME", (root_ / "nccl-home").string());
  t = search_toolchain();
  EXPECT_EQ(t.nccl_include, root_ / "nccl-home" / "include");
  EXPECT_EQ(t.nccl_library, root_ / "nccl-home" / "lib64" / "libnccl.so.2");
  EXPECT_EQ(t.nccl_library_origin, "NCCL_HOME");
  const auto order = search_order();
  ASSERT_GE(order.nccl_roots.size(), 4u);
  EXPECT_EQ(order.nccl_roots[0].second, "NCCL_HOME");
  EXPECT_EQ(order.nccl_roots[1].second, "python wheel");
  EXPECT_EQ(order.nccl_roots[2].second, "CUDA toolkit");
  EXPECT_EQ(order.nccl_roots.back().first, "/usr");
}

TEST_F(FakeInstalls, DeviceHeadersFirstAndHeadersApartFromTheLibrary) {
  // A wheel with the library and nccl.h but no nccl_device.h: headers from the toolkit, library
  // from the wheel (each found on its own, each with its origin).
  make_nccl(wheel(), false);
  set("VIRTUAL_ENV", (root_ / "venv").string());
  Toolchain t = search_toolchain();
  EXPECT_EQ(t.nccl_include, root_ / "cuda" / "include");
  EXPECT_EQ(t.nccl_library, wheel() / "lib" / "libnccl.so.2");
  EXPECT_EQ(t.nccl_library_origin, "python wheel");
  // Without any device headers, the first nccl.h.
  fs::remove(root_ / "cuda" / "include" / "nccl_device.h");
  if (!fs::exists("/usr/include/nccl_device.h") && !fs::exists("/usr/local/cuda/include/nccl_device.h")) {
    EXPECT_EQ(search_toolchain().nccl_include, wheel() / "include");
  }
}

TEST_F(FakeInstalls, GivenFoldersComeFirst) {
  make_nccl(root_ / "carried", false);
  set("BRAID_NCCL_INCLUDE", (root_ / "carried" / "include").string());
  // Carried headers without the device API lose to an install with it...
  EXPECT_EQ(search_toolchain().nccl_include, root_ / "cuda" / "include");
  // ... and win with it.
  write_file_atomic(root_ / "carried" / "include" / "nccl_device.h", "\n");
  Toolchain t = search_toolchain();
  EXPECT_EQ(t.nccl_include, root_ / "carried" / "include");
  EXPECT_EQ(t.nccl_include_origin, "BRAID_NCCL_INCLUDE");
  set("BRAID_NCCL_LIB", (root_ / "carried" / "lib").string());
  EXPECT_EQ(search_toolchain().nccl_library, root_ / "carried" / "lib" / "libnccl.so.2");
  // braid's device headers: BRAID_DEVICE_INCLUDE names the folder that holds braid/.
  fs::create_directories(root_ / "dev" / "braid");
  write_file_atomic(root_ / "dev" / "braid" / "harness.cuh", "// x\n");
  set("BRAID_DEVICE_INCLUDE", (root_ / "dev").string());
  EXPECT_EQ(find_device_include(), fs::weakly_canonical(root_ / "dev"));
  set("BRAID_DEVICE_INCLUDE", (root_ / "nowhere").string());
  EXPECT_EQ(find_device_include(), fs::weakly_canonical(fs::path(BRAID_SOURCE_DIR) / "device" / "include"));
}

// A wheel that ships only libnccl.so.2, with headers carried beside it: a toolchain that builds.
TEST_F(FakeInstalls, WheelLibraryWithCarriedHeadersVersions) {
  fs::remove_all(root_ / "cuda" / "include");
  fs::remove_all(root_ / "cuda" / "lib");
  make_nccl(wheel(), false);
  fs::remove_all(wheel() / "include");
  set("VIRTUAL_ENV", (root_ / "venv").string());
  make_nccl(root_ / "carried", true);
  set("BRAID_NCCL_INCLUDE", (root_ / "carried" / "include").string());
  std::string why;
  auto tc = discover_cuda_toolchain(&why);
  ASSERT_TRUE(tc) << why;
  EXPECT_EQ(tc->nvcc_version, "Build fake");
  ASSERT_TRUE(tc->nccl);
  EXPECT_EQ(tc->nccl->include_dir, root_ / "carried" / "include");
  EXPECT_EQ(tc->nccl->library, wheel() / "lib" / "libnccl.so.2");
  EXPECT_EQ(tc->nccl->origin, "python wheel");
  EXPECT_EQ(tc->nccl->header_version, "2.28.9");
  EXPECT_EQ(tc->nccl->library_version, "2.28.9+cuda13.0");
}

std::map<std::string, std::string> parse_shell(const std::string& text) {
  std::map<std::string, std::string> vars;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    // Undo NAME='...' with '\'' for each single quote.
    std::string value = line.substr(eq + 2, line.size() - eq - 3);
    for (std::size_t p = value.find("'\\''"); p != std::string::npos; p = value.find("'\\''", p + 1)) value.replace(p, 4, "'");
    vars[line.substr(0, eq)] = value;
  }
  return vars;
}

TEST_F(FakeInstalls, ShellTextQuotesForEval) {
  make_nccl(root_ / "it's here", true);
  set("NCCL_HOME", (root_ / "it's here").string());
  const Toolchain t = search_toolchain();
  const std::string text = t.shell_text();
  EXPECT_NE(text.find("BRAID_NCCL_INCLUDE='" + root_.string() + "/it'\\''s here/include'\n"), std::string::npos) << text;
  // A shell reads back what was printed.
  SubprocessOptions sh;
  sh.argv = {"/bin/sh", "-c", text + "printf '%s' \"$BRAID_NCCL_INCLUDE\""};
  auto r = run_subprocess(sh);
  EXPECT_EQ(r.stdout_text, (root_ / "it's here" / "include").string());
}

TEST_F(FakeInstalls, BraidEnvShellAgreesWithTheLibrary) {
  make_nccl(wheel(), true);
  set("VIRTUAL_ENV", (root_ / "venv").string());
  make_nccl(root_ / "nccl-home", false);
  set("NCCL_HOME", (root_ / "nccl-home").string());
  SubprocessOptions cmd;
  cmd.argv = {BRAID_BIN, "env", "--shell"};
  auto r = run_subprocess(cmd);
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  auto vars = parse_shell(r.stdout_text);
  const Toolchain t = search_toolchain();
  ASSERT_EQ(vars.size(), t.shell_variables().size()) << r.stdout_text;
  for (const auto& [name, value] : t.shell_variables()) EXPECT_EQ(vars[name], value) << name;
  EXPECT_EQ(vars["BRAID_NVCC"], (root_ / "cuda" / "bin" / "nvcc").string());
  EXPECT_EQ(vars["BRAID_NCCL_INCLUDE"], (wheel() / "include").string());  // device API before NCCL_HOME's
  EXPECT_EQ(vars["BRAID_NCCL_LIB"], (root_ / "nccl-home" / "lib").string());
  EXPECT_EQ(vars["BRAID_NCCL_WHEEL"], wheel().string());
  EXPECT_FALSE(vars["BRAID_DEVICE_INCLUDE"].empty());

  cmd.argv = {BRAID_BIN, "env"};
  r = run_subprocess(cmd);
  ASSERT_TRUE(r.succeeded()) << r.stderr_text;
  EXPECT_NE(r.stdout_text.find("[python wheel] version 2.28.9, device API yes"), std::string::npos) << r.stdout_text;
  EXPECT_NE(r.stdout_text.find("Search order"), std::string::npos);
  EXPECT_NE(r.stdout_text.find("RDMA NICs"), std::string::npos);
}

// This machine's real toolchain (CI has nvcc and NCCL headers).
TEST(Toolchain, FindsNvccAndNcclHere) {
  std::string why;
  auto tc = find_cuda_toolchain(&why);
  ASSERT_TRUE(tc) << "nvcc is expected on CI: " << why;
  EXPECT_TRUE(fs::exists(tc->nvcc));
  EXPECT_NE(tc->nvcc_version.find("Build"), std::string::npos) << tc->nvcc_version;
  EXPECT_FALSE(tc->device_include.empty());
  if (tc->nccl) {
    EXPECT_TRUE(fs::exists(tc->nccl->include_dir / "nccl.h"));
    EXPECT_FALSE(tc->nccl->header_version.empty());
  }
}

TEST(Toolchain, ArchitectureFlags) {
  EXPECT_EQ(resolve_arch("auto", {}), "sm_90");
  EXPECT_EQ(resolve_arch("auto", {{0, "NVIDIA H200", "9.0"}}), "sm_90");
  EXPECT_EQ(resolve_arch("auto", {{0, "NVIDIA B200", "10.0"}}), "sm_100");
  EXPECT_EQ(resolve_arch("sm_90a", {}), "sm_90a");
  EXPECT_FALSE(resolve_arch("hopper", {}));
  EXPECT_EQ(arch_flags("sm_90a")->at(0), "-gencode=arch=compute_90a,code=sm_90a");
  EXPECT_EQ(arch_flags("sm_90")->at(0), "-gencode=arch=compute_90,code=sm_90");
}

}  // namespace
}  // namespace braid
