// Buffers owned by users' classes, as ML-systems C++ writes them: a member initialised from an
// allocation helper, a member container its constructor fills, a getter casting a smart pointer's
// pointer, a container of smart pointers. Each is followed to its allocation; a constructor loop
// bounded by a rank-dependent field of a struct passed whole stays host NCCL.
#include <gtest/gtest.h>

#include <tuple>

#include "analyzer_test_util.hpp"

using namespace braid::convert;
using namespace braid::convert::test;

namespace {

const std::string kPrologue =
    "#include <nccl.h>\n"
    "#include <cuda_runtime.h>\n"
    "#include <memory>\n"
    "#include <vector>\n"
    "template <typename T> T* device_alloc(size_t n) { T* p = nullptr; cudaMalloc(&p, n * sizeof(T)); return p; }\n";

}  // namespace

// `ptr_(device_alloc<T>(n))` in a member-initialiser list, and `return device_alloc<T>(n);` in a
// factory: what the helper returns, as for `T* p = device_alloc<T>(n);`.
TEST(AnalyzerClassBuffers, AMemberInitialisedFromAnAllocationHelper) {
  const std::string src = kPrologue +
                          "class DeviceBuffer {\n"
                          " public:\n"
                          "  explicit DeviceBuffer(size_t n) : ptr_(device_alloc<float>(n)), n_(n) {}\n"
                          "  ~DeviceBuffer() { cudaFree(ptr_); }\n"
                          "  float* data() const { return ptr_; }\n"
                          "  size_t size() const { return n_; }\n"
                          " private:\n"
                          "  float* ptr_;\n"
                          "  size_t n_;\n"
                          "};\n"
                          "float* make(size_t n) { return device_alloc<float>(n); }\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  DeviceBuffer shard(1 << 20), full(2 << 20);\n"
                          "  ncclAllGather(shard.data(), full.data(), shard.size(), ncclFloat, comm, s);\n"
                          "  float* g = make(1 << 20);\n"
                          "  ncclAllReduce(g, g, 1 << 20, ncclFloat, ncclSum, comm, s);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& ag = first_call(a, "ncclAllGather");
  EXPECT_EQ(ag.unresolved, "");
  EXPECT_TRUE(std::any_of(ag.via.begin(), ag.via.end(),
                          [](const std::string& v) { return contains(v, "is what device_alloc() returns"); }));
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, n * sizeof(T))")) << c.source;
}

// A model whose constructor allocates one gradient per layer into its member vector, read back
// through a reference getter. Sound while every rank runs the loop alike; with the layer count
// set from the rank on the config passed whole (`cfg.layers = 2 + rank % 2`), the parameter's and
// then the member's `.layers` carry the rank, and the allocation stays host.
TEST(AnalyzerClassBuffers, AConstructorFillingItsMemberVectorInALoop) {
  const auto program = [](const std::string& set_layers) {
    return kPrologue +
           "struct Config { int layers = 4; size_t hidden = 1024; };\n"
           "class Model {\n"
           " public:\n"
           "  explicit Model(const Config& cfg) : cfg_(cfg) {\n"
           "    for (int l = 0; l < cfg_.layers; ++l) {\n"
           "      float* g = nullptr;\n"
           "      cudaMalloc(&g, cfg_.hidden * sizeof(float));\n"
           "      grads_.push_back(g);\n"
           "    }\n"
           "  }\n"
           "  std::vector<float*>& grads() { return grads_; }\n"
           "  size_t numel() const { return cfg_.hidden; }\n"
           " private:\n"
           "  Config cfg_;\n"
           "  std::vector<float*> grads_;\n"
           "};\n"
           "int main(int argc, char** argv) {\n"
           "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
           "  Config cfg;\n" +
           set_layers +
           "  Model model(cfg);\n"
           "  for (float* g : model.grads()) ncclAllReduce(g, g, model.numel(), ncclFloat, ncclSum, comm, s);\n"
           "}\n";
  };
  const Conversion alike = convert_text(program(""));
  EXPECT_EQ(alike.converted_calls, 1) << left_text(alike);
  EXPECT_TRUE(contains(alike.source, "braid_converted::sym_malloc(&g, cfg_.hidden * sizeof(float))")) << alike.source;
  const Analysis a = analyze("user.cu", program(""));
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_TRUE(std::any_of(ar.via.begin(), ar.via.end(), [](const std::string& v) {
    return contains(v, "model.grads_[] holds copies of g, allocated by Model() of class Model");
  })) << ::testing::PrintToString(ar.via);

  const Conversion by_rank = convert_text(program("  cfg.layers = 2 + rank % 2;\n"));
  EXPECT_EQ(by_rank.converted_calls, 0);
  EXPECT_TRUE(told(by_rank, "in a loop whose trip count depends on the rank")) << left_text(by_rank);
  EXPECT_FALSE(contains(by_rank.source, "sym_malloc(&g")) << by_rank.source;
}

