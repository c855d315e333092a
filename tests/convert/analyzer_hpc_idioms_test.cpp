// The analyzer and the rules on idioms of HPC programs (MPI plus NCCL, C-style code): arrays of
// structs handed to helpers by element pointer, per-stream buffers in malloc'd pointer arrays.
#include <gtest/gtest.h>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/transform.hpp"

#include "analyzer_test_util.hpp"

using namespace braid::convert;
using namespace braid::convert::test;

namespace {

const std::string kPrologue =
    "#include <nccl.h>\n"
    "#include <cuda_runtime.h>\n"
    "struct field { float* d; float* slice; size_t n; };\n"
    "struct field fields[4];\n"
    "ncclComm_t comm;\n"
    "cudaStream_t s;\n";

}  // namespace

// A pointer to one element of an array of structs (`&fields[f]`, `fields + f`), given to a helper
// or bound to a local, is that element: `fl->d` is `fields[].d`, the field allocated in the loop
// (before, `fields.d`, no allocation: host NCCL).
TEST(AnalyzerHpcIdioms, AnElementPointerOfAnArrayOfStructsNamesTheElementsField) {
  for (const std::string arg : {"&fields[f]", "fields + f"}) {
    const std::string src = kPrologue +
                            "int sum(struct field* fl) {\n"
                            "  return (int)ncclAllReduce(fl->d, fl->d, fl->n, ncclFloat, ncclSum, comm, s);\n"
                            "}\n"
                            "int main() {\n"
                            "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                            "  for (int f = 0; f < 4; f++) cudaMalloc((void**)&fields[f].d, 4096);\n"
                            "  for (int f = 0; f < 4; f++) sum(" +
                            arg +
                            ");\n"
                            "  for (int f = 0; f < 4; f++) { struct field* fl = " +
                            arg +
                            "; ncclBroadcast(fl->d, fl->d, 1024, ncclFloat, 0, comm, s); }\n"
                            "}\n";
    const Analysis a = analyze("hpc.cu", src);
    for (const char* name : {"ncclAllReduce", "ncclBroadcast"}) {
      const Call& c = first_call(a, name);
      EXPECT_EQ(c.unresolved, "") << arg << ": " << name;
      EXPECT_EQ(c.buffers, (std::vector<std::string>{"fields[].d"})) << arg << ": " << name;
    }
    EXPECT_EQ(transform(a, src).converted_calls, 2) << arg;
  }
}

// One converted call site synchronises through one set of barriers, so two of its launches must
// never run at once: a site launched on `streams[s]` in a loop over streams, or in a helper given
// different streams, stays host NCCL with the reason (before, it converted: concurrent launches on
// one rank shared the site's barriers). A helper always given one stream converts.
TEST(AnalyzerHpcIdioms, ACallSiteOnSeveralStreamsStaysHost) {
  const std::string loop =
      kPrologue +
      "cudaStream_t streams[4];\n"
      "double* mean[4];\n"
      "int main() {\n"
      "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  for (int k = 0; k < 4; k++) { cudaStreamCreate(&streams[k]); cudaMalloc(&mean[k], 8192); }\n"
      "  for (int k = 0; k < 4; k++)\n"
      "    ncclAllReduce(mean[k], mean[k], 1024, ncclDouble, ncclSum, comm, streams[k]);\n"
      "  ncclAllReduce(mean[0], mean[0], 1024, ncclDouble, ncclSum, comm, streams[0]);\n"
      "}\n";
  const Analysis a = analyze("hpc.cu", loop);
  EXPECT_TRUE(contains(a.calls[a.nccl_collectives()[0]].unresolved, "`streams[k]` is an element of `streams[]`"))
      << a.calls[a.nccl_collectives()[0]].unresolved;
  EXPECT_EQ(a.calls[a.nccl_collectives()[1]].unresolved, "");  // one stream: streams[0]
  EXPECT_EQ(transform(a, loop).converted_calls, 1);

  const auto helper = [](const std::string& second) {
    return kPrologue +
           "cudaStream_t s_main, s_aux;\n"
           "void sum(float* x, cudaStream_t st) { ncclAllReduce(x, x, 1024, ncclFloat, ncclSum, comm, st); }\n"
           "int main() {\n"
           "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  float *a, *b; cudaMalloc(&a, 4096); cudaMalloc(&b, 4096);\n"
           "  sum(a, s_main);\n"
           "  sum(b, " +
           second +
           ");\n"
           "}\n";
  };
  const Analysis two = analyze("hpc.cu", helper("s_aux"));
  EXPECT_TRUE(contains(first_call(two, "ncclAllReduce").unresolved, "is any of `s_aux`, `s_main`"))
      << first_call(two, "ncclAllReduce").unresolved;
  EXPECT_EQ(transform(two, helper("s_aux")).converted_calls, 0);
  // The default stream (`0`, `nullptr`) at one call, a created stream at the other.
  for (const char* null_stream : {"0", "nullptr"}) {
    const Analysis dflt = analyze("hpc.cu", helper(null_stream));
    EXPECT_TRUE(contains(first_call(dflt, "ncclAllReduce").unresolved, "the default stream at one call and `s_main`"))
        << first_call(dflt, "ncclAllReduce").unresolved;
  }
  const Analysis one = analyze("hpc.cu", helper("s_main"));
  EXPECT_EQ(first_call(one, "ncclAllReduce").unresolved, "");
  EXPECT_EQ(transform(one, helper("s_main")).converted_calls, 1);
}

