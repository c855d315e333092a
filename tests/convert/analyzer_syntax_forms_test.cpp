// The analyzer on syntax that modern and older C++ alike puts around functions, met in programs
// not written in braid's style: a function's head with a trailing return type, noexcept(expr)
// or throw(), attributes, and calls whose result is cast away.
#include <gtest/gtest.h>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

using namespace braid::convert;

namespace {

int converted(const std::string& helper_head) {
  const std::string src =
      "#include <nccl.h>\n"
      "ncclComm_t g_comm;\n"
      "cudaStream_t g_stream;\n" +
      helper_head +
      " {\n"
      "  return ncclAllReduce(buf, buf, count, dt, ncclSum, g_comm, g_stream);\n"
      "}\n"
      "int main() {\n"
      "  ncclCommInitRank(&g_comm, 2, id, 0);\n"
      "  float* f; cudaMalloc((void**)&f, 4096);\n"
      "  (void)reduce(f, 1024, ncclFloat);\n"
      "  cudaFree(f);\n"
      "}\n";
  return transform(analyze("user.cu", src), src).converted_calls;
}

}  // namespace

// The helper's buffer parameter is followed to its caller's allocation whatever stands between
// the parameter list and the body (before, a trailing return type hid the function entirely, and
// the call stayed host NCCL: "buffer `buf` has no allocation in this file").
TEST(AnalyzerSyntaxForms, HelperHeadsAreFunctionsWhateverFollowsTheirParameters) {
  const int plain = converted("ncclResult_t reduce(void* buf, size_t count, ncclDataType_t dt)");
  ASSERT_EQ(plain, 1);  // the all-reduce
  for (const std::string head :
       {"[[nodiscard]] static inline auto reduce(void* buf, size_t count, ncclDataType_t dt) -> ncclResult_t",
        "auto reduce(void* buf, size_t count, ncclDataType_t dt) noexcept(true) -> decltype(ncclSuccess)",
        "ncclResult_t reduce(void* buf, size_t count, ncclDataType_t dt) throw()",
        "auto reduce(void* buf, size_t count, ncclDataType_t dt) -> std::conditional_t<true, ncclResult_t, int>"})
    EXPECT_EQ(converted(head), plain) << head;
}

// A class template's members defined out of line (`Comm<T>::allreduce`) belong to it, and a
// construction with template arguments (`dist::Comm<float> c(comm, s)`) is one of its call
// sites: the field the member-initialiser list sets is followed to the communicator passed, so the
// calls through the class and a free helper's call on that communicator agree and all convert.
TEST(AnalyzerSyntaxForms, ClassTemplatesMembersAndConstructions) {
  const std::string src =
      "#include <nccl.h>\n"
      "namespace dist {\n"
      "template <typename T> class Comm {\n"
      " public:\n"
      "  explicit Comm(ncclComm_t c, cudaStream_t s) : comm_(c), stream_(s) {}\n"
      "  void allreduce(T* b, size_t n);\n"
      " private:\n"
      "  ncclComm_t comm_;\n"
      "  cudaStream_t stream_;\n"
      "};\n"
      "template <typename T> void Comm<T>::allreduce(T* b, size_t n) {\n"
      "  if (auto r = ncclAllReduce(b, b, n, ncclFloat, ncclSum, comm_, stream_); r != ncclSuccess) return;\n"
      "}\n"
      "void sync_loss(float* loss, ncclComm_t c, cudaStream_t s) { ncclAllReduce(loss, loss, 1, ncclFloat, ncclSum, c, "
      "s); }\n"
      "}  // namespace dist\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  cudaStream_t s; cudaStreamCreate(&s);\n"
      "  float *g, *loss; cudaMalloc(&g, 4096); cudaMalloc(&loss, 4);\n"
      "  dist::Comm<float> c(comm, s);\n"
      "  c.allreduce(g, 1024);\n"
      "  dist::sync_loss(loss, comm, s);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2);
  EXPECT_TRUE(c.left.empty());
}