// `data()` returning `static_cast<float*>(flat.get())` of a smart pointer the caller assigns
// (`nb.flat = device_alloc_owned(n)`): the field itself, followed in the caller's terms.
TEST(AnalyzerClassBuffers, AGetterCastingASmartPointersPointer) {
  const std::string src =
      kPrologue +
      "struct CudaDeleter { void operator()(void* p) const { cudaFree(p); } };\n"
      "using DevicePtr = std::unique_ptr<void, CudaDeleter>;\n"
      "DevicePtr owned_alloc(size_t bytes) { void* p = nullptr; cudaMalloc(&p, bytes); return DevicePtr(p); }\n"
      "struct Bucket {\n"
      "  DevicePtr flat;\n"
      "  size_t numel = 0;\n"
      "  float* data() { return static_cast<float*>(flat.get()); }\n"
      "  float* raw() { return (float*)flat.get(); }\n"
      "};\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  Bucket nb;\n"
      "  nb.numel = 1 << 20;\n"
      "  nb.flat = owned_alloc(nb.numel * sizeof(float));\n"
      "  ncclAllReduce(nb.data(), nb.data(), nb.numel, ncclFloat, ncclAvg, comm, s);\n"
      "  ncclBroadcast(nb.raw(), nb.raw(), nb.numel, ncclFloat, 0, comm, s);\n"
      "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, bytes)")) << c.source;
}

// A class keeping one smart pointer per layer (`layers_.emplace_back(p, deleter)`,
// `push_back(std::unique_ptr<float, Del>(q))`): an element owns what was given to it.
TEST(AnalyzerClassBuffers, AContainerOfSmartPointersOwningTheAllocations) {
  const std::string src = kPrologue +
                          "struct Del { void operator()(float* p) const { cudaFree(p); } };\n"
                          "class LayerBuffers {\n"
                          " public:\n"
                          "  LayerBuffers(int layers, size_t n) : n_(n) {\n"
                          "    for (int l = 0; l < layers; ++l) {\n"
                          "      float* p = nullptr;\n"
                          "      cudaMalloc(&p, n * sizeof(float));\n"
                          "      layers_.emplace_back(p, [](float* q) { cudaFree(q); });\n"
                          "      float* q = nullptr;\n"
                          "      cudaMalloc(&q, n * sizeof(float));\n"
                          "      owned_.push_back(std::unique_ptr<float, Del>(q));\n"
                          "    }\n"
                          "  }\n"
                          "  float* layer(int l) { return layers_[l].get(); }\n"
                          "  float* owned(int l) { return owned_[l].get(); }\n"
                          "  size_t n_;\n"
                          " private:\n"
                          "  std::vector<std::shared_ptr<float>> layers_;\n"
                          "  std::vector<std::unique_ptr<float, Del>> owned_;\n"
                          "};\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  LayerBuffers kv(4, 1 << 20);\n"
                          "  for (int l = 0; l < 4; ++l) {\n"
                          "    ncclAllReduce(kv.layer(l), kv.layer(l), kv.n_, ncclFloat, ncclSum, comm, s);\n"
                          "    ncclAllReduce(kv.owned(l), kv.owned(l), kv.n_, ncclFloat, ncclSum, comm, s);\n"
                          "  }\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, n * sizeof(float))")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&q, n * sizeof(float))")) << c.source;
}

// A model's constructor filling its member vector of tensors in a loop bounded by a field of its
// config (`for (l < cfg.layers)`, `struct Cfg { int layers = 4; }`, `Cfg cfg; Model m(cfg);`), the
// elements then bound to references (`auto& w = weights_[i];`): every rank runs it alike. A field
// that anything sets besides its default (assigned, incremented, read into, its address given, a
// constructor's initialiser) keeps the constructions out of sight.
TEST(AnalyzerClassBuffers, AMemberVectorFilledInALoopBoundedByAConfigField) {
  const auto program = [](const std::string& cfg_struct, const std::string& after_cfg) {
    return kPrologue + "#include <iostream>\n" +
           "template <typename T> class Tensor {\n"
           " public:\n"
           "  explicit Tensor(size_t n) : n_(n) { cudaMalloc(&p_, n * sizeof(T)); }\n"
           "  Tensor(Tensor&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; }\n"
           "  ~Tensor() { if (p_) cudaFree(p_); }\n"
           "  T* data() { return p_; }\n"
           "  size_t numel() const { return n_; }\n"
           " private:\n"
           "  T* p_ = nullptr;\n"
           "  size_t n_;\n"
           "};\n" +
           cfg_struct +
           "struct Model {\n"
           "  std::vector<Tensor<float>> weights_;\n"
           "  explicit Model(const Cfg& cfg) {\n"
           "    for (int l = 0; l < cfg.layers; ++l) weights_.emplace_back((size_t)cfg.hidden);\n"
           "    for (size_t i = 0; i < weights_.size(); ++i) { auto& w = weights_[i]; (void)w; }\n"
           "  }\n"
           "};\n"
           "int main(int argc, char** argv) {\n"
           "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
           "  Cfg cfg;\n" +
           after_cfg +
           "  Model model(cfg);\n"
           "  Tensor<float> x(1 << 20);\n"
           "  ncclAllReduce(x.data(), x.data(), x.numel(), ncclFloat, ncclSum, comm, s);\n"
           "}\n";
  };
  const std::string plain = "struct Cfg { int hidden = 1024; int layers = 4; };\n";
  const Conversion alike = convert_text(program(plain, ""));
  EXPECT_EQ(alike.converted_calls, 1) << left_text(alike);
  EXPECT_TRUE(contains(alike.source, "braid_converted::sym_malloc(&p_, n * sizeof(T))")) << alike.source;
  for (const std::string& set :
       {"  cfg.layers = 2 + rank % 2;\n", "  if (rank == 0) cfg.layers++;\n", "  std::cin >> cfg.layers;\n",
        "  void parse(int, char**, Cfg*); parse(argc, argv, &cfg);\n"}) {
    const Conversion c = convert_text(program(plain, set));
    EXPECT_EQ(c.converted_calls, 0) << set;
    EXPECT_TRUE(told(c, "constructed out of braid's sight")) << set << left_text(c);
  }
  const Conversion from_env = convert_text(
      program("struct Cfg { int hidden = 1024; int layers = 4; Cfg() : layers(atoi(getenv(\"L\"))) {} };\n", ""));
  EXPECT_EQ(from_env.converted_calls, 0);
}