// Pipeline helpers given the forward stream for activations and the backward stream for gradients:
// a send or receive site has no barrier shared between launches (its messages meet by per-pair
// order, its plan is kept per stream by the runtime), so one whose every launch runs on one stream
// converts, grouped in its helper or not. A group that gathers members through calls given
// different streams mixes streams in one launch (before, the members' parameter texts agreed and it
// converted, to stop at run time): it stays host NCCL with the reason.
TEST(AnalyzerHpcIdioms, SendRecvHelpersGivenEitherOfTwoStreamsConvert) {
  const std::string helpers =
      kPrologue +
      "cudaStream_t fwd, bwd;\n"
      "void send_t(const float* b, int peer, cudaStream_t st) { ncclGroupStart(); ncclSend(b, 1024, ncclFloat, peer, "
      "comm, st); "
      "ncclGroupEnd(); }\n"
      "void recv_t(float* b, int peer, cudaStream_t st) { ncclRecv(b, 1024, ncclFloat, peer, comm, st); }\n"
      "int main() {\n"
      "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  float *act, *grad; cudaMalloc(&act, 4096); cudaMalloc(&grad, 4096);\n"
      "  recv_t(act, 0, fwd); send_t(act, 1, fwd);\n"
      "  recv_t(grad, 1, bwd); send_t(grad, 0, bwd);\n"
      "}\n";
  const Analysis a = analyze("pp.cu", helpers);
  EXPECT_EQ(first_call(a, "ncclSend").unresolved, "");
  EXPECT_EQ(first_call(a, "ncclRecv").unresolved, "");
  EXPECT_EQ(transform(a, helpers).converted_calls, 2);

  const std::string mixed =
      kPrologue +
      "cudaStream_t fwd, bwd;\n"
      "void send_t(const float* b, int peer, cudaStream_t st) { ncclSend(b, 1024, ncclFloat, peer, comm, st); }\n"
      "void recv_t(float* b, int peer, cudaStream_t st) { ncclRecv(b, 1024, ncclFloat, peer, comm, st); }\n"
      "int main() {\n"
      "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  float *act, *grad; cudaMalloc(&act, 4096); cudaMalloc(&grad, 4096);\n"
      "  ncclGroupStart(); send_t(act, 1, fwd); recv_t(grad, 1, bwd); ncclGroupEnd();\n"
      "}\n";
  const Analysis m = analyze("pp.cu", mixed);
  EXPECT_TRUE(
      contains(first_call(m, "ncclSend").unresolved, "different streams (its members' streams are `bwd`, `fwd`)"))
      << first_call(m, "ncclSend").unresolved;
  EXPECT_EQ(transform(m, mixed).converted_calls, 0);
  // The same group with both helpers given one stream converts.
  std::string same = mixed;
  same.replace(same.find("grad, 1, bwd"), 12, "grad, 1, fwd");
  EXPECT_EQ(transform(analyze("pp.cu", same), same).converted_calls, 2);
}

