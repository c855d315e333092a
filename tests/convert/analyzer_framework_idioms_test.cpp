// The analyzer on code written the way a small C++ framework is: classes in namespaces made through
// std::make_unique<ns::Class>, std::span views of device buffers, callbacks stored and called later,
// memory pools.
#include <gtest/gtest.h>

#include <algorithm>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

#include "analyzer_test_util.hpp"

using namespace braid::convert;
using namespace braid::convert::test;

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
// became a window although a rank may construct a different number of elements. Out of sight
// means a constructor the container runs itself (a default one here, or a copy) or one run in
// place (`emplace_back(n)`): with only `Buffer(size_t)` and no emplace, the container constructs
// nothing that allocates (a std::map of RAII tensors filled with `emplace(key, Tensor(n))`).
TEST(AnalyzerFrameworkIdioms, AContainerOfANamespacedClassHidesItsConstructions) {
  const auto program = [](const std::string& constructors, const std::string& fill) {
    return "#include <nccl.h>\n"
           "#include <vector>\n"
           "namespace pp {\n"
           "class Buffer {\n"
           " public:\n"
           "  explicit Buffer(size_t n) { cudaMalloc(&ptr_, n * 4); }\n" +
           constructors +
           "  float* data() const { return ptr_; }\n"
           " private:\n"
           "  float* ptr_ = nullptr;\n"
           "};\n"
           "}  // namespace pp\n"
           "int main(int argc, char** argv) {\n"
           "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  cudaStream_t s; cudaStreamCreate(&s);\n"
           "  pp::Buffer grad(1024);\n"
           "  std::vector<pp::Buffer> extra;\n" +
           fill +
           "  keep(extra);\n"
           "  ncclAllReduce(grad.data(), grad.data(), 1024, ncclFloat, ncclSum, comm, s);\n"
           "}\n";
  };
  const std::string by_default = "  Buffer() { cudaMalloc(&ptr_, 64); }\n";
  const std::string deep_copy = "  Buffer(const Buffer& o) { cudaMalloc(&ptr_, 64); }\n";
  for (const auto& [constructors, fill] : std::vector<std::pair<std::string, std::string>>{
           {by_default, ""}, {deep_copy, ""}, {"", "  extra.emplace_back(16);\n"}}) {
    const std::string src = program(constructors, fill);
    const Conversion c = transform(analyze("user.cu", src), src);
    EXPECT_EQ(c.converted_calls, 0) << constructors << fill;
    const std::string line = constructors.empty() ? "line 16" : "line 17";  // the container's declaration
    EXPECT_TRUE(contains(left_text(c), line)) << constructors << fill << left_text(c);
  }
  for (const std::string& fill : {"", "  extra.push_back(pp::Buffer(16));\n"}) {
    const std::string src = program("  Buffer(Buffer&& o) noexcept : ptr_(o.ptr_) { o.ptr_ = nullptr; }\n", fill);
    EXPECT_EQ(transform(analyze("user.cu", src), src).converted_calls, 1) << fill;
  }
}

// A std::span made from a device pointer is a view of that allocation: `.data()` of a span made at
// the call, of a span variable (also a `subspan` of one, also declared `auto`), of a span
// parameter followed to what each caller passes, and of a span field set from a view. Before, each stayed host NCCL:
// "`view.data()` is not a variable, field or element access braid can follow".
TEST(AnalyzerFrameworkIdioms, SpanViewsAreTheBufferTheyView) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <span>\n"
      "using FloatView = std::span<float>;\n"
      "struct Param { std::span<float> grad; };\n"
      "void gather(std::span<const float> in, FloatView out, ncclComm_t c, cudaStream_t s) {\n"
      "  ncclAllGather(in.data(), out.data(), in.size(), ncclFloat, c, s);\n"
      "}\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float *flat, *loss, *all; cudaMalloc(&flat, 1 << 20); cudaMalloc(&loss, 4); cudaMalloc(&all, 8);\n"
      "  const std::span<float> grads(flat, 1 << 18);\n"
      "  for (size_t off = 0; off < grads.size(); off += 4096) {\n"
      "    std::span<float> bucket = grads.subspan(off, 4096);\n"
      "    ncclAllReduce(bucket.data(), bucket.data(), bucket.size(), ncclFloat, ncclAvg, comm, s);\n"
      "  }\n"
      "  auto head = grads.first(1024);\n"
      "  ncclBroadcast(head.data(), head.data(), 1024, ncclFloat, 0, comm, s);\n"
      "  ncclAllReduce(std::span<float>(loss, 1).data(), loss, 1, ncclFloat, ncclMax, comm, s);\n"
      "  gather(std::span<const float>(loss, 1), FloatView{all, 2}, comm, s);\n"
      "  Param p; p.grad = grads.subspan(4096, 4096);\n"
      "  ncclAllReduce(p.grad.data(), p.grad.data(), 4096, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 5) << left_text(c);
  EXPECT_TRUE(c.left.empty()) << left_text(c);
  EXPECT_TRUE(contains(c.source, "sym_malloc(&flat")) << c.source;
}