// Megatron's shape: one `split()` helper makes the tensor- and the data-parallel communicator
// (called twice), and a tensor sized by the tensor-parallel group's `ncclCommCount` is made after
// both: its window size is agreed over the communicators bound by then. Made between the two
// calls, it comes before one of the creations and stays host with its reason.
TEST(AnalyzerClassBuffers, ASplitHelperCalledForTwoGroupsThenRankSizedTensors) {
  const auto program = [](const std::string& between, const std::string& after) {
    return kPrologue +
           "class Ctx {\n"
           " public:\n"
           "  explicit Ctx(ncclComm_t c) : comm_(c) { ncclCommCount(comm_, &size_); }\n"
           "  Ctx* split(int color, int key) { ncclComm_t sub; ncclCommSplit(comm_, color, key, &sub, nullptr); return "
           "new Ctx(sub); }\n"
           "  void all_reduce(float* x, size_t n) { ncclAllReduce(x, x, n, ncclFloat, ncclSum, comm_, 0); }\n"
           "  int size() const { return size_; }\n"
           " private:\n"
           "  ncclComm_t comm_;\n"
           "  int size_ = 1;\n"
           "};\n"
           "int main(int argc, char** argv) {\n"
           "  int rank = 0, world = 1; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &world);\n"
           "  ncclComm_t comm; ncclUniqueId id; ncclCommInitRank(&comm, world, id, rank);\n"
           "  Ctx world_ctx(comm);\n"
           "  Ctx* tp = world_ctx.split(rank / 2, rank % 2);\n" +
           between + "  Ctx* dp = world_ctx.split(rank % 2, rank / 2);\n" + after +
           "  tp->all_reduce(shard, n);\n"
           "  dp->all_reduce(shard, n);\n"
           "}\n";
  };
  const std::string make = "  size_t n = 4096 / tp->size(); float* shard = device_alloc<float>(n);\n";
  const Conversion after = convert_text(program("", make));
  EXPECT_EQ(after.converted_calls, 1) << left_text(after);  // one call site, reached with each group
  EXPECT_TRUE(contains(after.source, "braid_converted::sym_malloc_agreed(&p, n * sizeof(T))")) << after.source;
  const Conversion between = convert_text(program(make, ""));
  EXPECT_EQ(between.converted_calls, 0);
  EXPECT_TRUE(told(between, "is not created before it on every path")) << left_text(between);
}

// A call of a template helper (`device_alloc<float>(n)`) is a call site like any other: one made on
// some ranks only (`if (rank == 0) a = device_alloc<float>(n);`) makes every allocation of the helper
// rank-dependent, and a size given by the rank is agreed. Template calls were not call sites: both
// converted to plain sym_malloc.
TEST(AnalyzerClassBuffers, CallsOfATemplateHelperAreCallSites) {
  const auto program = [](const std::string& extra) {
    return kPrologue +
           "int main(int argc, char** argv) {\n"
           "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, rank);\n"
           "  float* b = device_alloc<float>(1024);\n" +
           extra +
           "  size_t n = 1024 * (rank + 1);\n"
           "  float* c = device_alloc<float>(n);\n"
           "  ncclAllReduce(b, b, 1024, ncclFloat, ncclSum, comm, s);\n"
           "  ncclBroadcast(c, c, 1024, ncclFloat, 0, comm, s);\n"
           "}\n";
  };
  const Conversion plain = convert_text(program(""));
  EXPECT_EQ(plain.converted_calls, 2) << left_text(plain);
  EXPECT_TRUE(contains(plain.source, "braid_converted::sym_malloc_agreed(&p, n * sizeof(T))")) << plain.source;
  const Conversion some_ranks =
      convert_text(program("  float* a = nullptr;\n  if (rank == 0) a = device_alloc<float>(4096);\n"));
  EXPECT_EQ(some_ranks.converted_calls, 0);
  EXPECT_TRUE(told(some_ranks, "the allocation helper device_alloc() is called under a condition at line 11"))
      << left_text(some_ranks);
}

// `p_.reset(p, Del())` (a shared_ptr given its deleter) gives the pointer as `reset(p)` does; a
// class holding a vector of tensors that the program never constructs (or never fills) makes no
// tensor out of sight.
TEST(AnalyzerClassBuffers, AResetWithADeleterAndAHolderNeverMade) {
  const std::string src =
      kPrologue +
      "template <typename T> class Buffer {\n"
      " public:\n"
      "  explicit Buffer(size_t n) : n_(n) { T* p = nullptr; cudaMalloc(&p, n * sizeof(T)); p_.reset(p, Del()); }\n"
      "  T* data() const { return p_.get(); }\n"
      "  size_t size() const { return n_; }\n"
      " private:\n"
      "  struct Del { void operator()(T* p) const { cudaFree(p); } };\n"
      "  std::shared_ptr<T> p_;\n"
      "  size_t n_ = 0;\n"
      "};\n"
      "struct Cfg { int layers = 4; };\n"
      "struct Unused {\n"
      "  std::vector<Buffer<float>> weights_;\n"
      "  explicit Unused(const Cfg& cfg) { for (int l = 0; l < cfg.layers; ++l) weights_.emplace_back(1024); }\n"
      "};\n"
      "struct Empty { std::vector<Buffer<float>> none_; size_t count() const { return none_.size(); } };\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  Buffer<float> g(1 << 20);\n"
      "  ncclAllReduce(g.data(), g.data(), g.size(), ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, n * sizeof(T))")) << c.source;
}

