// BuildFlags::compile_flags (build_flags.hpp): the user's flags after braid's defaults, and a
// default the user gives otherwise left out (nvcc would keep the last and warn).
#include <gtest/gtest.h>

#include <algorithm>

#include "braid/convert/build_flags.hpp"

using namespace braid::convert;

namespace {

bool has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

TEST(BuildFlags, TheUsersStandardAndOptimisationReplaceTheDefaults) {
  BuildFlags plain;
  const std::vector<std::string> defaults = plain.compile_flags();
  EXPECT_TRUE(has(defaults, "-std=c++20"));
  EXPECT_TRUE(has(defaults, "-O3"));

  BuildFlags user;
  user.defines = {"MULTI_GPU"};
  user.extra = {"-std=c++17", "-O0"};
  const std::vector<std::string> f = user.compile_flags();
  EXPECT_FALSE(has(f, "-std=c++20"));
  EXPECT_FALSE(has(f, "-O3"));
  EXPECT_TRUE(has(f, "-std=c++17"));
  EXPECT_TRUE(has(f, "-O0"));
  EXPECT_TRUE(has(f, "-DMULTI_GPU"));
  // The rest of the defaults stay.
  for (const std::string& d : defaults) {
    if (d != "-std=c++20" && d != "-O3") {
      EXPECT_TRUE(has(f, d)) << d;
    }
  }
}