// `.data()` is a view's only where the receiver is declared a view: a std::vector's `.data()` (host
// memory) or a device_vector's is not stripped to the container, whose name may be a buffer's path
// elsewhere in the file.
TEST(AnalyzerFrameworkIdioms, DataOfAContainerIsNoView) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <span>\n"
      "#include <thrust/device_vector.h>\n"
      "void warmup() { float* hist; cudaMalloc(&hist, 4096); cudaFree(hist); }\n"
      "int main() {\n"
      "  warmup();\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  thrust::device_vector<float> hist(1024);\n"
      "  ncclAllReduce(hist.data().get(), hist.data().get(), 1024, ncclFloat, ncclSum, comm, s);\n"
      "  std::span<float> view(thrust::raw_pointer_cast(hist.data()), 1024);\n"
      "  ncclAllReduce(view.data(), view.data(), 1024, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 0) << c.source;
  EXPECT_EQ(c.left.size(), 2u);
}

// A parameter of a lambda bound to no name (`ops.push_back([&](float* buf, int peer) {...})`) is given
// by whoever calls the lambda: it is not the enclosing function's variable of the same name. Before,
// `buf` was taken for main's `cudaMalloc`'d `buf`, and the send and receive converted although the
// lambda is called with a stream-ordered buffer (a receive outside the windows stops the program).
TEST(AnalyzerFrameworkIdioms, UnnamedLambdaParametersAreNotTheEnclosingVariables) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <functional>\n"
      "#include <vector>\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float* buf; cudaMalloc(&buf, 4096);\n"
      "  float* step; cudaMallocAsync(&step, 4096, s);\n"
      "  std::vector<std::function<void(float*, int)>> ops;\n"
      "  ops.push_back([&](float* buf, int peer) { ncclSend(buf, 1024, ncclFloat, peer, comm, s); });\n"
      "  ops.push_back([&](float* buf, int peer) { ncclRecv(buf, 1024, ncclFloat, peer, comm, s); });\n"
      "  ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, comm, s);\n"
      "  for (auto& op : ops) op(step, 1);\n"
      "  cudaFreeAsync(step, s);\n"
      "  cudaFree(buf);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);  // the all-reduce on main's own `buf`
  ASSERT_EQ(c.left.size(), 2u);
  for (const auto& l : c.left) EXPECT_TRUE(contains(l.reason, "parameter of a lambda bound to no name")) << l.reason;
}

// cudaMallocFromPoolAsync (a stream-ordered allocation from the program's own cudaMemPool_t) is an
// allocation site as cudaMallocAsync is: never a window. A pointer that may come from it or from
// cudaMalloc stays host NCCL. Before, the pool allocation was not seen, the pointer looked like the
// cudaMalloc'd buffer alone, and the send/receive on the pool memory converted.
TEST(AnalyzerFrameworkIdioms, PoolAllocationsAreStreamOrdered) {
  const std::string src =
      "#include <nccl.h>\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  cudaMemPool_t pool; cudaDeviceGetDefaultMemPool(&pool, 0);\n"
      "  float* buf; cudaMalloc(&buf, 4096);\n"
      "  ncclAllReduce(buf, buf, 1024, ncclFloat, ncclSum, comm, s);\n"
      "  cudaFree(buf);\n"
      "  cudaMallocFromPoolAsync(&buf, 4096, pool, s);\n"
      "  ncclGroupStart();\n"
      "  ncclSend(buf, 1024, ncclFloat, 1, comm, s);\n"
      "  ncclRecv(buf, 1024, ncclFloat, 1, comm, s);\n"
      "  ncclGroupEnd();\n"
      "  cudaFreeAsync(buf, s);\n"
      "  float* act; cudaMallocFromPoolAsync(&act, 4096, pool, s);\n"
      "  ncclGroupStart();\n"
      "  ncclSend(act, 1024, ncclFloat, 1, comm, s);\n"
      "  ncclRecv(act, 1024, ncclFloat, 1, comm, s);\n"
      "  ncclGroupEnd();\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  ASSERT_TRUE(a.buffers.count("act"));
  EXPECT_EQ(a.buffers.at("act").allocator, "cudaMallocFromPoolAsync");
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 0) << c.source;
  ASSERT_EQ(c.left.size(), 5u);
  EXPECT_TRUE(contains(left_text(c), "may be symmetric memory or stream-ordered memory")) << left_text(c);
  EXPECT_TRUE(contains(left_text(c), "comes from cudaMallocFromPoolAsync (line 15): stream-ordered")) << left_text(c);
}