// C's `typedef struct { .. } Ctx;` is a struct type like `struct Ctx { .. };`, and a global given a
// factory's whole result (`g_ctx = ctx_init(..)`, llm.c's `multi_gpu_config = multi_gpu_config_init(..)`)
// has the fields the factory set: `g_ctx.buf` is `r.buf`, allocated there.
TEST(AnalyzerClassBuffers, ATypedefStructGlobalGivenAFactorysResult) {
  const std::string src =
      kPrologue +
      "typedef struct {\n"
      "  ncclComm_t comm;\n"
      "  cudaStream_t stream;\n"
      "  float* buf;\n"
      "  size_t n;\n"
      "} Ctx;\n"
      "Ctx g_ctx;\n"
      "Ctx ctx_init(int world, int rank, ncclUniqueId id) {\n"
      "  Ctx r;\n"
      "  ncclCommInitRank(&r.comm, world, id, rank);\n"
      "  cudaStreamCreate(&r.stream);\n"
      "  r.n = 4096;\n"
      "  cudaMalloc(&r.buf, r.n * sizeof(float));\n"
      "  return r;\n"
      "}\n"
      "int main(int argc, char** argv) {\n"
      "  int rank = 0, world = 1; ncclUniqueId id;\n"
      "  g_ctx = ctx_init(world, rank, id);\n"
      "  ncclAllReduce(g_ctx.buf, g_ctx.buf, g_ctx.n, ncclFloat, ncclSum, g_ctx.comm, g_ctx.stream);\n"
      "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&r.buf, r.n * sizeof(float))")) << c.source;
}

// A struct of per-micro-batch vectors filled by a helper through its reference (or pointer)
// parameter, `alloc_stage(b[c])` / `alloc_stage(&one)` with `b.act.push_back(p)` after
// `cudaMalloc(&p, ..)`: each object's elements are the helper's allocations (before: "no
// cudaMalloc/ncclMemAlloc allocation"). A helper given the struct by value fills its own copy: the
// caller's vector holds nothing of it.
TEST(AnalyzerClassBuffers, AMemberContainerFilledThroughAHelpersParameter) {
  const auto program = [](const std::string& param, const std::string& arrow, const std::string& give) {
    return kPrologue + "struct Stage { std::vector<float*> act, grad; };\n" + "void alloc_stage(" + param + ") {\n" +
           "  for (int m = 0; m < 4; ++m) { float* p; cudaMalloc(&p, 4096); b" + arrow +
           "act.push_back(p); cudaMalloc(&p, 4096); b" + arrow + "grad.push_back(p); }\n" +
           "}\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  Stage b[2]; Stage one;\n"
           "  for (int c = 0; c < 2; ++c) alloc_stage(" +
           give + "b[c]);\n" + "  alloc_stage(" + give +
           "one);\n"
           "  for (int m = 0; m < 4; ++m) ncclSend(b[1].act[m], 1024, ncclFloat, 1, comm, s);\n"
           "  ncclAllReduce(one.grad[0], one.grad[0], 1024, ncclFloat, ncclSum, comm, s);\n"
           "}\n";
  };
  for (const auto& [param, arrow, give] :
       {std::tuple<std::string, std::string, std::string>{"Stage& b", ".", ""}, {"Stage* b", "->", "&"}}) {
    const std::string src = program(param, arrow, give);
    const Analysis a = analyze("user.cu", src);
    const Call& send = first_call(a, "ncclSend");
    EXPECT_EQ(send.unresolved, "") << param;
    EXPECT_TRUE(std::any_of(send.via.begin(), send.via.end(), [](const std::string& v) {
      return contains(v, "allocated by alloc_stage(), which fills it through its parameter");
    })) << param;
    EXPECT_EQ(first_call(a, "ncclAllReduce").unresolved, "") << param;
    const Conversion c = convert_text(src);
    EXPECT_EQ(c.converted_calls, 2) << param << left_text(c);
  }
  const std::string by_value = program("Stage b", ".", "");
  EXPECT_TRUE(contains(first_call(analyze("user.cu", by_value), "ncclSend").unresolved, "no cudaMalloc/ncclMemAlloc"))
      << first_call(analyze("user.cu", by_value), "ncclSend").unresolved;
}

// An RAII array converting to its pointer (`operator T*() const { return ptr_; }`) handed to NCCL
// whole (`ncclAllReduce(g, g, g.size(), ...)`): `g` is `g.ptr_`, allocated by its constructor.
TEST(AnalyzerClassBuffers, AnObjectConvertingToItsPointer) {
  const std::string src = kPrologue +
                          "template <typename T> class DeviceArray {\n"
                          " public:\n"
                          "  explicit DeviceArray(size_t n) : n_(n) { cudaMalloc(&ptr_, n * sizeof(T)); }\n"
                          "  ~DeviceArray() { cudaFree(ptr_); }\n"
                          "  operator T*() const { return ptr_; }\n"
                          "  size_t size() const { return n_; }\n"
                          " private:\n"
                          "  T* ptr_ = nullptr;\n"
                          "  size_t n_ = 0;\n"
                          "};\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  DeviceArray<float> g(1 << 20);\n"
                          "  ncclAllReduce(g, g, g.size(), ncclFloat, ncclSum, comm, s);\n"
                          "  float* half = g + g.size() / 2;\n"
                          "  ncclBroadcast(half, half, 1024, ncclFloat, 0, comm, s);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.unresolved, "");
  EXPECT_TRUE(std::any_of(ar.via.begin(), ar.via.end(),
                          [](const std::string& v) { return contains(v, "converts to its field: g.ptr_"); }));
  EXPECT_EQ(first_call(a, "ncclBroadcast").unresolved, "");
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&ptr_, n * sizeof(T))")) << c.source;
}