// A container of structs built in place from their fields (`push_back({buf, n})`, `push_back(Task{...})`,
// `emplace_back(buf, n)`): `tasks[].buf` is what was given for `buf`, followed where it was given.
// A struct with its own constructor maps arguments its own way and is not read so.
TEST(AnalyzerSyntaxForms, ElementsBuiltFromTheirFields) {
  const auto converted_with = [](const std::string& fill, const std::string& extra_member = "") {
    const std::string src =
        "#include <nccl.h>\n#include <vector>\n"
        "struct Task { void* buf; size_t n; " +
        extra_member +
        "};\n"
        "int main() {\n"
        "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
        "  std::vector<float*> bufs(4);\n"
        "  for (int i = 0; i < 4; ++i) cudaMalloc(&bufs[i], 4096);\n"
        "  std::vector<Task> tasks;\n"
        "  for (int i = 0; i < 4; ++i) " +
        fill +
        ";\n"
        "  for (auto& t : tasks) ncclAllReduce(t.buf, t.buf, t.n, ncclFloat, ncclSum, comm, 0);\n"
        "}\n";
    return transform(analyze("user.cu", src), src).converted_calls;
  };
  EXPECT_EQ(converted_with("tasks.push_back({bufs[i], 1024})"), 1);
  EXPECT_EQ(converted_with("tasks.push_back(Task{bufs[i], (size_t)1024})"), 1);
  EXPECT_EQ(converted_with("tasks.emplace_back(bufs[i], 1024)"), 1);
  EXPECT_EQ(
      converted_with("tasks.emplace_back(bufs[i], 1024)", "Task(void* b, size_t c) : buf(nullptr), n(c) { (void)b; }"),
      0);
}

// Named parameters in a map (`params[name] = p` after `cudaMalloc(&p, ...)`), reduced over a
// range-for with a structured binding or through `.second`; a vector of structs unpacked by a
// structured binding names its fields in declaration order.
TEST(AnalyzerSyntaxForms, MapsOfBuffersAndStructuredBindings) {
  const std::string src =
      "#include <nccl.h>\n#include <map>\n#include <string>\n#include <vector>\n"
      "struct Bucket { float* grad; size_t n; };\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  std::map<std::string, float*> params;\n"
      "  std::map<std::string, size_t> sizes{{\"wte\", 1024}, {\"lnf\", 768}};\n"
      "  for (const auto& [name, n] : sizes) { float* p = nullptr; cudaMalloc(&p, n * 4); params[name] = p; }\n"
      "  for (auto& [name, ptr] : params) ncclAllReduce(ptr, ptr, sizes[name], ncclFloat, ncclAvg, comm, 0);\n"
      "  for (auto& kv : params) ncclBroadcast(kv.second, kv.second, sizes[kv.first], ncclFloat, 0, comm, 0);\n"
      "  std::vector<Bucket> buckets(2);\n"
      "  for (auto& b : buckets) cudaMalloc(&b.grad, 4096);\n"
      "  for (auto& [grad, n] : buckets) ncclAllReduce(grad, grad, 1024, ncclFloat, ncclSum, comm, 0);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 3);
  EXPECT_TRUE(c.left.empty());
}

// A tensor-like class: a getter returning its field (`float* data() const { return data_; }`) is
// that field of the object it is called on, and a container filled with a factory's results
// (`grads.push_back(empty(n))`, the factory allocating `t.data_` and returning `t`) holds what the
// factory returns.
TEST(AnalyzerSyntaxForms, GettersOfFieldsAndContainersOfFactoryResults) {
  const std::string src =
      "#include <nccl.h>\n#include <vector>\n"
      "struct Tensor {\n"
      "  float* data_ = nullptr; size_t numel_ = 0;\n"
      "  float* data() const { return data_; }\n"
      "  size_t numel() const { return numel_; }\n"
      "};\n"
      "Tensor empty(size_t n) { Tensor t; t.numel_ = n; cudaMalloc(&t.data_, n * 4); return t; }\n"
      "void all_reduce(const Tensor& t, ncclComm_t comm) { ncclAllReduce(t.data(), t.data(), t.numel(), ncclFloat, "
      "ncclSum, comm, 0); }\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  std::vector<Tensor> grads;\n"
      "  for (int l = 0; l < 4; ++l) grads.push_back(empty(1 << 16));\n"
      "  for (const Tensor& g : grads) all_reduce(g, comm);\n"
      "  Tensor loss = empty(1);\n"
      "  ncclAllReduce(loss.data(), loss.data(), 1, ncclFloat, ncclSum, comm, 0);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(c.left.empty()) << conversion_to_text(c);
}