// A pointer (or a view) given another buffer after its declaration (`x = b;`, `std::swap(cur, next)`)
// may point into either: both are followed. Before, only the declaration's value was, so a send from
// `x` converted as if it were `a` (a window) while it sends from stream-ordered `b`. Walking a
// pointer through its own buffer (`p = p + n`) adds nothing.
TEST(AnalyzerFrameworkIdioms, AVariableGivenAnotherBufferMayPointIntoEither) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <span>\n"
      "#include <utility>\n"
      "int main(int argc, char**) {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float* a; cudaMalloc(&a, 4096);\n"
      "  float* b; cudaMallocAsync(&b, 4096, s);\n"
      "  float* x = a;\n"
      "  x = b;\n"
      "  ncclSend(x, 1024, ncclFloat, 1, comm, s);\n"
      "  std::span<float> v(a, 1024);\n"
      "  v = std::span<float>(b, 1024);\n"
      "  ncclRecv(v.data(), 1024, ncclFloat, 1, comm, s);\n"
      "  float *cur, *next; cudaMalloc(&cur, 4096); cudaMalloc(&next, 4096);\n"
      "  float* p = cur;\n"
      "  for (int i = 0; i < 4; ++i) {\n"
      "    ncclAllReduce(p, p, 256, ncclFloat, ncclSum, comm, s);\n"
      "    p = p + 256;\n"
      "    std::swap(cur, next);\n"
      "  }\n"
      "  ncclAllReduce(cur, cur, 1024, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);  // the all-reduces: `p` walks `cur`, `cur` is cur or next
  ASSERT_EQ(c.left.size(), 2u) << left_text(c);
  for (const auto& l : c.left) EXPECT_TRUE(contains(l.reason, "stream-ordered")) << l.reason;
  EXPECT_TRUE(contains(c.source, "sym_malloc(&next")) << c.source;
}

// Helpers of one name returning buffers (namesakes in two namespaces, overloads) may each be the one
// a call names: the returns of all of them are followed. Before, the first in the file was taken for
// every call, so a receive into `async_alloc::make_buffer`'s stream-ordered memory converted as if
// it were `sync_alloc::make_buffer`'s cudaMalloc'd window.
TEST(AnalyzerFrameworkIdioms, AHelpersNamesakesAreAllFollowed) {
  const std::string src =
      "#include <nccl.h>\n"
      "namespace sync_alloc {\n"
      "float* make_buffer(size_t n) { float* p; cudaMalloc(&p, n * 4); return p; }\n"
      "}\n"
      "namespace async_alloc {\n"
      "float* make_buffer(size_t n, cudaStream_t s) { float* q; cudaMallocAsync(&q, n * 4, s); return q; }\n"
      "}\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float* a = sync_alloc::make_buffer(1024);\n"
      "  float* b = async_alloc::make_buffer(1024, s);\n"
      "  ncclGroupStart();\n"
      "  ncclSend(a, 1024, ncclFloat, 1, comm, s);\n"
      "  ncclRecv(b, 1024, ncclFloat, 1, comm, s);\n"
      "  ncclGroupEnd();\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 0) << c.source;
  ASSERT_EQ(c.left.size(), 2u);
  EXPECT_TRUE(contains(left_text(c), "buffer `b` may be symmetric memory or stream-ordered memory")) << left_text(c);
}