// A store handing out its buffers through `operator[]` (`return bufs_[i];`): `grads[l]` is an element of
// its field `grads.bufs_`, filled by its constructor. An index operator that computes (`bufs_[i] + off`)
// is not followed.
TEST(AnalyzerClassBuffers, AnObjectIndexingItsField) {
  const auto program = [](const std::string& body) {
    return kPrologue +
           "class GradStore {\n"
           " public:\n"
           "  GradStore(int layers, size_t n) : n_(n) {\n"
           "    for (int l = 0; l < layers; ++l) { float* p; cudaMalloc(&p, n * 4); bufs_.push_back(p); }\n"
           "  }\n"
           "  float* operator[](size_t i) const { " +
           body +
           " }\n"
           "  size_t count() const { return n_; }\n"
           " private:\n"
           "  std::vector<float*> bufs_;\n"
           "  size_t n_;\n"
           "};\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  GradStore grads(3, 1 << 20);\n"
           "  for (size_t l = 0; l < 3; ++l) ncclAllReduce(grads[l], grads[l], grads.count(), ncclFloat, ncclSum, "
           "comm, s);\n"
           "}\n";
  };
  const std::string src = program("return bufs_[i];");
  const Analysis a = analyze("user.cu", src);
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.unresolved, "");
  EXPECT_TRUE(std::any_of(ar.via.begin(), ar.via.end(), [](const std::string& v) {
    return contains(v, "is an element of its class's field: grads.bufs_[]");
  }));
  EXPECT_EQ(convert_text(src).converted_calls, 1);
  EXPECT_EQ(convert_text(program("return this->bufs_[i];")).converted_calls, 1);
  EXPECT_NE(first_call(analyze("user.cu", program("return bufs_[i] + 16;")), "ncclAllReduce").unresolved, "");
}

// An allocation helper returning two buffers (`return {send, recv};`, `std::make_pair`, `std::make_tuple`)
// taken apart with a structured binding or `std::get<1>`: each element is followed into the helper.
TEST(AnalyzerClassBuffers, BuffersReturnedAsATuple) {
  const auto program = [](const std::string& ret, const std::string& use) {
    return kPrologue +
           "#include <tuple>\n"
           "static std::tuple<float*, float*> make_buffers(size_t n) {\n"
           "  float* send = nullptr; float* recv = nullptr;\n"
           "  cudaMalloc(&send, n * 4); cudaMalloc(&recv, 4 * n * 4);\n"
           "  return " +
           ret +
           ";\n"
           "}\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 4, id, 0);\n" +
           use + "}\n";
  };
  const std::string binding = "  auto [a, b] = make_buffers(1024);\n  ncclAllGather(a, b, 1024, ncclFloat, comm, s);\n";
  for (const char* ret : {"{send, recv}", "std::make_tuple(send, recv)", "std::make_pair(send, recv)",
                          "std::tuple<float*, float*>(send, recv)"}) {
    const std::string src = program(ret, binding);
    const Analysis a = analyze("user.cu", src);
    const Call& ag = first_call(a, "ncclAllGather");
    EXPECT_EQ(ag.unresolved, "") << ret;
    EXPECT_TRUE(std::any_of(ag.via.begin(), ag.via.end(), [](const std::string& v) {
      return contains(v, "is element 1 of what make_buffers() returns");
    })) << ret;
    EXPECT_EQ(convert_text(src).converted_calls, 1) << ret;
  }
  const std::string get =
      "  auto t = make_buffers(1024);\n"
      "  ncclAllGather(std::get<0>(make_buffers(8)), std::get<1>(make_buffers(8)), 8, ncclFloat, comm, s);\n";
  EXPECT_EQ(first_call(analyze("user.cu", program("{send, recv}", get)), "ncclAllGather").unresolved, "");
  // Through a variable given the helper's result: `std::get<I>(bufs)`, a pair's `.first` / `.second`.
  for (const char* use :
       {"  auto bufs = make_buffers(64);\n  ncclAllGather(std::get<0>(bufs), std::get<1>(bufs), 64, ncclFloat, comm, "
        "s);\n",
        "  auto p = make_buffers(64);\n  ncclAllGather(p.first, p.second, 64, ncclFloat, comm, s);\n"}) {
    const Analysis a = analyze("user.cu", program("std::make_pair(send, recv)", use));
    EXPECT_EQ(first_call(a, "ncclAllGather").unresolved, "") << use;
    EXPECT_EQ(first_call(a, "ncclAllGather").buffers.size(), 2u) << use;
  }
  // Into variables declared before: `std::tie(a, b) = make_buffers(n);`, `std::ignore` skipping one.
  const std::pair<const char*, const char*> ties[] = {
      {"  float *a, *b;\n  std::tie(a, b) = make_buffers(64);\n  ncclAllGather(a, b, 64, ncclFloat, comm, s);\n",
       "ncclAllGather"},
      {"  float* b = nullptr;\n  std::tie(std::ignore, b) = make_buffers(64);\n"
       "  ncclAllReduce(b, b, 64, ncclFloat, ncclSum, comm, s);\n",
       "ncclAllReduce"}};
  for (const auto& [use, name] : ties) {
    const std::string src = program("std::make_pair(send, recv)", use);
    const Analysis a = analyze("user.cu", src);
    const Call& c = first_call(a, name);
    EXPECT_EQ(c.unresolved, "") << use;
    EXPECT_TRUE(std::any_of(c.via.begin(), c.via.end(), [](const std::string& v) {
      return contains(v, "is element 1 of what make_buffers() returns");
    })) << use;
    EXPECT_EQ(convert_text(src).converted_calls, 1) << use;
  }
  // A tuple built elsewhere (a variable returned whole) has no element braid can take.
  const std::string whole = "  auto both = std::make_tuple(send, recv);\n  return both";
  const Analysis left = analyze("user.cu", program(whole, binding));
  EXPECT_TRUE(contains(first_call(left, "ncclAllGather").unresolved, "returns no tuple braid can take element"))
      << first_call(left, "ncclAllGather").unresolved;
}

