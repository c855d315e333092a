#include "braid/eval/verdict_channel.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <random>
#include <regex>

#include "braid/util/fs.hpp"

namespace braid {
namespace {

// The first non-finite number inside `value` ("public.ms"), or "".
std::string non_finite_at(const json& value, const std::string& where) {
  if (value.is_number_float() && !std::isfinite(value.get<double>())) return where;
  if (value.is_object())
    for (auto& [key, v] : value.items())
      if (auto at = non_finite_at(v, where + "." + key); !at.empty()) return at;
  if (value.is_array())
    for (std::size_t i = 0; i < value.size(); ++i)
      if (auto at = non_finite_at(value[i], fmt::format("{}[{}]", where, i)); !at.empty()) return at;
  return {};
}

}  // namespace

std::string new_eval_token() {
  std::random_device device;  // /dev/urandom on Linux
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", static_cast<std::uint32_t>(device()));
  return token;
}

ChannelVerdict read_channel(const std::string& records, const ChannelExpectation& expect) {
  ChannelVerdict v;
  std::map<long, json> by_rank;
  std::size_t start = 0;
  auto reject = [&](const std::string& problem) {
    v.problem = "verdict channel: " + problem;
    return v;
  };
  while (start < records.size()) {
    std::size_t end = records.find('\n', start);
    if (end == std::string::npos) end = records.size();
    std::string line = records.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    v.received = true;
    json record = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object() || record.value("braid_verdict", 0) != 1)
      return reject("a record is not a JSON object with \"braid_verdict\": 1");
    if (!record.contains("token") || !record["token"].is_string() || record["token"].get<std::string>() != expect.token)
      return reject("a record carries a wrong token (not written by this evaluation's harness)");
    if (record.value("mode", std::string()) != expect.mode)
      return reject(fmt::format("a record is for mode '{}', this step is '{}'", record.value("mode", std::string()), expect.mode));
    if (!record.contains("seed") || !record["seed"].is_number_unsigned() || record["seed"].get<std::uint64_t>() != expect.seed)
      return reject(fmt::format("a record's seed is not the seed braid passed ({})", expect.seed));
    if (!record.contains("correct") || !record["correct"].is_boolean())
      return reject("a record has no boolean \"correct\"");
    const long rank = record.contains("rank") && record["rank"].is_number_integer() ? record["rank"].get<long>() : 0;
    if (by_rank.count(rank)) return reject(fmt::format("two records from rank {}", rank));
    by_rank[rank] = std::move(record);
  }
  if (!v.received) return v;
  if (!by_rank.count(0)) return reject("no record from rank 0");
  const json& lead = by_rank[0];
  v.correct = true;
  for (const auto& [rank, record] : by_rank) {
    if (record["correct"].get<bool>()) continue;
    v.correct = false;
    std::string error = record.value("error", std::string());
    if (error.empty()) error = "verification failed";
    if (v.error.empty()) v.error = by_rank.size() > 1 ? fmt::format("rank {}: {}", rank, error) : error;
  }
  for (const char* key : {"public", "private"})
    if (lead.contains(key)) {
      if (!lead[key].is_object()) return reject(fmt::format("\"{}\" is not an object", key));
      if (auto at = non_finite_at(lead[key], key); !at.empty()) return reject(at + " is not a finite number");
    }
  if (lead.contains("combined_score")) {
    if (!lead["combined_score"].is_number() || !std::isfinite(lead["combined_score"].get<double>()))
      return reject("combined_score is not a finite number");
  } else if (v.correct && expect.needs_score) {
    return reject("a correct " + expect.mode + " record has no combined_score");
  }
  if (lead.contains("timed_ms")) {
    if (!lead["timed_ms"].is_number() || !std::isfinite(lead["timed_ms"].get<double>()) || lead["timed_ms"].get<double>() < 0)
      return reject("timed_ms is not a finite number >= 0");
    const double timed = lead["timed_ms"].get<double>();
    const double bound = 1.05 * expect.wall_s * 1000.0 + 50.0;
    if (timed > bound)
      return reject(fmt::format("the harness reports {:.1f} ms of timed work in a step that ran {:.1f} ms", timed,
                                expect.wall_s * 1000.0));
  } else if (v.correct && expect.needs_score) {
    return reject("a correct " + expect.mode + " record has no timed_ms");
  }
  for (const char* key : {"combined_score", "public", "private", "text_feedback"})
    if (lead.contains(key)) v.metrics[key] = lead[key];
  if (!v.correct && v.metrics.contains("combined_score")) v.metrics["combined_score"] = 0.0;
  // Which stage failed, as an external evaluator says it in correct.json (external.cpp maps it).
  if (!v.correct && lead.contains("failure") && lead["failure"].is_string()) v.failure = lead["failure"].get<std::string>();
  return v;
}

void write_contract_files(const std::filesystem::path& results, const ChannelVerdict& verdict) {
  json correct = {{"correct", verdict.correct}, {"error", verdict.error}};
  if (!verdict.failure.empty()) correct["failure"] = verdict.failure;
  write_file_atomic(results / "correct.json", correct.dump(2) + "\n");
  std::error_code ec;
  if (verdict.metrics.contains("combined_score")) write_file_atomic(results / "metrics.json", verdict.metrics.dump(2) + "\n");
  else std::filesystem::remove(results / "metrics.json", ec);
}

std::string channel_tampering(const std::string& candidate, const std::string& harness) {
  auto count = [](const std::string& text, const std::string& word) {
    std::size_t n = 0;
    for (auto at = text.find(word); at != std::string::npos; at = text.find(word, at + word.size())) ++n;
    return n;
  };
  for (const std::string word : {"BRAID_RESULT_FD", "braid_verdict"})
    if (count(candidate, word) > count(harness, word))
      return "the candidate's code names the verdict channel (" + word +
             "), which only the frozen harness may use; rejected unrun";
  // The harness takes the nonce in a constructor of priority 101, before static initialisers of
  // default priority; code asking to run earlier could take it first.
  static const std::regex before_main(R"((constructor\s*\(\s*\d)|init_priority|init_array|\.ctors)");
  auto asks = [](const std::string& text) { return std::distance(std::sregex_iterator(text.begin(), text.end(), before_main), {}); };
  if (asks(candidate) > asks(harness)) {
    std::smatch m;
    std::regex_search(candidate, m, before_main);
    return "the candidate's code asks to run before main (" + m.str() +
           "), ahead of the harness taking the verdict channel; rejected unrun";
  }
  return {};
}

VerdictSource resolve_verdict_source(const std::string& setting, const std::string& harness_text) {
  if (setting == "channel") return VerdictSource::Channel;
  if (setting == "files") return VerdictSource::Files;
  return harness_text.find("BRAID_RESULT_FD") != std::string::npos ? VerdictSource::Channel : VerdictSource::Files;
}

}  // namespace braid
