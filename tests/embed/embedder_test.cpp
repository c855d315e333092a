#include "braid/embed/embedder.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "braid/util/error.hpp"

namespace braid {
namespace {

// A small annotated program in the shape of a workload's gen0.cu.
std::string pipeline_program(int chunks = 4, const std::string& strategy = "Strategy::Pipelined") {
  return R"cu(#include <cuda_runtime.h>
#include "braid/harness.cuh"

// EVOLVE-BLOCK-START pipeline
enum class Strategy { Serial, Pipelined };
constexpr int kChunks = )cu" +
         std::to_string(chunks) + R"cu(;  // braid:knob 1|2|4|8|16
constexpr Strategy kStrategy = )cu" +
         strategy + R"cu(;  // braid:knob Strategy::Serial|Strategy::Pipelined
constexpr int kCommCtas = 8;  // braid:knob 4|8|16

__global__ void gather_chunk(const float* __restrict__ src, float* dst, size_t n, int chunk) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  size_t per_chunk = n / kChunks;
  if (i < per_chunk) dst[chunk * per_chunk + i] = src[chunk * per_chunk + i] * 1.0f;
}

void run(Context& ctx, cudaStream_t stream) {
  /* Overlap the all-gather of chunk c+1 with the GEMM of chunk c. */
  for (int c = 0; c < kChunks; ++c) {
    if constexpr (kStrategy == Strategy::Pipelined) {
      ctx.lsa_allgather(ctx.input(c), ctx.window(c), stream, kCommCtas);
      ctx.gemm(ctx.window(c), ctx.weights(), ctx.output(c), ctx.compute_stream());
    } else {
      ctx.lsa_allgather(ctx.input(c), ctx.window(c), stream, kCommCtas);
      cudaStreamSynchronize(stream);
      ctx.gemm(ctx.window(c), ctx.weights(), ctx.output(c), stream);
    }
  }
  ctx.barrier(stream);
}
// EVOLVE-BLOCK-END
)cu";
}

// An unrelated program: a host-side reduction with different identifiers and structure.
std::string reduction_program() {
  return R"cc(#include <vector>
#include <numeric>

template <typename T>
T tree_reduce(std::vector<T>& values) {
  while (values.size() > 1) {
    std::vector<T> next((values.size() + 1) / 2);
    for (size_t k = 0; k + 1 < values.size(); k += 2) next[k / 2] = values[k] + values[k + 1];
    if (values.size() % 2) next.back() = values.back();
    values.swap(next);
  }
  return values.empty() ? T{} : values.front();
}

int main(int argc, char** argv) {
  std::vector<double> samples(argc * 1000);
  std::iota(samples.begin(), samples.end(), 0.5);
  double total = tree_reduce(samples);
  return total > 1e9 ? 1 : 0;
}
)cc";
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

TEST(HashedNgramEmbedderTest, UnitLengthWithRequestedDims) {
  for (int dims : {64, 512, 1000}) {
    auto embedder = make_hashed_ngram_embedder(dims);
    auto v = embedder->embed(pipeline_program());
    ASSERT_EQ(v.size(), static_cast<std::size_t>(dims));
    EXPECT_NEAR(norm(v), 1.0, 1e-5);
    EXPECT_EQ(embedder->name(), "hashed-ngram-" + std::to_string(dims));
  }
  EXPECT_THROW(make_hashed_ngram_embedder(0), UserError);
}

TEST(HashedNgramEmbedderTest, IdenticalCodeHasCosineOne) {
  auto a = make_hashed_ngram_embedder(512);
  auto b = make_hashed_ngram_embedder(512);  // deterministic across instances and runs
  auto va = a->embed(pipeline_program());
  auto vb = b->embed(pipeline_program());
  EXPECT_EQ(va, vb);
  EXPECT_NEAR(cosine(va, vb), 1.0f, 1e-6);
}

TEST(HashedNgramEmbedderTest, CommentsAndWhitespaceAreIgnored) {
  auto embedder = make_hashed_ngram_embedder(512);
  std::string code = "int f(int x) { return x << 2; }";
  std::string reformatted =
      "/* header\n comment */ int   f( int x )\n{\n\treturn x<<2;  // shift\n}\n// trailing";
  EXPECT_EQ(embedder->embed(code), embedder->embed(reformatted));
  // Operators lex as whole tokens: "<<" is not "<" "<".
  EXPECT_NE(embedder->embed("x << 2"), embedder->embed("x < < 2"));
  EXPECT_NE(embedder->embed("a <<= b"), embedder->embed("a << = b"));
}