// A communicator held in a std::optional: `comm.value()` is what it holds (`*comm` was followed before).
TEST(AnalyzerClassBuffers, ACommunicatorInAnOptional) {
  const std::string src = kPrologue +
                          "#include <optional>\n"
                          "int main() {\n"
                          "  std::optional<ncclComm_t> comm; ncclUniqueId id; cudaStream_t s; ncclComm_t c;\n"
                          "  ncclCommInitRank(&c, 2, id, 0);\n"
                          "  comm = c;\n"
                          "  float* g; cudaMalloc(&g, 4096);\n"
                          "  ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm.value(), s);\n"
                          "  ncclBroadcast(g, g, 1024, ncclFloat, 0, *comm, s);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.comm_paths, std::vector<std::string>{"comm"});
  EXPECT_EQ(first_call(a, "ncclBroadcast").comm_paths.size(), 1u);  // `*comm`: read as a pointer's pointee
  EXPECT_EQ(convert_text(src).converted_calls, 2) << left_text(convert_text(src));
}

// A field a base class declares (`Layer::grad_`), allocated by each derived class's constructor
// (`Linear`, `Norm`), read through the base's virtual getter over a vector of base pointers: the
// getter's field is followed into both derived allocations.
TEST(AnalyzerClassBuffers, ABaseClassFieldAllocatedByDerivedConstructors) {
  const auto program = [](const std::string& heads) {
    return kPrologue +
           "class Layer {\n"
           " public:\n"
           "  virtual ~Layer() { cudaFree(grad_); }\n"
           "  virtual float* grad() { return grad_; }\n"
           "  size_t numel() const { return numel_; }\n"
           " protected:\n"
           "  float* grad_ = nullptr;\n"
           "  size_t numel_ = 0;\n"
           "};\n"
           "class Linear " +
           heads +
           " {\n"
           " public:\n"
           "  Linear(size_t in, size_t out) { numel_ = in * out; cudaMalloc(&grad_, numel_ * 4); }\n"
           "};\n"
           "struct Norm : Layer {\n"
           "  explicit Norm(size_t d) { numel_ = d; cudaMalloc(&this->grad_, numel_ * 4); }\n"
           "};\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  std::vector<std::unique_ptr<Layer>> layers;\n"
           "  for (int l = 0; l < 2; ++l) { layers.push_back(std::make_unique<Linear>(64, 256)); "
           "layers.push_back(std::make_unique<Norm>(64)); }\n"
           "  for (auto& layer : layers) ncclAllReduce(layer->grad(), layer->grad(), layer->numel(), ncclFloat, "
           "ncclSum, comm, s);\n"
           "}\n";
  };
  for (const char* heads :
       {": public Layer", ": virtual public Layer", ": public Layer, private std::enable_shared_from_this<Linear>"}) {
    const std::string src = program(heads);
    const Analysis a = analyze("user.cu", src);
    const Call& ar = first_call(a, "ncclAllReduce");
    EXPECT_EQ(ar.unresolved, "") << heads;
    EXPECT_EQ(ar.buffers.size(), 2u) << heads;  // Linear's and Norm's allocations
    EXPECT_EQ(convert_text(src).converted_calls, 1) << heads;
  }
}

// A bump allocator whose slab the caller allocates (`cudaMalloc(&ws.base, n)` in main) and whose
// member template hands out views (`ws.carve<T>(n)` returning `base + offset`): `base` in the member's
// terms is `ws.base`. A class that allocates its own field keeps reading it as its own.
TEST(AnalyzerClassBuffers, ViewsOfASlabTheCallerAllocated) {
  const std::string src = kPrologue +
                          "struct Workspace {\n"
                          "  char* base = nullptr; size_t offset = 0;\n"
                          "  template <typename T> T* carve(size_t n) { T* p = reinterpret_cast<T*>(base + offset); "
                          "offset += n * sizeof(T); return p; }\n"
                          "};\n"
                          "struct Acts { float* out; float* logits; };\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  Workspace ws; cudaMalloc(&ws.base, 1 << 26);\n"
                          "  Acts a; a.out = ws.carve<float>(4096); a.logits = ws.carve<float>(8192);\n"
                          "  float* tmp = ws.carve<float>(64);\n"
                          "  ncclAllReduce(a.out, a.out, 4096, ncclFloat, ncclSum, comm, s);\n"
                          "  ncclAllGather(a.logits + 4096, a.logits, 4096, ncclFloat, comm, s);\n"
                          "  ncclBroadcast(tmp, tmp, 64, ncclFloat, 0, comm, s);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  for (const char* name : {"ncclAllReduce", "ncclAllGather", "ncclBroadcast"}) {
    const Call& c = first_call(a, name);
    EXPECT_EQ(c.unresolved, "") << name;
    EXPECT_EQ(c.buffers, std::vector<std::string>{"ws.base"}) << name;
  }
  EXPECT_EQ(convert_text(src).converted_calls, 3);
}

