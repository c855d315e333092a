// Shared fixtures of the benchmarks: realistic program records and cached databases of 1k, 10k
// and 100k programs (built once, bulk insert, under $TMPDIR/braid_bench/).
#pragma once
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "braid/db/record.hpp"

namespace braid::bench {

constexpr int kDims = 512;

std::string program_text(int variant, std::size_t bytes);
std::vector<float> random_unit_vector(std::mt19937& rng);
ProgramRecord bench_record(std::int64_t i, std::mt19937& rng);
// The cached database holding exactly `programs` rows (benchmarks that insert remove their rows
// again, so the cache stays valid).
std::filesystem::path populated_db(std::int64_t programs);

}  // namespace braid::bench