TEST(HashedNgramEmbedderTest, LiteralsAreTokensNotComments) {
  auto embedder = make_hashed_ngram_embedder(512);
  // Comment markers inside literals are text, so the literal's content matters.
  EXPECT_NE(embedder->embed(R"(s = "a // b";)"), embedder->embed(R"(s = "a ";)"));
  EXPECT_NE(embedder->embed(R"(s = "/* x */";)"), embedder->embed(R"(s = "";)"));
  EXPECT_NE(embedder->embed(R"x(s = R"(// raw)";)x"), embedder->embed(R"x(s = R"()";)x"));
  EXPECT_NE(embedder->embed("c = '\\'';"), embedder->embed("c = 'x';"));
  // Numbers are whole tokens, exponents included.
  EXPECT_NE(embedder->embed("x = 1e-5;"), embedder->embed("x = 1e+5;"));
  EXPECT_NE(embedder->embed("x = 0x1F;"), embedder->embed("x = 0x1E;"));
  // Non-ASCII text is kept.
  EXPECT_NE(embedder->embed("auto s = \"größe\";"), embedder->embed("auto s = \"grosse\";"));
  // An unterminated comment or literal ends at the end of the text without reading past it.
  EXPECT_NEAR(norm(embedder->embed("int x; /* open")), 1.0, 1e-5);
  EXPECT_NEAR(norm(embedder->embed("s = \"open")), 1.0, 1e-5);
}

TEST(HashedNgramEmbedderTest, KnobChangeIsCloseButNotIdentical) {
  auto embedder = make_hashed_ngram_embedder(512);
  auto base = embedder->embed(pipeline_program(4));
  auto knob = embedder->embed(pipeline_program(8));
  auto strategy = embedder->embed(pipeline_program(4, "Strategy::Serial"));
  auto unrelated = embedder->embed(reduction_program());

  float knob_sim = cosine(base, knob);
  float strategy_sim = cosine(base, strategy);
  float unrelated_sim = cosine(base, unrelated);
  EXPECT_GT(knob_sim, 0.95f);
  EXPECT_LT(knob_sim, 0.9999f);
  EXPECT_GT(strategy_sim, 0.95f);
  EXPECT_LT(strategy_sim, 0.9999f);
  EXPECT_LT(unrelated_sim, 0.6f);
  EXPECT_LT(unrelated_sim, knob_sim);
}

TEST(HashedNgramEmbedderTest, EmptyCodeIsTheZeroVector) {
  auto embedder = make_hashed_ngram_embedder(128);
  for (const char* code : {"", "   \n\t", "// only a comment\n/* and another */"}) {
    auto v = embedder->embed(code);
    ASSERT_EQ(v.size(), 128u);
    EXPECT_EQ(norm(v), 0.0) << code;
    EXPECT_EQ(cosine(v, embedder->embed(pipeline_program())), 0.0f);
  }
}

TEST(CosineTest, BasicGeometry) {
  std::vector<float> x = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<float> y = {0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  std::vector<float> minus_x = {-1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(cosine(x, x), 1.0f);
  EXPECT_EQ(cosine(x, y), 0.0f);
  EXPECT_EQ(cosine(x, minus_x), -1.0f);
  // Not normalized: still the cosine (covers the tail past the unrolled body, too).
  std::vector<float> a(13), b(13);
  double dot = 0, na = 0, nb = 0;
  for (int i = 0; i < 13; ++i) {
    a[i] = static_cast<float>(i + 1);
    b[i] = static_cast<float>((i * 7) % 5 - 2);
    dot += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  EXPECT_NEAR(cosine(a, b), dot / std::sqrt(na * nb), 1e-6);
  // Vectors from different embedders (lengths differ) and empty vectors are unrelated.
  EXPECT_EQ(cosine(x, std::vector<float>(5, 1.0f)), 0.0f);
  EXPECT_EQ(cosine({}, {}), 0.0f);
}

TEST(HashedNgramEmbedderTest, EmbedsTenKilobytesWellUnderAMillisecond) {
  std::string big;
  for (int i = 0; big.size() < 10 * 1024; ++i) big += pipeline_program(i % 16 + 1);
  auto embedder = make_hashed_ngram_embedder(512);
  embedder->embed(big);  // warm-up
  constexpr int kRuns = 50;
  auto start = std::chrono::steady_clock::now();
  float sink = 0;
  for (int i = 0; i < kRuns; ++i) sink += embedder->embed(big)[0];
  double per_embed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kRuns;
  EXPECT_TRUE(std::isfinite(sink));
  // Typically ~0.1 ms; the bound leaves room for a loaded CI machine.
  EXPECT_LT(per_embed_ms, 1.0);
}

}  // namespace
}  // namespace braid