// `Tensor a = make(n), b = make(m);`: the second declarator is declared with its own value, as in
// two statements (before: `b.data` had no allocation).
TEST(AnalyzerClassBuffers, TheSecondDeclaratorOfAStatementHasItsValue) {
  const std::string src =
      kPrologue +
      "struct Tensor { void* data = nullptr; size_t n = 0; };\n"
      "Tensor make(size_t n) { Tensor t; t.n = n; cudaMalloc(&t.data, n * 4); return t; }\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  Tensor a = make(1024), b = make(2048);\n"
      "  ncclAllReduce(b.data, b.data, b.n, ncclFloat, ncclSum, comm, s);\n"
      "  for (int i = 0, j = 1; i < 2; ++i, ++j) ncclAllReduce(a.data, a.data, a.n, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  for (std::size_t ci : a.nccl_collectives()) EXPECT_EQ(a.calls[ci].unresolved, "") << a.calls[ci].line;
  EXPECT_EQ(convert_text(src).converted_calls, 2);
}

// A gradient hook: a lambda kept in a `std::function`, copied into a vector of hooks and called
// through both (`hook(g, n)`, `hooks[l](g, n)`): those calls are the lambda's call sites. A hook
// handed somewhere braid cannot see (`register_hook(hook)` of a library) keeps its parameters
// unfollowed.
TEST(AnalyzerClassBuffers, ALambdaCalledThroughAStdFunctionAndAVectorOfThem) {
  const auto program = [](const std::string& extra) {
    return kPrologue +
           "#include <functional>\n"
           "void register_hook(std::function<void(float*, size_t)> h);\n"
           "int main() {\n"
           "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  float *g0, *g1; cudaMalloc(&g0, 4096); cudaMalloc(&g1, 4096);\n"
           "  auto reduce = [&](float* g, size_t n) { ncclAllReduce(g, g, n, ncclFloat, ncclAvg, comm, s); };\n"
           "  std::vector<std::function<void(float*, size_t)>> hooks;\n"
           "  std::function<void(float*, size_t)> hook = reduce;\n"
           "  hooks.push_back(hook);\n"
           "  hook(g0, 1024);\n"
           "  hooks[0](g1, 1024);\n" +
           extra + "}\n";
  };
  const Analysis a = analyze("user.cu", program(""));
  EXPECT_EQ(first_call(a, "ncclAllReduce").unresolved, "");
  EXPECT_EQ(convert_text(program("")).converted_calls, 1);
  const Analysis out = analyze("user.cu", program("  register_hook(hook);\n"));
  EXPECT_TRUE(contains(first_call(out, "ncclAllReduce").unresolved, "also used as a value"))
      << first_call(out, "ncclAllReduce").unresolved;
}

// Buffers kept in standard containers the way C++ code keeps them: a map allocated in place
// (`cudaMalloc(&params[name], n)`) and read as a range-for binding's or an iterator's value
// (`p` of `auto& [name, p]`, `it->second` of `params.find(key)`), a vector's element through an
// iterator (`*it`), and a vector of (pointer, count) pairs read by a structured binding
// (`auto [ptr, count] = chunks[i];`, filled with `emplace_back(g, count)`).
TEST(AnalyzerClassBuffers, MapValuesIteratorsAndPairsOfBuffers) {
  const std::string src =
      kPrologue +
      "#include <map>\n#include <string>\n#include <utility>\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  std::map<std::string, float*> params;\n"
      "  for (const char* name : {\"wq\", \"wk\"}) cudaMalloc(&params[name], 4096);\n"
      "  for (auto& [name, p] : params) ncclBroadcast(p, p, 1024, ncclFloat, 0, comm, s);\n"
      "  auto it = params.find(\"wq\");\n"
      "  ncclAllReduce(it->second, it->second, 1024, ncclFloat, ncclSum, comm, s);\n"
      "  std::vector<float*> grads(2); for (auto& g : grads) cudaMalloc(&g, 4096);\n"
      "  for (auto g = grads.begin(); g != grads.end(); ++g) ncclAllReduce(*g, *g, 1024, ncclFloat, ncclAvg, comm, "
      "s);\n"
      "  std::vector<std::pair<float*, size_t>> chunks;\n"
      "  for (int c = 0; c < 2; ++c) { float* x; cudaMalloc(&x, 4096); chunks.emplace_back(x, 1024); }\n"
      "  for (size_t i = 0; i < chunks.size(); ++i) { auto [ptr, count] = chunks[i]; ncclAllReduce(ptr, ptr, count, "
      "ncclFloat, ncclMax, comm, s); }\n"
      "  for (auto& [name, p] : params) cudaFree(p);\n"
      "  for (auto& c : chunks) cudaFree(c.first);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  for (std::size_t ci : a.nccl_collectives()) EXPECT_EQ(a.calls[ci].unresolved, "") << a.calls[ci].line;
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 4) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&params[name], 4096)")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free(c.first)")) << c.source;
}