// nccl-tests' per-GPU pairs (`comms[i]` with `streams[i]`): the stream is chosen with the
// communicator, each communicator's binding keeps its launches on one stream: converted.
TEST(AnalyzerHpcIdioms, AStreamChosenWithItsCommunicatorConverts) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <cuda_runtime.h>\n"
      "ncclComm_t comms[1]; cudaStream_t streams[1]; float* bufs[1];\n"
      "int main() {\n"
      "  ncclUniqueId id; int n = 1;\n"
      "  for (int i = 0; i < n; i++) { cudaMalloc(&bufs[i], 4096); cudaStreamCreate(&streams[i]); }\n"
      "  ncclCommInitRank(&comms[0], 2, id, 0);\n"
      "  for (int i = 0; i < n; i++) ncclAllReduce(bufs[i], bufs[i], 1024, ncclFloat, ncclSum, comms[i], streams[i]);\n"
      "}\n";
  const Analysis a = analyze("hpc.cu", src);
  EXPECT_EQ(first_call(a, "ncclAllReduce").unresolved, "");
  EXPECT_EQ(transform(a, src).converted_calls, 1);
}

// A solver's double buffer exchanged by pointer (`std::swap(a, a_new)`, or through a temporary):
// after the first trip `a_new` names `a`'s allocation, so a halo received into `a_new` needs both
// as windows. Before, only `a_new` became symmetric and the second trip's receive was outside the
// windows (the converted program stopped where the original ran).
TEST(AnalyzerHpcIdioms, PointersExchangedByTheFileAreEitherAllocation) {
  for (const std::string exchange : {"std::swap(a_new, a);", "{ float* tmp = a; a = a_new; a_new = tmp; }",
                                     "{ float* tmp; tmp = a; a = a_new; a_new = tmp; }"}) {
    const std::string src = kPrologue +
                            "int main() {\n"
                            "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                            "  float *a, *a_new, *spare;\n"
                            "  cudaMalloc(&a, 4096); cudaMalloc(&a_new, 4096); cudaMalloc(&spare, 4096);\n"
                            "  for (int it = 0; it < 10; it++) {\n"
                            "    ncclGroupStart();\n"
                            "    ncclRecv(a_new, 256, ncclFloat, 1, comm, s);\n"
                            "    ncclSend(a_new + 256, 256, ncclFloat, 1, comm, s);\n"
                            "    ncclGroupEnd();\n"
                            "    " +
                            exchange +
                            "\n"
                            "  }\n"
                            "}\n";
    const Analysis a = analyze("hpc.cu", src);
    EXPECT_EQ(first_call(a, "ncclRecv").buffers, (std::vector<std::string>{"a_new", "a"})) << exchange;
    const Conversion c = transform(a, src);
    EXPECT_EQ(c.converted_calls, 2) << exchange;
    EXPECT_TRUE(contains(
        c.source,
        "braid_converted::sym_malloc(&a, 4096); braid_converted::sym_malloc(&a_new, 4096); cudaMalloc(&spare, 4096);"))
        << exchange << "\n"
        << c.source;
  }
}

// A pointer to an array's first element, walked in C style (`for (fl = fields; fl < fields + 4;
// fl++)`) or an array given whole to a helper taking `struct field*`: `fl->d` is an element's field
// (`fields[].d`; before, `fields.d`, no allocation: host NCCL).
TEST(AnalyzerHpcIdioms, AnArrayWalkedByPointerOrPassedWholeIsItsElements) {
  const std::string src = kPrologue +
                          "void first(struct field* fl) { ncclBroadcast(fl->d, fl->d, 1024, ncclFloat, 0, comm, s); }\n"
                          "int main() {\n"
                          "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  for (int f = 0; f < 4; f++) cudaMalloc((void**)&fields[f].d, 4096);\n"
                          "  for (struct field* fl = fields; fl < fields + 4; fl++)\n"
                          "    ncclAllReduce(fl->d, fl->d, fl->n, ncclFloat, ncclSum, comm, s);\n"
                          "  first(fields);\n"
                          "}\n";
  const Analysis a = analyze("hpc.cu", src);
  for (const char* name : {"ncclAllReduce", "ncclBroadcast"}) {
    const Call& c = first_call(a, name);
    EXPECT_EQ(c.unresolved, "") << name;
    EXPECT_EQ(c.buffers, (std::vector<std::string>{"fields[].d"})) << name;
  }
  EXPECT_EQ(transform(a, src).converted_calls, 2);
}