// `std::make_unique<ns::Class>(...)` under a condition constructs the class on some ranks only: its
// allocation stays as written (window registration is collective). Before, the qualified name was
// no construction, and the class's buffer became a window that only rank 0 would register twice.
TEST(AnalyzerFrameworkIdioms, AConditionalMakeUniqueOfANamespacedClassKeepsItsAllocation) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <memory>\n"
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
      "  int rank = atoi(argv[1]);\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  auto grad = std::make_unique<pp::Buffer>(1024);\n"
      "  std::unique_ptr<pp::Buffer> scratch;\n"
      "  if (rank == 0) scratch = std::make_unique<pp::Buffer>(64);\n"
      "  ncclAllReduce(grad->data(), grad->data(), 1024, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 0) << c.source;
  EXPECT_TRUE(contains(left_text(c), "at line 18")) << left_text(c);
}

// Lambdas stored in objects' fields under one name (`send_hook.fn = [&] {...}; recv_hook.fn = ...`)
// are not followed as a function (a name bound to two lambdas): like a lambda bound to no name, they
// run wherever their holder calls them, here inside an NCCL group. Before, their calls were read as
// the enclosing function's, outside the group, and converted as a lone send and receive (each rank
// would wait on its send for a posting queued behind it).
TEST(AnalyzerFrameworkIdioms, LambdasInFieldsOfOneNameRunWhereTheirHolderCallsThem) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <functional>\n"
      "struct Hook { std::function<void()> fn; };\n"
      "int main(int argc, char** argv) {\n"
      "  int rank = atoi(argv[1]);\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, rank);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float *a, *b; cudaMalloc(&a, 4096); cudaMalloc(&b, 4096);\n"
      "  Hook send_hook, recv_hook;\n"
      "  send_hook.fn = [&] { ncclSend(a, 1024, ncclFloat, 1 - rank, comm, s); };\n"
      "  recv_hook.fn = [&] { ncclRecv(b, 1024, ncclFloat, 1 - rank, comm, s); };\n"
      "  ncclGroupStart();\n"
      "  send_hook.fn();\n"
      "  recv_hook.fn();\n"
      "  ncclGroupEnd();\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 0) << c.source;
  ASSERT_EQ(c.left.size(), 2u);
  for (const auto& l : c.left) EXPECT_TRUE(contains(l.reason, "inside an NCCL group")) << l.reason;
}

// A lambda kept in a std::function member (declared `std::function<...> reduce_;`, assigned in the
// constructor, called by a member function) is followed as a function: its parameters to the calls
// of `reduce_`, its captures to the constructor's fields. Before, the member's declaration counted
// as a use of the lambda as a value, so its parameters were never followed.
TEST(AnalyzerFrameworkIdioms, ALambdaInAStdFunctionMemberIsFollowed) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <functional>\n"
      "#include <memory>\n"
      "namespace dist {\n"
      "class Comm {\n"
      " public:\n"
      "  Comm(ncclComm_t c, cudaStream_t s) : comm_(c), stream_(s) {\n"
      "    reduce_ = [this](float* p, size_t n) { ncclAllReduce(p, p, n, ncclFloat, ncclSum, comm_, stream_); };\n"
      "  }\n"
      "  void run(float* p, size_t n) { reduce_(p, n); }\n"
      " private:\n"
      "  ncclComm_t comm_;\n"
      "  cudaStream_t stream_;\n"
      "  std::function<void(float*, size_t)> reduce_;\n"
      "};\n"
      "}  // namespace dist\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float* g; cudaMalloc(&g, 4096);\n"
      "  auto c = std::make_unique<dist::Comm>(comm, s);\n"
      "  c->run(g, 1024);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "sym_malloc(&g")) << c.source;
}