// A helper filling its caller's pointer through a reference (`void alloc(float*& p, size_t n)`),
// called for several buffers: its one allocation site serves every call (as a helper returning
// the pointer does). Called under a condition anywhere, ranks may allocate differently: it stays
// as written and the calls host NCCL.
TEST(AnalyzerSyntaxForms, HelpersFillingAPointerThroughAReference) {
  const auto converted_with = [](const std::string& extra) {
    const std::string src =
        "#include <nccl.h>\n"
        "void alloc(float*& p, size_t n) { cudaMalloc(&p, n * sizeof(float)); }\n"
        "int main(int argc, char**) {\n"
        "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
        "  float* g = nullptr; float* h = nullptr; float* x = nullptr;\n"
        "  alloc(g, 1024);\n"
        "  alloc(h, 256);\n" +
        extra +
        "  ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0);\n"
        "  ncclBroadcast(h, h, 256, ncclFloat, 0, comm, 0);\n"
        "}\n";
    return transform(analyze("user.cu", src), src);
  };
  const Conversion every = converted_with("");
  EXPECT_EQ(every.converted_calls, 2) << conversion_to_text(every);
  EXPECT_NE(every.source.find("braid_converted::sym_malloc(&p, n * sizeof(float))"), std::string::npos);
  const Conversion some = converted_with("  if (argc > 1) alloc(x, 16);\n");
  EXPECT_EQ(some.converted_calls, 0) << conversion_to_text(some);
}

// The C form of the same: a pointer-to-pointer parameter (`void dev_alloc(float** p, size_t n)
// { cudaMalloc((void**)p, ..); }` called as `dev_alloc(&g, n)`, a template `alloc_zero(T** p, ..)`
// given `(void**)&h`). A `T**` parameter that no allocation fills (a swap) fills nothing.
TEST(AnalyzerSyntaxForms, HelpersFillingAPointerThroughAPointerToIt) {
  const auto converted_with = [](const std::string& extra) {
    const std::string src =
        "#include <nccl.h>\n"
        "static void dev_alloc(float** p, size_t n) { CK(cudaMalloc((void**)p, n * sizeof(float))); }\n"
        "template <typename T> void alloc_zero(T** p, size_t n) { cudaMalloc(p, n * sizeof(T)); cudaMemset(*p, 0, n * "
        "sizeof(T)); }\n"
        "void swap(float** a, float** b) { float* t = *a; *a = *b; *b = t; }\n"
        "int main(int argc, char**) {\n"
        "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
        "  float *g, *h, *x, *y;\n"
        "  dev_alloc(&g, 1024);\n"
        "  alloc_zero((void**)&h, 256);\n" +
        extra +
        "  ncclAllReduce(g, g, 1024, ncclFloat, ncclSum, comm, 0);\n"
        "  ncclBroadcast(h, h, 256, ncclFloat, 0, comm, 0);\n"
        "  swap(&x, &y);\n"
        "  ncclAllReduce(x, x, 16, ncclFloat, ncclSum, comm, 0);\n"
        "}\n";
    return transform(analyze("user.cu", src), src);
  };
  const Conversion every = converted_with("");
  EXPECT_EQ(every.converted_calls, 2) << conversion_to_text(every);
  EXPECT_NE(every.source.find("braid_converted::sym_malloc((void**)p, n * sizeof(float))"), std::string::npos);
  EXPECT_NE(every.source.find("braid_converted::sym_malloc(p, n * sizeof(T))"), std::string::npos);
  ASSERT_EQ(every.left.size(), 1u) << conversion_to_text(every);
  EXPECT_NE(every.left[0].reason.find("no cudaMalloc/ncclMemAlloc allocation"), std::string::npos)
      << every.left[0].reason;
  const Conversion some = converted_with("  if (argc > 1) dev_alloc(&x, 16);\n");
  EXPECT_EQ(some.converted_calls, 1) << conversion_to_text(some);  // alloc_zero's h still
}