// An inference engine's allocator interface (FasterTransformer's shape): buffers from a member
// template `allocator_->reMalloc(ptr, bytes)` returning `(T*)malloc(size)`, the virtual `malloc` of
// the derived `CudaAllocator` returning what cudaMalloc made. The call under the cast is the
// helper's value (before: "not a variable, field or element access").
TEST(AnalyzerClassBuffers, AnAllocatorInterfacesCastResult) {
  const std::string src =
      kPrologue +
      "class IAllocator {\n"
      " public:\n"
      "  virtual ~IAllocator() {}\n"
      "  virtual void* malloc(size_t size) = 0;\n"
      "  template <typename T> T* reMalloc(T* ptr, size_t size) { return (T*)malloc(size); }\n"
      "};\n"
      "class CudaAllocator : public IAllocator {\n"
      " public:\n"
      "  void* malloc(size_t size) override { void* p = nullptr; cudaMalloc(&p, size); return p; }\n"
      "};\n"
      "template <typename T> struct Layer {\n"
      "  IAllocator* allocator_; T* out_ = nullptr;\n"
      "  void allocate(size_t n) { out_ = allocator_->reMalloc(out_, n * sizeof(T)); }\n"
      "  void forward(ncclComm_t c, cudaStream_t s, size_t n) {\n"
      "    ncclAllReduce(out_, out_, n, ncclFloat, ncclSum, c, s);\n"
      "  }\n"
      "};\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  CudaAllocator alloc; Layer<float> layer{&alloc};\n"
      "  layer.allocate(4096); layer.forward(comm, s, 4096);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.unresolved, "");
  EXPECT_TRUE(std::any_of(ar.via.begin(), ar.via.end(), [](const std::string& v) {
    return contains(v, "malloc() returns p");
  })) << ::testing::PrintToString(ar.via);
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, size)")) << c.source;
}

// llm.c's activations: a table of pointers to a struct's fields, its entries filled in one function
// through a macro (`tensors[k] = TENSOR_SPEC(data->output, n)`, read expanded), then stored through
// in another (`*(tensors[i].ptr) = it;`, `it` walking one cudaMalloc'd block). The grad-norm
// all-reduce on `(float*)model->acts.output` is that block (before: no allocation braid knew).
TEST(AnalyzerClassBuffers, FieldsPointedIntoOneBlockThroughATableOfSpecs) {
  const std::string src = kPrologue +
                          "#define N 3\n"
                          "typedef struct { float* encoded; float* losses; float* output; } Acts;\n"
                          "struct TensorSpec { void** ptr; size_t size; };\n"
                          "#define TENSOR_SPEC(pointer, size) TensorSpec{(void**)(&pointer), (size)}\n"
                          "typedef struct { Acts acts; TensorSpec specs[N]; void* mem; } Model;\n"
                          "void fill_sizes(const Acts* data, TensorSpec (&tensors)[N], size_t B) {\n"
                          "  tensors[0] = TENSOR_SPEC(data->encoded, B * 768);\n"
                          "  tensors[1] = TENSOR_SPEC(data->losses, B);\n"
                          "  tensors[2] = TENSOR_SPEC(data->output, B * 1024);\n"
                          "}\n"
                          "void* malloc_and_point(TensorSpec (&tensors)[N]) {\n"
                          "  size_t bytes = 0;\n"
                          "  for (int i = 0; i < N; i++) bytes += tensors[i].size * 4;\n"
                          "  void* mem; cudaMalloc((void**)&mem, bytes);\n"
                          "  char* it = (char*)mem;\n"
                          "  for (int i = 0; i < N; i++) {\n"
                          "    if (tensors[i].size == 0) { *(tensors[i].ptr) = NULL; }\n"
                          "    else { *(tensors[i].ptr) = it; it += tensors[i].size * 4; }\n"
                          "  }\n"
                          "  return mem;\n"
                          "}\n"
                          "void allocate_state(Model* model, size_t B) {\n"
                          "  fill_sizes(&model->acts, model->specs, B);\n"
                          "  model->mem = malloc_and_point(model->specs);\n"
                          "}\n"
                          "void grad_norm(Model* model, ncclComm_t comm, cudaStream_t s) {\n"
                          "  float* sq = (float*)model->acts.output;\n"
                          "  ncclAllReduce(sq, sq, 1, ncclFloat, ncclSum, comm, s);\n"
                          "}\n"
                          "int main() {\n"
                          "  ncclComm_t comm; ncclUniqueId id; cudaStream_t s; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  Model model; allocate_state(&model, 4); grad_norm(&model, comm, s);\n"
                          "  cudaFree(model.mem);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  const Call& ar = first_call(a, "ncclAllReduce");
  EXPECT_EQ(ar.unresolved, "");
  EXPECT_TRUE(std::any_of(ar.via.begin(), ar.via.end(), [](const std::string& v) {
    return contains(v, "by `*(tensors[i].ptr)`");
  })) << ::testing::PrintToString(ar.via);
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc((void**)&mem, bytes)")) << c.source;
  // An entry of another table (or of none) does not point the field there.
  std::string other = src;
  other.replace(other.find("fill_sizes(&model->acts, model->specs, B)"),
                std::string("fill_sizes(&model->acts, model->specs, B)").size(), "fill_sizes(&model->acts, spare, B)");
  other.replace(other.find("void allocate_state(Model* model, size_t B) {\n"),
                std::string("void allocate_state(Model* model, size_t B) {\n").size(),
                "void allocate_state(Model* model, size_t B) {\n  TensorSpec spare[N];\n");
  const Analysis b = analyze("user.cu", other);
  EXPECT_NE(first_call(b, "ncclAllReduce").unresolved, "");
}