// A parameter whose type is a template with several arguments (`std::pair<int, int> peers`,
// `std::array<float*, N>& bufs`) is one parameter: the names after it keep their positions. Before,
// its comma split it in two, every later parameter was matched to the argument after its own, and
// here `dst` was taken for the cudaMalloc'd `spare` while the receive writes stream-ordered memory.
TEST(AnalyzerFrameworkIdioms, TemplateParametersWithCommasKeepTheNextOnesInPlace) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <array>\n"
      "#include <utility>\n"
      "ncclComm_t g_comm;\n"
      "cudaStream_t g_s;\n"
      "void recv_into(std::pair<int, int> peers, float* dst, float* spare) {\n"
      "  ncclRecv(dst, 1024, ncclFloat, peers.first, g_comm, g_s);\n"
      "}\n"
      "template <size_t N> void reduce_all(std::array<float*, N>& bufs, size_t n) {\n"
      "  for (size_t i = 0; i < N; ++i) ncclAllReduce(bufs[i], bufs[i], n, ncclFloat, ncclSum, g_comm, g_s);\n"
      "}\n"
      "int main() {\n"
      "  ncclCommInitRank(&g_comm, 2, id, 0);\n"
      "  cudaStreamCreate(&g_s);\n"
      "  float *window, *spare, *step; cudaMalloc(&window, 4096); cudaMalloc(&spare, 4096);\n"
      "  cudaMallocAsync(&step, 4096, g_s);\n"
      "  ncclSend(window, 1024, ncclFloat, 1, g_comm, g_s);\n"
      "  recv_into({1, 1}, step, spare);\n"
      "  std::array<float*, 2> grads{};\n"
      "  for (auto& g : grads) cudaMalloc(&g, 4096);\n"
      "  reduce_all(grads, 1024);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);  // the all-reduce over `grads`
  ASSERT_EQ(c.left.size(), 2u) << left_text(c);     // the send and the receive: `step` is stream-ordered
  EXPECT_TRUE(contains(left_text(c), "cudaMallocAsync")) << left_text(c);
}

// A std::array of buffers initialised with a list (`std::array<float*, 2> io = {x, out}`, also
// `io{...}` and `= {{...}}`) is read as `float* io[] = {x, out}` is: an element is any of them while
// the array is only read; one also written (`io[1] = step`) is not followed.
TEST(AnalyzerFrameworkIdioms, StdArraysInitialisedWithBuffers) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <array>\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float *x, *out, *y, *step; cudaMalloc(&x, 64); cudaMalloc(&out, 4096); cudaMalloc(&y, 64);\n"
      "  cudaMallocAsync(&step, 64, s);\n"
      "  std::array<float*, 2> io = {x, out};\n"
      "  ncclBroadcast(io[0], io[1], 16, ncclFloat, 0, comm, s);\n"
      "  const std::array<float*, 2> pair{{y, x}};\n"
      "  ncclAllReduce(pair[0], pair[0], 16, ncclFloat, ncclSum, comm, s);\n"
      "  std::array<float*, 2> mixed{y, x};\n"
      "  mixed[1] = step;\n"
      "  ncclAllReduce(mixed[0], mixed[0], 16, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  ASSERT_EQ(c.left.size(), 1u) << left_text(c);
  EXPECT_TRUE(contains(c.left[0].reason, "mixed")) << c.left[0].reason;
}

// A function object's call operator (`void operator()(T* buf, size_t n)` of a class template in a
// namespace) is a function: `reduce(grads, n)` on an object of that class is its call, so `buf` is
// followed to the caller's allocation (before, the operator was not read as a function and the
// all-reduce stayed host NCCL: "buffer `buf` has no allocation in this file").
TEST(AnalyzerFrameworkIdioms, AFunctionObjectsCallOperatorIsFollowedToItsCallers) {
  const std::string src =
      "#include <nccl.h>\n"
      "namespace dist {\n"
      "template <typename T> class AllReducer {\n"
      " public:\n"
      "  AllReducer(ncclComm_t c, cudaStream_t s) : comm_(c), stream_(s) {}\n"
      "  void operator()(T* buf, size_t n) { ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream_); }\n"
      " private:\n"
      "  ncclComm_t comm_;\n"
      "  cudaStream_t stream_;\n"
      "};\n"
      "}  // namespace dist\n"
      "int main() {\n"
      "  ncclUniqueId id; ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float* grads; cudaMalloc(&grads, 1 << 22);\n"
      "  dist::AllReducer<float> reduce(comm, s);\n"
      "  for (int step = 0; step < 10; ++step) reduce(grads, 1 << 20);\n"
      "  cudaFree(grads);\n"
      "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&grads")) << c.source;
}