// An allocation helper called in the right operand of `&&`/`||` or a branch of `?:` runs on some
// ranks only (`if (alloc(&a) != ok || (rank == 0 && alloc(&b) != ok))` allocates b on rank 0): it
// stays as written and the calls host NCCL (it was converted, and rank 0 hung in the window's
// registration). After a success test (`a() != cudaSuccess || b() != cudaSuccess`) or at the top of
// an if whose body leaves (`if (setup_a() || setup_b()) MPI_Abort(..)`), every rank that goes on has
// run it.
TEST(AnalyzerSyntaxForms, AllocationsInShortCircuitsAndTernariesAreConditional) {
  const auto converted = [](const std::string& allocs) {
    const std::string src =
        "#include <nccl.h>\n"
        "cudaError_t alloc_field(float** f, size_t n) { return cudaMalloc((void**)f, n * sizeof(float)); }\n"
        "int setup_b(float** b) { return alloc_field(b, 16) != cudaSuccess; }\n"
        "int main(int argc, char** argv) {\n"
        "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
        "  ncclComm_t comm; ncclUniqueId id; ncclCommInitRank(&comm, 2, id, rank);\n"
        "  float *a = NULL, *b = NULL;\n" +
        allocs +
        "  ncclAllReduce(a, a, 1024, ncclFloat, ncclSum, comm, 0);\n"
        "}\n";
    return transform(analyze("user.cu", src), src).converted_calls;
  };
  EXPECT_EQ(converted("  alloc_field(&a, 1024);\n  if (rank == 0) alloc_field(&b, 16);\n"), 0);
  EXPECT_EQ(
      converted("  if (alloc_field(&a, 1024) != cudaSuccess || (rank == 0 && alloc_field(&b, 16) != cudaSuccess)) "
                "MPI_Abort(MPI_COMM_WORLD, 1);\n"),
      0);
  EXPECT_EQ(converted("  alloc_field(&a, 1024);\n  cudaError_t e = rank == 0 ? alloc_field(&b, 16) : cudaSuccess;\n"),
            0);
  EXPECT_EQ(converted("  bool ok = rank > 0 || alloc_field(&b, 16) == cudaSuccess;\n  alloc_field(&a, 1024);\n"), 0);
  EXPECT_EQ(converted("  if (alloc_field(&a, 1024) != cudaSuccess || alloc_field(&b, 16) != cudaSuccess) return 1;\n"),
            1);
  EXPECT_EQ(converted("  if (alloc_field(&a, 1024) || setup_b(&b)) MPI_Abort(MPI_COMM_WORLD, 1);\n"), 1);
  EXPECT_EQ(converted("  if (alloc_field(&a, 1024) || setup_b(&b)) { printf(\"no\\n\"); }\n"), 0);
}