// Pointers carved from one allocation by assignment (`d_x = d_pool; d_r = d_pool + n;`, file
// globals set in a setup function): each is that allocation (before: no allocation of its own,
// host NCCL). One also given a value braid cannot follow keeps the reason and stays host.
TEST(AnalyzerHpcIdioms, PointersAssignedIntoAPoolAreThePool) {
  const auto program = [](const std::string& extra) {
    return kPrologue +
           "double *d_pool, *d_x, *d_dot;\n"
           "double* external_buffer();\n"
           "static int setup(size_t n) {\n"
           "  if (cudaMalloc((void**)&d_pool, 3 * n * sizeof(double)) != cudaSuccess) return 1;\n"
           "  d_x = d_pool;\n"
           "  d_dot = d_pool + 2 * n;\n" +
           extra +
           "  return 0;\n"
           "}\n"
           "int main() {\n"
           "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
           "  setup(1024);\n"
           "  ncclAllReduce(d_dot, d_dot, 1, ncclDouble, ncclSum, comm, s);\n"
           "  cudaFree(d_pool);\n"
           "}\n";
  };
  const std::string src = program("");
  const Analysis a = analyze("hpc.cu", src);
  EXPECT_EQ(first_call(a, "ncclAllReduce").unresolved, "");
  EXPECT_EQ(first_call(a, "ncclAllReduce").buffers, (std::vector<std::string>{"d_pool"}));
  EXPECT_EQ(transform(a, src).converted_calls, 1);
  const Analysis other = analyze("hpc.cu", program("  if (n > 4096) d_dot = external_buffer();\n"));
  EXPECT_TRUE(contains(first_call(other, "ncclAllReduce").unresolved, "external_buffer"))
      << first_call(other, "ncclAllReduce").unresolved;
}

// Buffers are followed by name, but a local of another function with the same name is another
// variable: a solver's halo exchange on main's `a`/`a_new` (swapped every step, sized by the
// rank's share of rows) is not tied to the single-GPU reference's own `a`/`a_new` (allocated on
// rank 0 only, swapped there too), so it converts and the reference's memory stays cudaMalloc. A
// local that reaches the call through an argument is still followed to its function.
TEST(AnalyzerHpcIdioms, SameNamedLocalsOfAnotherFunctionAreOtherBuffers) {
  const std::string src = kPrologue +
                          "#include <utility>\n"
                          "void reference(int n) {\n"
                          "  float *a, *a_new;\n"
                          "  cudaMalloc(&a, n * 4); cudaMalloc(&a_new, n * 4);\n"
                          "  for (int i = 0; i < 3; ++i) std::swap(a, a_new);\n"
                          "  cudaFree(a); cudaFree(a_new);\n"
                          "}\n"
                          "void reduce(float* g, size_t n) { ncclAllReduce(g, g, n, ncclFloat, ncclSum, comm, s); }\n"
                          "void grads() { float* g; cudaMalloc(&g, 4096); reduce(g, 1024); }\n"
                          "int main() {\n"
                          "  int rank = 0, size = 2; ncclUniqueId id; ncclCommInitRank(&comm, size, id, rank);\n"
                          "  const int rows = rank < 1 ? 100 : 101;\n"
                          "  float *a, *a_new;\n"
                          "  cudaMalloc(&a, (rows + 2) * 256 * 4); cudaMalloc(&a_new, (rows + 2) * 256 * 4);\n"
                          "  for (int i = 0; i < 3; ++i) {\n"
                          "    ncclGroupStart();\n"
                          "    ncclRecv(a, 256, ncclFloat, (rank + 1) % size, comm, s);\n"
                          "    ncclSend(a + 256, 256, ncclFloat, (rank + 1) % size, comm, s);\n"
                          "    ncclGroupEnd();\n"
                          "    std::swap(a, a_new);\n"
                          "  }\n"
                          "  grads();\n"
                          "  if (rank == 0) reference(1 << 20);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 3) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "  cudaMalloc(&a, n * 4); cudaMalloc(&a_new, n * 4);")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc_agreed(&a, (rows + 2) * 256 * 4)")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&g, 4096)")) << c.source;
}