// A RAII buffer class with a move constructor and a move assignment (`ptr_(o.ptr_)`,
// `ptr_ = std::exchange(o.ptr_, nullptr)`: another instance's field, nothing new): its buffers are
// followed to the allocating constructor alone, and the collectives on them convert. (Kept in a
// std::vector, see the tests below.)
TEST(AnalyzerFrameworkIdioms, MovableRaiiBuffersAreFollowedToTheirAllocatingConstructor) {
  const std::string src =
      "#include <nccl.h>\n#include <utility>\n"
      "template <typename T> class DeviceBuffer {\n"
      " public:\n"
      "  explicit DeviceBuffer(size_t n) : n_(n) { cudaMalloc(&ptr_, n * sizeof(T)); }\n"
      "  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; }\n"
      "  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept { ptr_ = std::exchange(o.ptr_, nullptr); return *this; }\n"
      "  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }\n"
      "  T* data() const { return ptr_; }\n"
      "  size_t size() const { return n_; }\n"
      " private:\n"
      "  T* ptr_ = nullptr;\n"
      "  size_t n_ = 0;\n"
      "};\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  DeviceBuffer<float> shard(1024), full(2048);\n"
      "  ncclAllGather(shard.data(), full.data(), shard.size(), ncclFloat, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&ptr_")) << c.source;
}

namespace {

// Per-layer gradients in a std::vector of a movable RAII buffer; `fill` fills it (from line 16),
// `more` is one more line (17) or none. The vector is declared at line 15.
std::string raii_vector_program(const std::string& fill, const std::string& more = "") {
  return "#include <nccl.h>\n#include <vector>\n"
         "template <typename T> struct DeviceBuffer {\n"
         "  T* ptr_ = nullptr; size_t n_ = 0;\n"
         "  explicit DeviceBuffer(size_t n) : n_(n) { cudaMalloc(&ptr_, n * sizeof(T)); }\n"
         "  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; }\n"
         "  ~DeviceBuffer() { if (ptr_) cudaFree(ptr_); }\n"
         "  T* data() { return ptr_; }\n"
         "  size_t size() const { return n_; }\n"
         "};\n"
         "int main(int argc, char** argv) {\n"
         "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
         "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
         "  const std::vector<size_t> sizes = {4096, 1024, 256};\n"
         "  std::vector<DeviceBuffer<float>> grads;\n" +
         fill + more +
         "  for (auto& g : grads) ncclAllReduce(g.data(), g.data(), g.size(), ncclFloat, ncclSum, comm, s);\n"
         "}\n";
}

const std::string kEmplaceEveryLayer =
    "  grads.reserve(sizes.size());\n"
    "  for (size_t l = 0; l < sizes.size(); ++l) grads.emplace_back(sizes[l]);\n";

}  // namespace

// A std::vector of the class whose every use is read: declared empty, reserved, filled by
// `emplace_back(n)` or `push_back(DeviceBuffer<float>(n))` unconditionally in loops over rank-free
// bounds (a const vector's size, a constant, argv), then only read (`size()`, elements through a
// member, range-for by reference). Its fills are the class's constructions, so the buffers are
// followed to the allocating constructor and the collective converts. Before, the vector hid them.
TEST(AnalyzerFrameworkIdioms, AVectorFilledInSightConstructsItsElementsInSight) {
  for (const std::string& fill :
       {kEmplaceEveryLayer, std::string("  for (size_t n : sizes) grads.push_back(DeviceBuffer<float>(n));\n"),
        std::string("  const int layers = 3;\n  for (int l = 0; l < layers; ++l) grads.emplace_back(sizes[l]);\n"),
        std::string("  for (int l = 0; l < atoi(argv[1]); ++l) { grads.emplace_back(sizes[0]); }\n"),
        kEmplaceEveryLayer + "  grads[1].data(); size_t first = grads.front().size(); (void)first;\n"}) {
    const Conversion c = convert_text(raii_vector_program(fill));
    EXPECT_EQ(c.converted_calls, 1) << fill << left_text(c);
    EXPECT_TRUE(c.left.empty()) << fill << left_text(c);
    EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&ptr_, n * sizeof(T))")) << fill << c.source;
  }
}