// A helper given the communicator's address (`exchange(.., &comm, ..)` with `ncclComm_t* comm`,
// used as `*comm`) names main's `comm`: buffers sized by the rank after its creation are agreed
// (they stayed host NCCL: "`comm[0]` is not created before it on every path").
TEST(AnalyzerSyntaxForms, ACommunicatorGivenByAddressIsTheVariable) {
  const std::string src =
      "#include <nccl.h>\n"
      "static void exchange(const double* s, double* r, size_t blk, ncclComm_t* comm, int n, cudaStream_t st) {\n"
      "  ncclGroupStart();\n"
      "  for (int p = 0; p < n; p++) {\n"
      "    ncclSend(s + p * blk, blk, ncclDouble, p, *comm, st);\n"
      "    ncclRecv(r + p * blk, blk, ncclDouble, p, *comm, st);\n"
      "  }\n"
      "  ncclGroupEnd();\n"
      "}\n"
      "int main(int argc, char** argv) {\n"
      "  int rank, nranks; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &nranks);\n"
      "  ncclUniqueId id; ncclComm_t comm; cudaStream_t st;\n"
      "  ncclCommInitRank(&comm, nranks, id, rank);\n"
      "  size_t blk = 64 + rank;\n"
      "  double *sb, *rb;\n"
      "  cudaMalloc(&sb, blk * nranks * sizeof(double));\n"
      "  cudaMalloc(&rb, blk * nranks * sizeof(double));\n"
      "  exchange(sb, rb, blk, &comm, nranks, st);\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_NE(c.source.find("braid_converted::sym_malloc_agreed(&sb,"), std::string::npos) << c.source;
}

// An array of views (`tail[k] = d_field[k] + off`) given whole to a helper that only reads its
// elements (`ncclSend(send[k], ..)`) keeps the views' allocations; a helper that writes an element
// (`send[0] = other`) could point it anywhere.
TEST(AnalyzerSyntaxForms, AnArrayOfViewsGivenToAnElementReader) {
  const auto converted = [](const std::string& extra) {
    const std::string src =
        "#include <nccl.h>\n"
        "static void ring(float** send, float** recv, int nf, int n, int r, int s, ncclComm_t c, cudaStream_t st) {\n" +
        extra +
        "  ncclGroupStart();\n"
        "  for (int k = 0; k < nf; k++) {\n"
        "    ncclSend(send[k], n, ncclFloat, (r + 1) % s, c, st);\n"
        "    ncclRecv(recv[k], n, ncclFloat, (r - 1 + s) % s, c, st);\n"
        "  }\n"
        "  ncclGroupEnd();\n"
        "}\n"
        "int main(int argc, char** argv) {\n"
        "  int rank, size, k, n = 4096;\n"
        "  float *d_field[2], *d_halo[2], *tail[2];\n"
        "  ncclUniqueId id; ncclComm_t comm; cudaStream_t st;\n"
        "  ncclCommInitRank(&comm, size, id, rank);\n"
        "  for (k = 0; k < 2; k++) { cudaMalloc((void**)&d_field[k], n * 4); cudaMalloc((void**)&d_halo[k], 1024); }\n"
        "  for (k = 0; k < 2; k++) tail[k] = d_field[k] + (n - 256);\n"
        "  ring(tail, d_halo, 2, 256, rank, size, comm, st);\n"
        "}\n";
    return transform(analyze("user.cu", src), src).converted_calls;
  };
  EXPECT_EQ(converted(""), 2);
  EXPECT_EQ(converted("  float* other = nullptr; send[0] = other;\n"), 0);
}

// A work queue of another container kind (`std::queue`, `std::deque`'s push_front, emplace) built
// from its elements' fields in a member function that shares the container's member name (`push`):
// `q_.push({b, n})` is the library's push, so the caller's `w.push(bufs[i], n)` is the one call
// site of the class's push and the element's buffer is what it was given.
TEST(AnalyzerSyntaxForms, QueuesFilledInAMemberNamedLikeTheirFill) {
  for (const std::string& fill : {"q_.push({b, n})", "q_.emplace(b, n)", "q_.push(Task{b, n})"}) {
    const std::string src =
        "#include <nccl.h>\n#include <queue>\n#include <vector>\n"
        "struct Task { float* buf; size_t n; };\n"
        "class Worker {\n"
        " public:\n"
        "  void push(float* b, size_t n) { " +
        fill +
        "; }\n"
        "  void run(ncclComm_t c) {\n"
        "    while (!q_.empty()) { Task t = q_.front(); q_.pop(); ncclAllReduce(t.buf, t.buf, t.n, ncclFloat, "
        "ncclSum, c, 0); }\n"
        "  }\n"
        " private:\n"
        "  std::queue<Task> q_;\n"
        "};\n"
        "int main() {\n"
        "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
        "  std::vector<float*> bufs(4);\n"
        "  for (int i = 0; i < 4; ++i) cudaMalloc(&bufs[i], 4096);\n"
        "  Worker w;\n"
        "  for (int i = 0; i < 4; ++i) w.push(bufs[i], 1024);\n"
        "  w.run(comm);\n"
        "}\n";
    const Conversion c = transform(analyze("user.cu", src), src);
    EXPECT_EQ(c.converted_calls, 1) << fill;
  }
}

// `Worker tp_worker(tp), dp_worker(dp);` constructs twice: two background threads started from one
// place, each calling on the communicator it was given, stay host NCCL (one declarator converts),
// where before the second declarator went unseen and both threads' calls were converted as if only
// tp's existed. (Two threads started from two places convert:
// `Transform.TwoBackgroundThreadsEachOnItsOwnCommunicatorConvert`.)
TEST(AnalyzerSyntaxForms, EveryDeclaratorOfAClassIsAConstruction) {
  const auto convert = [](const std::string& workers) {
    const std::string src =
        "#include <nccl.h>\n#include <thread>\n"
        "class Worker {\n"
        " public:\n"
        "  Worker(ncclComm_t c, float* b) : comm_(c), buf_(b) { t_ = std::thread([this] { loop(); }); }\n"
        "  ~Worker() { t_.join(); }\n"
        " private:\n"
        "  void loop() { ncclAllReduce(buf_, buf_, 1024, ncclFloat, ncclSum, comm_, 0); }\n"
        "  ncclComm_t comm_;\n"
        "  float* buf_;\n"
        "  std::thread t_;\n"
        "};\n"
        "int main() {\n"
        "  ncclComm_t tp, dp; ncclCommInitRank(&tp, 2, id, 0); ncclCommInitRank(&dp, 2, id2, 0);\n"
        "  float *a, *g; cudaMalloc(&a, 4096); cudaMalloc(&g, 4096);\n"
        "  {\n"
        "    " +
        workers +
        "\n"
        "  }\n"
        "  cudaFree(a); cudaFree(g);\n"
        "}\n";
    return transform(analyze("user.cu", src), src);
  };
  EXPECT_EQ(convert("Worker tp_worker(tp, a);").converted_calls, 1);
  for (const std::string& two :
       {"Worker tp_worker(tp, a), dp_worker(dp, g);", "Worker tp_worker{tp, a}, dp_worker{dp, g};",
        "Worker tp_worker(tp, a);\n    Worker dp_worker(dp, g);"}) {
    const Conversion c = convert(two);
    EXPECT_EQ(c.converted_calls, 0) << two;
    bool told = false;
    for (const Unconverted& u : c.left)
      told = told || u.reason.find("more than one background thread") != std::string::npos;
    EXPECT_TRUE(told) << two;
  }
}

// A helper that allocates into a struct it takes by reference (`void setup(Stage& s)` called once
// as `setup(st)`) fills `st`'s fields, arrays of them included, as one given `&st` fills through
// `Stage* s` (before, `s.in` stayed the helper's own name and the calls on `st.in` were left).
TEST(AnalyzerSyntaxForms, StructsFilledThroughAReferenceParameter) {
  for (const std::string& param : {"Stage& s", "Stage& s, int /*unused*/ = 0"}) {
    const std::string src =
        "#include <nccl.h>\n"
        "struct Stage { float* in; float* out[2]; };\n"
        "static void setup(" +
        param +
        ", size_t n) { cudaMalloc(&s.in, n); for (int m = 0; m < 2; ++m) cudaMalloc(&s.out[m], n); }\n"
        "int main() {\n"
        "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
        "  Stage st; setup(st, 4096);\n"
        "  ncclAllReduce(st.in, st.in, 1024, ncclFloat, ncclSum, comm, 0);\n"
        "  for (int m = 0; m < 2; ++m) ncclAllReduce(st.out[m], st.out[m], 1024, ncclFloat, ncclSum, comm, 0);\n"
        "}\n";
    const Conversion c = transform(analyze("user.cu", src), src);
    EXPECT_EQ(c.converted_calls, 2) << param;
  }
}

// An arena class that allocates once and hands out views (`arena.take<half>(n)`, a member template
// given arguments) fills the pointers it is assigned to: a declared one, an array's elements
// assigned in a loop or through a range-for reference, and a `std::for_each` lambda's parameter is
// each element of its range. An array element written any other way is not followed.
TEST(AnalyzerSyntaxForms, ArenaViewsAssignedToElementsAndVisitedByForEach) {
  const auto convert = [](const std::string& fill, const std::string& visit) {
    const std::string src =
        "#include <nccl.h>\n#include <algorithm>\n#include <array>\n#include <cstdint>\n"
        "struct Arena {\n"
        "  uint8_t* base = nullptr;\n"
        "  size_t used = 0;\n"
        "  void init(size_t bytes) { cudaMalloc(reinterpret_cast<void**>(&base), bytes); }\n"
        "  template <typename T> T* take(size_t n) { T* p = reinterpret_cast<T*>(base + used); used += n * "
        "sizeof(T); return p; }\n"
        "};\n"
        "int main() {\n"
        "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, 0);\n"
        "  Arena arena;\n"
        "  arena.init(1 << 26);\n"
        "  std::array<float*, 3> grads{};\n"
        "  " +
        fill +
        "\n"
        "  float* loss = arena.take<float>(1);\n"
        "  " +
        visit +
        "\n"
        "  ncclAllReduce(loss, loss, 1, ncclFloat, ncclMax, comm, 0);\n"
        "}\n";
    return transform(analyze("user.cu", src), src).converted_calls;
  };
  const std::string loop = "for (int i = 0; i < 3; ++i) grads[i] = arena.take<float>(1 << 20);";
  const std::string each = "for (float* g : grads) ncclAllReduce(g, g, 1 << 20, ncclFloat, ncclSum, comm, 0);";
  EXPECT_EQ(convert(loop, each), 2);
  EXPECT_EQ(convert("for (auto& g : grads) g = arena.take<float>(1 << 20);", each), 2);
  EXPECT_EQ(convert(loop,
                    "std::for_each(grads.begin(), grads.end(), [&](float* g) { ncclAllReduce(g, g, 1 << 20, "
                    "ncclFloat, ncclSum, comm, 0); });"),
            2);
  // A helper given the whole array may write its elements: they are not followed.
  EXPECT_EQ(convert(loop + " reset(grads);", each), 1);
}

// A vector of a RAII tensor class that is a data member of a model (`std::vector<DistTensor<half>>
// grads;`), filled by the model's constructor over a shape list its one construction gives
// rank-free (`Model m({4096, 1 << 20})`) and only read elsewhere (`for (auto& g : m.grads)`): the
// tensors' allocations run alike on every rank. A fill outside a constructor, a use that may write
// the vector from outside, or shapes that depend on the rank keep them out of braid's sight.
TEST(AnalyzerSyntaxForms, MemberVectorsOfTensorsFilledByTheirHoldersConstructor) {
  const auto convert = [](const std::string& model_body, const std::string& construct, const std::string& use) {
    const std::string src =
        "#include <nccl.h>\n#include <cuda_fp16.h>\n#include <vector>\n"
        "template <typename T> class DistTensor {\n"
        " public:\n"
        "  explicit DistTensor(size_t n) : numel_(n) { cudaMalloc(&data_, n * sizeof(T)); }\n"
        "  ~DistTensor() { if (data_) cudaFree(data_); }\n"
        "  DistTensor(DistTensor&& o) noexcept : data_(o.data_), numel_(o.numel_) { o.data_ = nullptr; }\n"
        "  void all_reduce(ncclComm_t comm, cudaStream_t s) { ncclAllReduce(data_, data_, numel_, ncclHalf, "
        "ncclSum, comm, s); }\n"
        " private:\n"
        "  T* data_ = nullptr;\n"
        "  size_t numel_ = 0;\n"
        "};\n"
        "struct Model {\n"
        " public:\n"
        "  std::vector<DistTensor<half>> grads;\n" +
        model_body +
        "};\n"
        "int main(int argc, char** argv) {\n"
        "  int rank = atoi(argv[1]);\n"
        "  ncclComm_t comm; ncclCommInitRank(&comm, 2, id, rank);\n"
        "  cudaStream_t s; cudaStreamCreate(&s);\n"
        "  " +
        construct +
        "\n"
        "  " +
        use +
        "\n"
        "  for (auto& g : m.grads) g.all_reduce(comm, s);\n"
        "}\n";
    return transform(analyze("user.cu", src), src).converted_calls;
  };
  const std::string ctor =
      "  explicit Model(const std::vector<size_t>& shapes) {\n"
      "    grads.reserve(shapes.size());\n"
      "    for (size_t n : shapes) grads.emplace_back(n);\n"
      "  }\n";
  EXPECT_EQ(convert(ctor, "Model m({4096, 1 << 20, 1 << 16});", ""), 1);
  EXPECT_EQ(convert(ctor, "Model m({4096, 1 << 20, 1 << 16});", "size_t total = m.grads.size();"), 1);
  // The shapes depend on the rank.
  EXPECT_EQ(convert(ctor, "Model m({4096, size_t(rank + 1) << 20});", ""), 0);
  // Filled from outside the constructors, or written from outside.
  EXPECT_EQ(convert("  void add(size_t n) { grads.emplace_back(n); }\n", "Model m; if (rank == 0) m.add(8);", ""), 0);
  EXPECT_EQ(convert(ctor, "Model m({4096});", "m.grads.emplace_back(64);"), 0);
}

// Pipeline slots as vectors of an RAII buffer class declared together (`std::vector<DeviceBuffer>
// act_in, act_out;`), reserved, filled by emplace_back in a loop and emptied with clear(): every
// declarator's fills are constructions braid sees (reserve and clear construct nothing), so the
// buffers become symmetric and the stage-to-stage sends and receives convert.
TEST(AnalyzerSyntaxForms, VectorsOfBuffersDeclaredTogetherReservedAndCleared) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <vector>\n"
      "class DeviceBuffer {\n"
      " public:\n"
      "  explicit DeviceBuffer(size_t n) { cudaMalloc(&p_, n * sizeof(float)); }\n"
      "  ~DeviceBuffer() { if (p_) cudaFree(p_); }\n"
      "  float* data() const { return p_; }\n"
      " private:\n"
      "  float* p_ = nullptr;\n"
      "};\n"
      "int main() {\n"
      "  int rank = 0, world = 2; ncclUniqueId id; ncclComm_t comm; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, world, id, rank);\n"
      "  std::vector<DeviceBuffer> act_in, act_out;\n"
      "  act_in.reserve(2); act_out.reserve(2);\n"
      "  for (int k = 0; k < 2; ++k) { act_in.emplace_back(1024); act_out.emplace_back(1024); }\n"
      "  for (int m = 0; m < 8; ++m) {\n"
      "    if (rank > 0) ncclRecv(act_in[m % 2].data(), 1024, ncclFloat, rank - 1, comm, s);\n"
      "    if (rank < world - 1) ncclSend(act_out[m % 2].data(), 1024, ncclFloat, rank + 1, comm, s);\n"
      "  }\n"
      "  act_in.clear(); act_out.clear();\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_NE(c.source.find("braid_converted::sym_malloc(&p_, n * sizeof(float))"), std::string::npos) << c.source;
}