// Allocations some ranks skip must stay as written (a window registration is collective): a
// `continue` under a condition on the rank skips the rest of the loop body on those ranks, and
// the neighbours and coordinates of a Cartesian topology (MPI_Cart_shift, MPI_Cart_coords) differ
// per rank: a halo buffer made only where a west neighbour exists stays cudaMalloc, and a size
// computed from the coordinates is agreed (the largest any rank asks for). A `continue` on a
// condition every rank evaluates alike skips nothing on some ranks only.
TEST(AnalyzerHpcIdioms, SkippedAllocationsAndCartesianNeighboursDependOnTheRank) {
  const auto loop = [](const std::string& skip) {
    return kPrologue +
           "int main() {\n"
           "  int rank = 0; MPI_Comm_rank(MPI_COMM_WORLD, &rank);\n"
           "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, rank);\n"
           "  float* recvbuf[4];\n"
           "  for (int i = 0; i < 4; ++i) {\n" +
           skip +
           "    cudaMalloc(&recvbuf[i], 4096);\n"
           "  }\n"
           "  for (int i = 1; i < 4; ++i) ncclAllReduce(recvbuf[i], recvbuf[i], 1024, ncclFloat, ncclSum, comm, s);\n"
           "}\n";
  };
  for (const std::string skip : {"    if (rank == 0) continue;\n", "    if (rank == 0) { continue; }\n"}) {
    const Conversion c = convert_text(loop(skip));
    EXPECT_EQ(c.converted_calls, 0) << skip << conversion_to_text(c);
    EXPECT_TRUE(told(c, "under a condition")) << skip << conversion_to_text(c);
  }
  EXPECT_EQ(convert_text(loop("    if (i == 0) continue;\n")).converted_calls, 1);

  const std::string cart =
      kPrologue +
      "int main() {\n"
      "  int size, me, dims[2] = {0, 0}, periods[2] = {0, 0}, coords[2], west, east; MPI_Comm cart;\n"
      "  MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);\n"
      "  MPI_Comm_rank(cart, &me); MPI_Comm_size(cart, &size);\n"
      "  MPI_Cart_coords(cart, me, 2, coords);\n"
      "  MPI_Cart_shift(cart, 0, 1, &west, &east);\n"
      "  const int ny = 1000 / dims[1] + (coords[1] < 1000 % dims[1] ? 1 : 0);\n"
      "  ncclUniqueId id; ncclCommInitRank(&comm, size, id, me);\n"
      "  float *halo_w = nullptr, *halo_e = nullptr;\n"
      "  if (west != MPI_PROC_NULL) cudaMalloc(&halo_w, ny * sizeof(float));\n"
      "  cudaMalloc(&halo_e, ny * sizeof(float));\n"
      "  ncclAllReduce(halo_w, halo_w, 4, ncclFloat, ncclSum, comm, s);\n"
      "  ncclAllReduce(halo_e, halo_e, 4, ncclFloat, ncclSum, comm, s);\n"
      "}\n";
  const Conversion c = convert_text(cart);
  EXPECT_EQ(c.converted_calls, 1) << conversion_to_text(c);
  EXPECT_TRUE(told(c, "buffer `halo_w` is allocated under a condition")) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc_agreed(&halo_e, ny * sizeof(float))")) << c.source;
}

