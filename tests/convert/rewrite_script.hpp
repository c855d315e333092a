// Scripted rewrites of tests/convert/corpus_llm/reduce_to_root.cu for the rewrite loop's tests
// (CPU: rewrite_loop_test.cpp; GPU: gpu/rewrite_gate_driver.cpp). Each is the rules' conversion
// with the host ncclReduce (its send buffer is allocated under a condition, so no rule converts
// it) replaced in one way.
#pragma once
#include <stdexcept>
#include <string>

namespace braid::testing {

inline void replace_once(std::string& text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("scripted rewrite: `" + from + "` not found in the rules' conversion");
  text.replace(at, from.size(), to);
}

inline const char* const kHostReduce = "BRAID_NCCL(ncclReduce(loss, loss_total, kLoss, ncclFloat, ncclSum, 0, comm, stream));";

// A second call site and `loss` in symmetric memory, as every device-side rewrite needs.
inline std::string with_second_site(std::string s) {
  replace_once(s, "kCallSites = 1;", "kCallSites = 2;");
  replace_once(s, "BRAID_CUDA(cudaMalloc(&loss, kLoss * sizeof(float)));",
               "BRAID_CUDA(braid_converted::sym_malloc(&loss, kLoss * sizeof(float)));\n"
               "  float* loss_scratch = nullptr;\n"
               "  BRAID_CUDA(braid_converted::sym_malloc(&loss_scratch, kLoss * sizeof(float)));");
  // The rules already free every pointer through the run-time allocator lookup.
  replace_once(s, "BRAID_CUDA(braid_converted::sym_free(loss));",
               "BRAID_CUDA(braid_converted::sym_free(loss));\n  BRAID_CUDA(braid_converted::sym_free(loss_scratch));");
  return s;
}

// Correct: all-reduce into a symmetric scratch buffer, only the root copies it into loss_total.
inline std::string rewrite_correct(const std::string& rules_source) {
  std::string s = with_second_site(rules_source);
  replace_once(s, kHostReduce,
               "BRAID_NCCL(braid_converted::all_reduce<1>(loss, loss_scratch, kLoss, ncclFloat, ncclSum, comm, stream));\n"
               "  if (r.rank == 0)\n"
               "    BRAID_CUDA(cudaMemcpyAsync(loss_total, loss_scratch, kLoss * sizeof(float), cudaMemcpyDeviceToDevice, stream));");
  return s;
}

// Compiles, runs, and is wrong: every rank writes the sum into loss_total (the original's
// non-root ranks leave it untouched), so the gate finds rank 1's loss_total different.
inline std::string rewrite_all_ranks_write(const std::string& rules_source) {
  std::string s = with_second_site(rules_source);
  replace_once(s, kHostReduce,
               "BRAID_NCCL(braid_converted::all_reduce<1>(loss, loss_scratch, kLoss, ncclFloat, ncclSum, comm, stream));\n"
               "  BRAID_CUDA(cudaMemcpyAsync(loss_total, loss_scratch, kLoss * sizeof(float), cudaMemcpyDeviceToDevice, stream));");
  return s;
}

// Compiles and fails at run time on every rank: the copy is 4096 times too long
// (cudaErrorInvalidValue, BRAID_CUDA throws).
inline std::string rewrite_copy_overflows(const std::string& rules_source) {
  std::string s = with_second_site(rules_source);
  replace_once(s, kHostReduce,
               "BRAID_NCCL(braid_converted::all_reduce<1>(loss, loss_scratch, kLoss, ncclFloat, ncclSum, comm, stream));\n"
               "  BRAID_CUDA(cudaMemcpyAsync(loss_total, loss_scratch, kLoss * sizeof(float) * 4096, cudaMemcpyDeviceToDevice, stream));");
  return s;
}

// Does not compile: braid_converted has no rooted reduction.
inline std::string rewrite_not_compiling(const std::string& rules_source) {
  std::string s = with_second_site(rules_source);
  replace_once(s, kHostReduce,
               "BRAID_NCCL(braid_converted::reduce_to_root<1>(loss, loss_total, kLoss, ncclFloat, ncclSum, 0, comm, stream));");
  return s;
}

// The n-th (0-based) ```cuda block of a rewrite prompt: 0 is the original, 1 the current program
// (its generated block folded to one line), which a model edits.
inline std::string cuda_block(const std::string& prompt, int n) {
  std::size_t at = 0;
  for (int i = 0; i <= n; ++i) {
    at = prompt.find("```cuda\n", at);
    if (at == std::string::npos) return "";
    at += 8;
  }
  return prompt.substr(at, prompt.find("\n```", at) - at);  // the template adds the newline before the fence
}

inline std::string fenced(const std::string& program, const std::string& note) {
  return "```cuda\n" + program + "```\n" + note + "\n";
}

}  // namespace braid::testing