// Overloads of one member of different arity (`recv(float* buf, n, from)`, `recv(__half* buf, n)`):
// the parameter of each is followed to the calls of its own arity, so the fp16 receive's buffer is
// `act`, made symmetric, and not the fp32 overload's `stats` (a converted receive into a buffer that
// is no window stops the program).
TEST(AnalyzerSyntaxForms, OverloadsOfDifferentArityFollowTheirOwnCalls) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <cuda_fp16.h>\n"
      "struct Channel {\n"
      "  ncclComm_t comm; cudaStream_t s; int peer;\n"
      "  void recv(float* buf, size_t n, int from) { ncclRecv(buf, n, ncclFloat, from, comm, s); }\n"
      "  void recv(__half* buf, size_t n) { ncclRecv(buf, n, ncclHalf, peer, comm, s); }\n"
      "  void send(const float* buf, size_t n, int to) { ncclSend(buf, n, ncclFloat, to, comm, s); }\n"
      "  void send(const __half* buf, size_t n) { ncclSend(buf, n, ncclHalf, peer, comm, s); }\n"
      "};\n"
      "int main() {\n"
      "  int rank = 0; ncclUniqueId id; Channel ch; ncclCommInitRank(&ch.comm, 2, id, rank); ch.peer = rank ^ 1;\n"
      "  float* stats; __half* act;\n"
      "  cudaMalloc(&stats, 256 * sizeof(float));\n"
      "  cudaMalloc(&act, 4096 * sizeof(__half));\n"
      "  if (rank % 2 == 0) { ch.send(stats, 256, ch.peer); ch.send(act, 4096); }\n"
      "  else { ch.recv(stats, 256, ch.peer); ch.recv(act, 4096); }\n"
      "}\n";
  const Conversion c = transform(analyze("user.cu", src), src);
  EXPECT_NE(c.source.find("braid_converted::sym_malloc(&act, 4096 * sizeof(__half))"), std::string::npos) << c.source;
  EXPECT_NE(c.source.find("braid_converted::sym_malloc(&stats, 256 * sizeof(float))"), std::string::npos) << c.source;
}