// Any use braid does not read keeps the vector's constructions out of sight (the reason names its
// declaration, line 15): a resize, an insert, a copy of the vector, an element written or copied
// (`for (auto g : grads)`), the vector given to a function not in the file, or a fill in a loop
// whose trip count may differ between ranks (bounded by the rank, directly or through a variable
// given it or written under a condition, a while loop, a `break`). The allocation stays as written.
TEST(AnalyzerFrameworkIdioms, AVectorUsedOutOfSightKeepsItsConstructionsHidden) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kEmplaceEveryLayer, "  grads.resize(4);\n"},
      {kEmplaceEveryLayer, "  grads.insert(grads.begin(), DeviceBuffer<float>(64));\n"},
      {kEmplaceEveryLayer, "  std::vector<DeviceBuffer<float>> copy = grads;\n"},
      {kEmplaceEveryLayer, "  grads[0] = DeviceBuffer<float>(64);\n"},
      {kEmplaceEveryLayer, "  register_grads(grads);\n"},
      {kEmplaceEveryLayer, "  for (auto g : grads) (void)g;\n"},
      {"  for (int l = 0; l < rank + 1; ++l) grads.emplace_back(sizes[0]);\n", ""},
      {"  int max = rank;\n  for (int l = 0; l < max; ++l) grads.emplace_back(sizes[0]);\n", ""},
      {"  int layers = 3;\n  if (rank == 0) layers = 1;\n  for (int l = 0; l < layers; ++l) "
       "grads.emplace_back(sizes[0]);\n",
       ""},
      {"  size_t l = 0; while (l < sizes.size()) { grads.emplace_back(sizes[l]); ++l; }\n", ""},
      {"  for (size_t l = 0; l < sizes.size(); ++l) { if (l == (size_t)rank) break; grads.emplace_back(sizes[l]); }\n",
       ""},
  };
  for (const auto& [fill, more] : cases) {
    const Conversion c = convert_text(raii_vector_program(fill, more));
    EXPECT_EQ(c.converted_calls, 0) << fill << more << c.source;
    ASSERT_EQ(c.left.size(), 1u) << fill << more;
    EXPECT_TRUE(contains(c.left[0].reason,
                         "in DeviceBuffer(), which may run on some ranks only (called under a condition, or "
                         "constructed out of braid's sight, at line 15)"))
        << fill << more << c.left[0].reason;
    EXPECT_TRUE(contains(c.source, "{ cudaMalloc(&ptr_, n * sizeof(T)); }")) << c.source;
  }
}

// A vector filled in sight whose fill runs on some ranks only (`if (rank == 0) grads.emplace_back(64)`)
// or with a size given by the rank: its fills are constructions like any other, so the allocation is
// rank-dependent and stays as written, the reason naming the fill.
TEST(AnalyzerFrameworkIdioms, AVectorFilledOnSomeRanksOrByRankStaysAsWritten) {
  const Conversion some =
      convert_text(raii_vector_program(kEmplaceEveryLayer, "  if (rank == 0) grads.emplace_back(64);\n"));
  EXPECT_EQ(some.converted_calls, 0) << some.source;
  ASSERT_EQ(some.left.size(), 1u);
  EXPECT_TRUE(contains(some.left[0].reason, "in DeviceBuffer(), which may run on some ranks only"))
      << some.left[0].reason;
  EXPECT_TRUE(contains(some.left[0].reason, "at line 18)")) << some.left[0].reason;
  const Conversion sized = convert_text(
      raii_vector_program("  for (size_t l = 0; l < sizes.size(); ++l) grads.emplace_back(sizes[l] * (rank + 1));\n"));
  EXPECT_EQ(sized.converted_calls, 0) << sized.source;
  ASSERT_EQ(sized.left.size(), 1u);
  EXPECT_TRUE(contains(sized.left[0].reason, "with a size that depends on the rank")) << sized.left[0].reason;
  const Conversion pushed = convert_text(
      raii_vector_program("  for (size_t n : sizes) grads.push_back(DeviceBuffer<float>(n * (rank + 1)));\n"));
  EXPECT_EQ(pushed.converted_calls, 0) << pushed.source;
  EXPECT_TRUE(told(pushed, "with a size that depends on the rank")) << left_text(pushed);
}