// What some ranks do differently before an allocation makes it rank-dependent, and so not a window
// (window registration is collective): a role split that returns (`if (color == NCCL_SPLIT_NOCOLOR)
// { ...; return 0; }`), a loop whose trip count depends on the rank (directly, or a constructor run
// in one), a size from ncclCommCount of an uneven split (agreed across ranks). An error exit that
// returns (`return 1;`) is the program's failure path, not a role.
TEST(AnalyzerHpcIdioms, RolesThatReturnAndRankDependentTripCountsAreConditional) {
  const std::string head =
      "#include <nccl.h>\n"
      "#include <mpi.h>\n"
      "struct Tensor { float* p; explicit Tensor(size_t n) { cudaMalloc(&p, n * 4); } };\n"
      "int main(int argc, char** argv) {\n"
      "  int rank, world; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &world);\n"
      "  ncclUniqueId id; ncclComm_t comm, sub = NULL; cudaStream_t s;\n"
      "  ncclCommInitRank(&comm, world, id, rank);\n"
      "  if (argc > 5) { printf(\"usage\\n\"); return 1; }\n"
      "  float* y; cudaMalloc(&y, 4096);\n"
      "  ncclAllReduce(y, y, 1024, ncclFloat, ncclSum, comm, s);\n";
  const std::string role = head +
                           "  const int color = rank == 0 ? NCCL_SPLIT_NOCOLOR : 1;\n"
                           "  ncclCommSplit(comm, color, rank, &sub, NULL);\n"
                           "  if (color == NCCL_SPLIT_NOCOLOR) { MPI_Finalize(); return 0; }\n"
                           "  float* x; cudaMalloc(&x, 4096);\n"
                           "  ncclAllReduce(x, x, 1024, ncclFloat, ncclSum, sub, s);\n"
                           "}\n";
  const Conversion r = convert_text(role);
  EXPECT_EQ(r.converted_calls, 1) << conversion_to_text(r);  // y: after the error exit, on every rank
  EXPECT_TRUE(told(r, "buffer `x` is allocated under a condition (line 14)")) << left_text(r);
  std::string unbraced = role;
  unbraced.replace(unbraced.find("{ MPI_Finalize(); return 0; }"), 29, "return 0;");
  EXPECT_TRUE(told(convert_text(unbraced), "buffer `x` is allocated under a condition"));
  const std::string trip = head +
                           "  const int nblk = 1 + rank % 3;\n"
                           "  float* blk[4];\n"
                           "  for (int b = 0; b < nblk; ++b) cudaMalloc(&blk[b], 4096);\n"
                           "  for (int b = 0; b < world - rank; ++b) { Tensor t(256); }\n"
                           "  Tensor x(1024);\n"
                           "  ncclAllReduce(blk[0], blk[0], 1024, ncclFloat, ncclSum, comm, s);\n"
                           "  ncclAllReduce(x.p, x.p, 1024, ncclFloat, ncclSum, comm, s);\n"
                           "}\n";
  const Conversion t = convert_text(trip);
  EXPECT_EQ(t.converted_calls, 1) << conversion_to_text(t);
  EXPECT_TRUE(told(t, "buffer `blk[]` is allocated (line 13) in a loop whose trip count depends on the rank (line 13)"))
      << left_text(t);
  EXPECT_TRUE(told(t, "buffer `p` is allocated (line 3) in a loop whose trip count depends on the rank (line 14)"))
      << left_text(t);
  const std::string count = head +
                            "  ncclCommSplit(comm, rank == 0 ? 0 : 1, rank, &sub, NULL);\n"
                            "  int gsize; ncclCommCount(sub, &gsize);\n"
                            "  float* all; cudaMalloc(&all, 256 * gsize * sizeof(float));\n"
                            "  ncclAllGather(y, all, 256, ncclFloat, sub, s);\n"
                            "}\n";
  const Conversion c = convert_text(count);
  EXPECT_EQ(c.converted_calls, 2) << conversion_to_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc_agreed(&all, 256 * gsize * sizeof(float))")) << c.source;
}

// A C allocation helper that allocates into a local and hands it out through its pointer-to-pointer
// parameter on success (`void* p; if (cudaMalloc(&p, ..) != cudaSuccess) return -1; *out = (float*)p;`):
// the caller's variable is that local's allocation.
TEST(AnalyzerHpcIdioms, AnAllocationHandedOutThroughAnOutParameter) {
  const std::string src = kPrologue +
                          "static int dmalloc_f(float** out, size_t n) {\n"
                          "  void* p;\n"
                          "  if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) return -1;\n"
                          "  *out = (float*)p;\n"
                          "  return 0;\n"
                          "}\n"
                          "int main() {\n"
                          "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  float* x; dmalloc_f(&x, 1024);\n"
                          "  ncclAllReduce(x, x, 1024, ncclFloat, ncclSum, comm, s);\n"
                          "}\n";
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 1) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&p, n * sizeof(float))")) << c.source;
}

