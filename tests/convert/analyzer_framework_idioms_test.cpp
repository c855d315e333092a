// The analyzer on code written the way a small C++ framework is: classes in namespaces made through
// std::make_unique<ns::Class>, std::span views of device buffers, callbacks stored and called later,
// memory pools.
#include <gtest/gtest.h>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

using namespace braid::convert;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string left_text(const Conversion& c) {
  std::string out;
  for (const auto& l : c.left) out += l.reason + "\n";
  return out;
}

}  // namespace

// `std::make_unique<tinyfw::NcclProcessGroup>(comm, ...)` constructs the class: its `comm_` is
// followed to the communicator passed (before, the namespace hid the class and every call on
// `comm_` stayed host NCCL: "NcclProcessGroup(), which is not called in this file").
TEST(AnalyzerFrameworkIdioms, MakeUniqueOfANamespacedClassConstructsIt) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <memory>\n"
      "namespace fw {\n"
      "class ProcessGroup { public: virtual ~ProcessGroup() = default; virtual void allreduce(float* b, size_t n) = 0; "
      "};\n"
      "class NcclProcessGroup : public ProcessGroup {\n"
      " public:\n"
      "  NcclProcessGroup(ncclComm_t c, cudaStream_t s) : comm_(c), stream_(s) {}\n"
      "  void allreduce(float* b, size_t n) override { ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm_, stream_); }\n"
      " private:\n"
      "  ncclComm_t comm_;\n"
      "  cudaStream_t stream_;\n"
      "};\n"
      "}  // namespace fw\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float* g; cudaMalloc(&g, 4096);\n"
      "  std::unique_ptr<fw::ProcessGroup> pg = std::make_unique<fw::NcclProcessGroup>(comm, s);\n"
      "  pg->allreduce(g, 1024);\n"
      "  cudaFree(g);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
}

// A class named with its namespace as a container's element type (`std::vector<pp::Buffer>`) is
// constructed there out of braid's sight, as `std::vector<Buffer>` is: its allocation stays as
// written and the call on it host NCCL. Before, the qualifier hid the container, and the buffer
// became a window although a rank may construct a different number of elements.
TEST(AnalyzerFrameworkIdioms, AContainerOfANamespacedClassHidesItsConstructions) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <vector>\n"
      "namespace pp {\n"
      "class Buffer {\n"
      " public:\n"
      "  explicit Buffer(size_t n) { cudaMalloc(&ptr_, n * 4); }\n"
      "  float* data() const { return ptr_; }\n"
      " private:\n"
      "  float* ptr_ = nullptr;\n"
      "};\n"
      "}  // namespace pp\n"
      "int main(int argc, char** argv) {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  pp::Buffer grad(1024);\n"
      "  std::vector<pp::Buffer> extra;\n"
      "  ncclAllReduce(grad.data(), grad.data(), 1024, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 0);
  EXPECT_TRUE(contains(left_text(c), "line 16")) << left_text(c);
}