// A work queue of pending reductions (`std::deque<Pending>` filled during backward and drained with
// `front()`/`pop_front()`, or read with `back()`/`at(i)`): an element read by the container's
// accessor is an element, followed to what was pushed. A queue filled with something braid cannot
// follow keeps its calls host NCCL (before, `q.front()` was "not a variable, field or element
// access" in every case).
TEST(AnalyzerFrameworkIdioms, QueueElementsReadByTheirAccessorsAreWhatWasPushed) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <deque>\n"
      "#include <vector>\n"
      "struct Pending { float* ptr; size_t n; };\n"
      "float* lookup(int l);\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, 2, id, 0);\n"
      "  std::vector<float*> grads(4);\n"
      "  for (int l = 0; l < 4; ++l) cudaMalloc(&grads[l], 4096);\n"
      "  std::deque<Pending> q;\n"
      "  for (int l = 0; l < 4; ++l) q.push_back(Pending{grads[l], 1024});\n"
      "  while (!q.empty()) {\n"
      "    Pending t = q.front();\n"
      "    q.pop_front();\n"
      "    ncclAllReduce(t.ptr, t.ptr, t.n, ncclFloat, ncclSum, comm, s);\n"
      "  }\n"
      "  float* x; cudaMalloc(&x, 4096);\n"
      "  float* y; cudaMalloc(&y, 4096);\n"
      "  std::deque<float*> stack;\n"
      "  stack.push_back(x);\n"
      "  stack.push_back(y);\n"
      "  ncclAllReduce(stack.back(), stack.back(), 1024, ncclFloat, ncclSum, comm, s);\n"
      "  ncclBroadcast(stack.at(2), stack.at(2), 1024, ncclFloat, 0, comm, s);\n"
      "  std::deque<float*> unknown;\n"
      "  for (int l = 0; l < 4; ++l) unknown.push_back(lookup(l));\n"
      "  ncclAllReduce(unknown.front(), unknown.front(), 1024, ncclFloat, ncclSum, comm, s);\n"
      "  for (int l = 0; l < 4; ++l) cudaFree(grads[l]);\n"
      "}\n";
  const Analysis a = analyze("queue.cu", src);
  std::vector<const Call*> nccl;
  for (const Call& c : a.calls)
    if (c.name == "ncclAllReduce" || c.name == "ncclBroadcast") nccl.push_back(&c);
  ASSERT_EQ(nccl.size(), 4u);
  const std::vector<std::vector<std::string>> expected = {{"grads[]"}, {"x", "y"}, {"x", "y"}};
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(nccl[i]->arg_buffers.count(0)) << nccl[i]->line << ": " << nccl[i]->unresolved;
    std::vector<std::string> got = nccl[i]->arg_buffers.at(0);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected[i]) << nccl[i]->line;
  }
  EXPECT_NE(nccl[3]->unresolved, "");
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 3) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&grads[l], 4096)")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&y, 4096)")) << c.source;
}

// A struct of arguments handed to a worker (C style): `args.grads = g_grads;` then
// `args->grads[l]` in the worker is an element of `g_grads`, and `args.io.x` read through a field
// assigned a struct variable is that variable's field.
TEST(AnalyzerFrameworkIdioms, AFieldAssignedAnArrayIsIndexedAsThatArray) {
  const std::string src =
      "#include <nccl.h>\n"
      "struct IO { float* x; };\n"
      "struct Args { float** grads; IO io; ncclComm_t comm; };\n"
      "float* g_grads[4];\n"
      "void work(Args* a) {\n"
      "  for (int l = 0; l < 4; ++l) ncclAllReduce(a->grads[l], a->grads[l], 1024, ncclFloat, ncclSum, a->comm, 0);\n"
      "  ncclAllReduce(a->io.x, a->io.x, 1024, ncclFloat, ncclSum, a->comm, 0);\n"
      "}\n"
      "int main() {\n"
      "  Args args; IO io;\n"
      "  ncclCommInitRank(&args.comm, 2, id, 0);\n"
      "  for (int l = 0; l < 4; ++l) cudaMalloc(&g_grads[l], 4096);\n"
      "  cudaMalloc(&io.x, 4096);\n"
      "  args.grads = g_grads;\n"
      "  args.io = io;\n"
      "  work(&args);\n"
      "}\n";
  const Analysis a = analyze("args.cu", src);
  std::vector<const Call*> nccl;
  for (const Call& c : a.calls)
    if (c.name == "ncclAllReduce") nccl.push_back(&c);
  ASSERT_EQ(nccl.size(), 2u);
  const std::vector<std::vector<std::string>> expected = {{"g_grads[]"}, {"io.x"}};
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(nccl[i]->arg_buffers.count(0)) << nccl[i]->line << ": " << nccl[i]->unresolved;
    EXPECT_EQ(nccl[i]->arg_buffers.at(0), expected[i]) << nccl[i]->line;
  }
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
}
