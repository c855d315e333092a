#include "fixtures.hpp"

#include <algorithm>
#include <cmath>

#include "braid/db/database.hpp"
#include "braid/util/hash.hpp"

namespace braid::bench {

namespace fs = std::filesystem;


// A program body in the shape of an annotated workload (knobs, kernels, a pipeline loop);
// `variant` changes knob values and a constant so every program is distinct.
std::string program_text(int variant, std::size_t bytes) {
  std::string code =
      "#include \"braid/harness.cuh\"\n// EVOLVE-BLOCK-START pipeline\n"
      "constexpr int kChunks = " + std::to_string(1 << (variant % 5)) + ";  // braid:knob 1|2|4|8|16\n"
      "constexpr int kCommCtas = " + std::to_string(4 << (variant % 3)) + ";  // braid:knob 4|8|16\n";
  for (int block = 0; code.size() < bytes; ++block) {
    code += "__global__ void stage_" + std::to_string(block) +
            "(const float* __restrict__ src, float* dst, size_t n) {\n"
            "  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;\n"
            "  if (i < n / kChunks) dst[i] = src[i] * " + std::to_string(variant + block) + ".5f;\n}\n"
            "void run_" + std::to_string(block) + "(Context& ctx, cudaStream_t stream) {\n"
            "  for (int c = 0; c < kChunks; ++c) {\n"
            "    ctx.lsa_allgather(ctx.input(c), ctx.window(c), stream, kCommCtas);\n"
            "    ctx.gemm(ctx.window(c), ctx.weights(), ctx.output(c), ctx.compute_stream());\n"
            "  }\n}\n";
  }
  code += "// EVOLVE-BLOCK-END\n";
  return code;
}

std::vector<float> random_unit_vector(std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(kDims);
  double norm2 = 0;
  for (float& x : v) {
    x = normal(rng);
    norm2 += double(x) * x;
  }
  for (float& x : v) x = static_cast<float>(x / std::sqrt(norm2));
  return v;
}

ProgramRecord bench_record(std::int64_t i, std::mt19937& rng) {
  ProgramRecord r;
  r.id = hash_hex("bench" + std::to_string(i));
  r.generation = i;
  r.island_idx = static_cast<int>(i % 4);
  r.parent_id = i ? hash_hex("bench" + std::to_string(i - 1)) : "";
  r.parent_ids = {r.parent_id};
  r.patch_type = i ? "diff" : "seed";
  r.code = program_text(static_cast<int>(i), 2048);
  r.code_diff = "<<<<<<< SEARCH\nconstexpr int kChunks = 4;\n=======\nconstexpr int kChunks = 8;\n>>>>>>> REPLACE\n";
  r.correct = i % 3 != 0;
  r.failure = r.correct ? FailureKind::Ok : FailureKind::VerifyFailed;
  r.combined_score = r.correct ? 1.0 + (i % 97) * 0.01 : 0.0;
  r.public_metrics = {{"speedup_8MiB", r.combined_score}, {"ratio_to_bound", 0.8}};
  r.embedding = random_unit_vector(rng);
  r.knob_key = "kChunks=" + std::to_string(1 << (i % 5)) + ",kCommCtas=" + std::to_string(4 << (i % 3));
  r.archive_cell = r.knob_key;
  r.model = "knob";
  r.timings = {{"build", 12.5}, {"run", 3.0}, {"bench", 4.0}};
  r.created_at = 1.7e9 + static_cast<double>(i);
  r.run_seed = 42;
  return r;
}

fs::path populated_db(std::int64_t programs) {
  fs::path dir = fs::temp_directory_path() / "braid_bench";
  fs::create_directories(dir);
  fs::path path = dir / ("programs_" + std::to_string(programs) + "_v" +
                         std::to_string(ProgramDatabase::kSchemaVersion) + ".db");
  {
    ProgramDatabase db(path);
    if (db.count() == programs) return path;
  }
  fs::remove(path);
  fs::remove(fs::path(path.string() + "-wal"));
  fs::remove(fs::path(path.string() + "-shm"));
  ProgramDatabase db(path);
  std::mt19937 rng(static_cast<unsigned>(programs));
  constexpr std::int64_t kBatch = 5000;  // bounded memory for the 100k case
  for (std::int64_t start = 0; start < programs; start += kBatch) {
    std::vector<ProgramRecord> batch;
    for (std::int64_t i = start; i < std::min(programs, start + kBatch); ++i) batch.push_back(bench_record(i, rng));
    db.insert_batch(batch);
  }
  return path;
}

}  // namespace braid::bench