// C idioms of element pointers and named constants: a stream indexed by an enumerator or a `const
// int` (`P.st[FWD]`) is one element, as `P.st[0]` is; a field allocated through an element pointer
// (`halo_t* h = &H[d]; dmalloc(&h->send, n)`, `halo_t* h = H + d; cudaMalloc(&h->recv, ..)`) is
// that element's field.
TEST(AnalyzerHpcIdioms, ConstantIndicesAndFieldsAllocatedThroughElementPointers) {
  const std::string src =
      "#include <nccl.h>\n"
      "#include <cuda_runtime.h>\n"
      "enum { FWD = 0, BWD, NDIR };\n"
      "const int kMain = 1;\n"
      "typedef struct { float *send, *recv; } halo_t;\n"
      "typedef struct { cudaStream_t st[NDIR]; halo_t h[2]; } pipe_t;\n"
      "static int dmalloc_f(float** out, size_t n) { return cudaMalloc((void**)out, n * sizeof(float)) == cudaSuccess "
      "? 0 : -1; }\n"
      "int main() {\n"
      "  ncclComm_t comm; ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
      "  pipe_t P;\n"
      "  for (int d = 0; d < NDIR; d++) cudaStreamCreate(&P.st[d]);\n"
      "  for (int d = 0; d < 2; d++) {\n"
      "    halo_t* h = &P.h[d]; dmalloc_f(&h->send, 1024);\n"
      "    halo_t* g = P.h + d; cudaMalloc(&g->recv, 4096);\n"
      "  }\n"
      "  ncclAllReduce(P.h[0].send, P.h[1].send, 1024, ncclFloat, ncclSum, comm, P.st[FWD]);\n"
      "  ncclAllReduce(P.h[0].recv, P.h[0].recv, 1024, ncclFloat, ncclSum, comm, P.st[kMain]);\n"
      "}\n";
  const Analysis a = analyze("user.cu", src);
  EXPECT_EQ(a.constants.at("BWD"), 1);
  EXPECT_EQ(a.constants.at("NDIR"), 2);
  const Conversion c = transform(a, src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc(&g->recv, 4096)")) << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc((void**)out, n * sizeof(float))")) << c.source;
}

// A pitched 2-D grid (`cudaMallocPitch(&grid, &pitch, nx * sizeof(float), ny + 2)`), its halo rows
// sent at `grid + ld * row`: the grid moves to symmetric memory with the pitch the device's own
// cudaMallocPitch gives (the rows lie as before), pitch x height bytes (before: no allocation
// braid knew, every call host NCCL).
TEST(AnalyzerHpcIdioms, APitchedGridsHaloRowsConvert) {
  const std::string src = kPrologue +
                          "int main() {\n"
                          "  ncclUniqueId id; ncclCommInitRank(&comm, 2, id, 0);\n"
                          "  float* grid; size_t pitch; const int nx = 256, ny = 64;\n"
                          "  cudaMallocPitch(&grid, &pitch, nx * sizeof(float), ny + 2);\n"
                          "  const size_t ld = pitch / sizeof(float);\n"
                          "  ncclGroupStart();\n"
                          "  ncclSend(grid + ld, nx, ncclFloat, 1, comm, s);\n"
                          "  ncclRecv(grid + ld * (ny + 1), nx, ncclFloat, 1, comm, s);\n"
                          "  ncclGroupEnd();\n"
                          "  cudaFree(grid);\n"
                          "}\n";
  const Analysis a = analyze("user.cu", src);
  ASSERT_EQ(a.buffers.count("grid"), 1u);
  EXPECT_EQ(a.buffers.at("grid").allocator, "cudaMallocPitch");
  EXPECT_EQ(a.buffers.at("grid").bytes_expr, "pitch * (ny + 2)");
  const Conversion c = convert_text(src);
  EXPECT_EQ(c.converted_calls, 2) << left_text(c);
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_malloc_pitch(&grid, &pitch, nx * sizeof(float), ny + 2)"))
      << c.source;
  EXPECT_TRUE(contains(c.source, "braid_converted::sym_free(grid)"));
}
