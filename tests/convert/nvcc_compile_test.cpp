// Each corpus program's conversion compiles with nvcc (-c: no GPU and no link needed), once per
// program through the builder's content-addressed cache in the build folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "braid/convert/build_flags.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/header_inline.hpp"
#include "braid/convert/transform.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/subprocess.hpp"

using namespace braid::convert;

namespace {

class ConvertedCompiles : public ::testing::TestWithParam<std::string> {};

std::filesystem::path program_path(const std::string& name) {
  if (name == "gemm_allgather_seed")
    return std::filesystem::path(BRAID_SOURCE_DIR) / "workloads/gemm_allgather/seed.cu";
  return std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus" / (name + ".cu");
}

}  // namespace

TEST_P(ConvertedCompiles, WithNvcc) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const auto path = program_path(GetParam());
  const std::string src = braid::read_file(path);
  Conversion c = transform(analyze(path.filename().string(), src), src);
  ASSERT_GT(c.converted_calls, 0);
  // -O0 keeps CI's two cores free; the cache lives in the build folder so reruns are instant.
  const auto work = std::filesystem::current_path() / "convert-nvcc" / GetParam();
  braid::BuildResult r =
      compile_only(c.source, work, "converted", path.parent_path(), {"-O0", "-std=c++20", "--expt-relaxed-constexpr"});
  EXPECT_TRUE(r.ok) << r.error;
}

namespace {

const std::string kPartInclude = "#include \"braid/converted/";

// prelude.cuh with each of its parts (#include "braid/converted/<part>", in order) written out,
// less the part's leading //! notes: what the embedding makes of the split header.
std::string with_parts_inlined(const std::filesystem::path& dir) {
  std::istringstream in(braid::read_file(dir / "prelude.cuh"));
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(kPartInclude, 0) != 0) {
      out += line + "\n";
      continue;
    }
    const std::size_t name = kPartInclude.size();
    std::istringstream part(braid::read_file(dir / line.substr(name, line.find('"', name) - name)));
    bool notes = true;
    for (std::string l; std::getline(part, l);) {
      notes = notes && l.rfind("//!", 0) == 0;
      if (!notes) out += l + "\n";
    }
  }
  return out;
}

}  // namespace

// The prelude's headers (device/include/braid/converted/) compile on their own, every replacement
// instantiated (prelude_header.cu), and converted_prelude() inserts exactly their embedded text.
TEST(PreludeHeader, CompilesWithNvcc) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc: device/include/braid/converted/*.cuh not compiled";
  const auto path = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/prelude_header.cu";
  const auto work = std::filesystem::current_path() / "convert-nvcc" / "prelude_header";
  // Linked and run: kernels load when CUDA starts (a kernel loaded lazily while a converted collective
  // spins can wait for it: prelude_lifecycle.cuh), unless the user chose a mode.
  GateOptions linked;
  linked.work_dir = work;
  linked.source_dir = path.parent_path();
  linked.flags = {"-O0", "-std=c++20", "--expt-relaxed-constexpr"};
  braid::BuildResult r = build_program(braid::read_file(path), work / "linked", linked);
  ASSERT_TRUE(r.ok) << r.error;
  braid::SubprocessOptions run;
  run.argv = {r.artifact.string()};
  run.secret_env_names = {"CUDA_MODULE_LOADING"};  // dropped from the child's environment
  run.timeout_s = 60;
  EXPECT_EQ(braid::run_subprocess(run).stdout_text, "CUDA_MODULE_LOADING=EAGER\n");
  run.secret_env_names.clear();
  run.env_add = {{"CUDA_MODULE_LOADING", "LAZY"}};
  EXPECT_EQ(braid::run_subprocess(run).stdout_text, "CUDA_MODULE_LOADING=LAZY\n");
  // One thread driving every rank of the process (ncclCommInitAll): the per-GPU bindings.
  r = compile_only(braid::read_file(path), work / "one-thread", "prelude_header", path.parent_path(),
                   {"-O0", "-std=c++20", "--expt-relaxed-constexpr", "-DBRAID_ONE_THREAD_DRIVES_RANKS=true"});
  EXPECT_TRUE(r.ok) << r.error;
  // A rank per thread: a state per thread, buffers crossing threads under the registry's lock.
  r = compile_only(braid::read_file(path), work / "rank-per-thread", "prelude_header", path.parent_path(),
                   {"-O0", "-std=c++20", "--expt-relaxed-constexpr", "-DBRAID_RANK_PER_THREAD=true"});
  EXPECT_TRUE(r.ok) << r.error;
}

TEST(PreludeHeader, IsTheInsertedText) {
  const auto dir = std::filesystem::path(BRAID_SOURCE_DIR) / "device/include/braid/converted";
  const std::string preamble =
      "\nnamespace braid_converted { constexpr int kCallSites = 3; constexpr bool kOneThreadDrivesRanks = false; "
      "constexpr bool kRankPerThread = false; }\n\n";
  const std::string prelude = with_parts_inlined(dir);
  EXPECT_EQ(converted_prelude(3, false), preamble + prelude);
  EXPECT_EQ(converted_prelude(3, true), preamble + prelude + "\n" + braid::read_file(dir / "prelude_harness.cuh"));
  EXPECT_EQ(converted_prelude(0, false).rfind("\nnamespace braid_converted { constexpr int kCallSites = 1;", 0), 0u);
  EXPECT_NE(converted_prelude(3, false, RanksInProcess::OneThreadDrivesAll).find("kOneThreadDrivesRanks = true; "),
            std::string::npos);
  EXPECT_NE(converted_prelude(3, false, RanksInProcess::ThreadPerRank).find("kRankPerThread = true; }"),
            std::string::npos);
}

// prelude.cuh is split by concern into parts it includes; the inserted text is self-contained:
// every part is in it (none left as an include or forgotten in the folder), no reader's note.
TEST(PreludeHeader, InsertsEveryPartInline) {
  const auto dir = std::filesystem::path(BRAID_SOURCE_DIR) / "device/include/braid/converted";
  const std::string umbrella = braid::read_file(dir / "prelude.cuh");
  const std::string inserted = converted_prelude(3, true);
  EXPECT_EQ(inserted.find(kPartInclude), std::string::npos);
  EXPECT_EQ(inserted.find("\n//!"), std::string::npos);
  int parts = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    if (file == "prelude.cuh" || file == "prelude_harness.cuh") continue;
    ++parts;
    EXPECT_NE(umbrella.find(kPartInclude + file + "\""), std::string::npos)
        << file << " is not included by prelude.cuh";
  }
  EXPECT_GT(parts, 1);
  for (const char* def :
       {"struct State {", "struct Shape {", "inline void teardown(", "void __launch_bounds__(1024) broadcast_kernel(",
        "void __launch_bounds__(1024) reduce_kernel(", "void __launch_bounds__(1024) p2p_kernel(",
        "inline ncclResult_t all_gather(", "inline ncclResult_t flush_p2p("})
    EXPECT_NE(inserted.find(def), std::string::npos) << def;
}

INSTANTIATE_TEST_SUITE_P(Corpus, ConvertedCompiles,
                         ::testing::Values("allreduce_after_kernel", "ring_sendrecv", "alltoallv_counts",
                                           "grouped_collectives", "two_streams", "loop_reduce_scatter",
                                           "broadcast_root", "alltoall_tokens", "gemm_allgather_seed"));

// Programs written the way ML engineers write them (tests/convert/corpus_user, listed in
// docs/run.md): each converts by rules (those left untouched compile as they are), and the result
// compiles with nvcc with the program's own flags (MPI's found through mpicxx) as `braid convert`
// builds it (C++17 when braid's C++20 default fails and the program names no standard).
namespace {

class UserProgramCompiles : public ::testing::TestWithParam<std::pair<std::string, int>> {};

}  // namespace

TEST_P(UserProgramCompiles, ConvertedWithNvcc) {
  const auto [name, min_converted] = GetParam();
  const auto path = std::filesystem::path(BRAID_SOURCE_DIR) / "tests/convert/corpus_user" / (name + ".cu");
  const std::string src = braid::read_file(path);
  BuildFlags flags;
  // A program built with a macro that enables its NCCL path or picks its type (as its makefile
  // would pass it); the analysis reads the same macros and the program's own headers.
  // Headers of programs built with `-I include` (tp_serving_kv_cache.cu's), whose macros they test.
  const auto include = path.parent_path() / "include";
  std::string text = src;
  for (const auto& entry : std::filesystem::directory_iterator(include))
    if (src.find("#include \"" + entry.path().filename().string() + "\"") != std::string::npos) {
      text += braid::read_file(entry.path());
      if (flags.includes.empty()) flags.includes.push_back(include.string());
    }
  for (const char* define : {"MULTI_GPU", "USE_BF16", "USE_FP16"})
    if (text.find(std::string("#ifdef ") + define) != std::string::npos) flags.defines.push_back(define);
  // Read as `braid convert` reads it: headers whose code calls NCCL written in.
  const SourceContext context{{path.parent_path().string(), include.string()}, flags.defines};
  const InlinedSource in = inline_headers(path.string(), src, context);
  Conversion c = transform(analyze(path.filename().string(), in.text, true, with_inlined(context, in)), in.text);
  EXPECT_GE(c.converted_calls, min_converted) << conversion_to_text(c);
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  try {
    flags = resolve_build_flags(path.string(), src, flags);
  } catch (const braid::UserError& e) {
    GTEST_SKIP() << e.what();  // no MPI here
  }
  flags.extra.insert(flags.extra.begin(), "-O0");  // braid's other defaults, as `braid convert` builds it
  const auto work = std::filesystem::current_path() / "convert-nvcc-user" / name;
  std::string note;
  braid::BuildResult r =
      compile_user_program(c.converted_calls > 0 ? c.source : src, work, "converted", path.parent_path(), flags, &note);
  EXPECT_TRUE(r.ok) << r.error;
}

// Minimum calls converted by rules, per program (docs/run.md lists what stays host NCCL and why).
INSTANTIATE_TEST_SUITE_P(
    UserCorpus, UserProgramCompiles,
    ::testing::Values(
        std::pair<std::string, int>{"mpi_dp_grads", 1}, std::pair<std::string, int>{"tp_mlp_fp16", 1},
        std::pair<std::string, int>{"pipeline_stages", 2}, std::pair<std::string, int>{"moe_dispatch_uneven", 2},
        std::pair<std::string, int>{"fsdp_model_struct", 2}, std::pair<std::string, int>{"dp_tp_two_comms", 1},
        std::pair<std::string, int>{"single_process_init_all", 1},
        std::pair<std::string, int>{"single_thread_group_init_fp16", 3},
        std::pair<std::string, int>{"param_registry_unique_ptr", 1},
        std::pair<std::string, int>{"loss_stats_reduce", 3}, std::pair<std::string, int>{"broadcast_weights_array", 1},
        std::pair<std::string, int>{"workspace_cast_alias", 2}, std::pair<std::string, int>{"grad_buckets_bf16_avg", 1},
        std::pair<std::string, int>{"ring_attention_fp16", 2},
        std::pair<std::string, int>{"embedding_allgather_types", 3},
        std::pair<std::string, int>{"collective_dispatch_fnptr", 1},
        std::pair<std::string, int>{"decode_gather_to_root", 2},
        std::pair<std::string, int>{"sequence_parallel_rs_ag", 2},
        std::pair<std::string, int>{"expert_alltoall_ncclmem", 3}, std::pair<std::string, int>{"llmc_style_trainer", 1},
        std::pair<std::string, int>{"template_allreduce_fp16", 1},
        std::pair<std::string, int>{"zero1_bucket_shards", 2},
        std::pair<std::string, int>{"graph_captured_tp_decode", 1},
        std::pair<std::string, int>{"alloc_helpers_member_dp", 3},
        std::pair<std::string, int>{"thread_per_gpu_ranks", 1},
        std::pair<std::string, int>{"pthread_per_gpu_fp16_ring", 4},
        std::pair<std::string, int>{"threads_main_allocates_bf16", 2},
        std::pair<std::string, int>{"communicator_class_members", 2},
        std::pair<std::string, int>{"macro_wrapped_collectives", 3},
        std::pair<std::string, int>{"trainer_initlist_comm", 2},
        std::pair<std::string, int>{"nccl_example_one_device_per_process", 2},
        std::pair<std::string, int>{"nccl_tests_style_perf", 1}, std::pair<std::string, int>{"llmc_zero1_floatx", 4},
        std::pair<std::string, int>{"fsdp_prefetch_lambdas", 2},
        std::pair<std::string, int>{"pipeline_uneven_microbatches", 2},
        std::pair<std::string, int>{"c_style_globals_use_bf16", 2},
        std::pair<std::string, int>{"moe_async_alloc_alltoallv", 1},
        std::pair<std::string, int>{"megatron_tp_parallel_state", 2},
        std::pair<std::string, int>{"course_nonblocking_sweep", 0},
        std::pair<std::string, int>{"megatron_two_initrank_bf16", 2},
        std::pair<std::string, int>{"layer_alloc_helper_loop", 2},
        std::pair<std::string, int>{"llmc_pointer_arrays", 2},
        std::pair<std::string, int>{"pipeline_1f1b_bf16_slots", 9},
        std::pair<std::string, int>{"fsdp_flat_param_views", 2},
        std::pair<std::string, int>{"ulysses_sendrecv_alltoall_fp16", 2},
        std::pair<std::string, int>{"dp_accum_overlap_loss_scale", 2},
        std::pair<std::string, int>{"tp_serving_kv_cache", 4},
        std::pair<std::string, int>{"pipeline_interleaved_optional_p2p", 2},
        std::pair<std::string, int>{"moe_step_buffers_async", 2},
        std::pair<std::string, int>{"nccl_example_registered_buffers", 3},
        std::pair<std::string, int>{"raii_device_buffers_thrust", 3},
        std::pair<std::string, int>{"scalable_init_split_nocolor", 3},
        std::pair<std::string, int>{"nccl_tests_argv_dtype_premulsum", 3},
        std::pair<std::string, int>{"halo_exchange_group_guard", 2},
        std::pair<std::string, int>{"nccl_tests_async_poll_inplace", 4},
        std::pair<std::string, int>{"symmetric_windows_mpi", 2},
        std::pair<std::string, int>{"cg_poisson_mpi_double_dots", 5},
        std::pair<std::string, int>{"jacobi2d_rowcol_split_swap", 4},
        std::pair<std::string, int>{"ensemble_streams_reduce_root", 3},
        std::pair<std::string, int>{"hierarchical_node_split_fields", 2},
        std::pair<std::string, int>{"power_iter_bcast_allgatherv", 3},
        std::pair<std::string, int>{"jacobi_halo_std_swap_l2norm", 5},
        std::pair<std::string, int>{"process_group_virtual_dp", 3},
        std::pair<std::string, int>{"ddp_span_buckets_work_queue", 2},
        std::pair<std::string, int>{"tp_inference_mempool_allocators", 0},
        std::pair<std::string, int>{"pipeline_batch_isend_irecv_ops", 2},
        std::pair<std::string, int>{"tp_dp_shared_allreduce_helper_fp16", 1},
        std::pair<std::string, int>{"llmc_lazy_grads_memory", 1},
        std::pair<std::string, int>{"reducer_hooks_work_handles", 2},
        std::pair<std::string, int>{"ddp_comm_thread_fp16", 2},
        std::pair<std::string, int>{"mpi_pthread_reducer_bf16", 1},
        std::pair<std::string, int>{"comm_worker_helpers_fp16", 1},
        std::pair<std::string, int>{"pipeline_gpipe_stage_ref_fp16", 2},
        std::pair<std::string, int>{"workspace_arena_foreach_fp16", 2},
        std::pair<std::string, int>{"model_tensor_vector_member_fp16", 1},
        std::pair<std::string, int>{"uneven_rows_halo_fp16", 5},
        std::pair<std::string, int>{"c_alloc_helpers_pipeline_fp16", 6},
        std::pair<std::string, int>{"raii_map_smart_ptrs_mpi", 2},
        std::pair<std::string, int>{"two_comm_threads_grads_stats", 2},
        std::pair<std::string, int>{"pg_coalescing_wrappers_fp16", 3},
        std::pair<std::string, int>{"class_owned_buffers_fp16", 4},
        std::pair<std::string, int>{"pp_two_stream_p2p_helpers_fp16", 2},
        std::pair<std::string, int>{"tuple_optional_index_fp16", 2},
        std::pair<std::string, int>{"layers_inherit_uptr_bf16", 2},
        std::pair<std::string, int>{"tp_decode_workspace_carve_fp16", 3},
        std::pair<std::string, int>{"heat2d_pitched_halo_mpi", 5},
        std::pair<std::string, int>{"sp_tie_buffer_pairs_fp16", 4},
        std::pair<std::string, int>{"ft_allocator_tp_layer_fp16", 2},
        std::pair<std::string, int>{"llmc_tensorspec_acts_grad_norm", 2},
        std::pair<std::string, int>{"ddp_hooks_tensor_wrappers_fp16", 3},
        std::pair<std::string, int>{"param_map_pairs_broadcast_fp16", 4},

        std::pair<std::string, int>{"disagg_prefill_decode_kv", 5},
        std::pair<std::string, int>{"moe_ep_fp8_dispatch_arena", 8},
        std::pair<std::string, int>{"tp_custom_allreduce_ipc_fallback", 1},
        std::pair<std::string, int>{"dp_attention_graphs_per_bs", 3},
        std::pair<std::string, int>{"pp_decode_graphs_sendrecv", 1},
        std::pair<std::string, int>{"raii_vector_grads_mpi", 2}),
    [](const auto& info) { return info.param.first; });

// A program that is C++17 and not C++20 (a u8 literal is char8_t in C++20) builds as C++17 when it
// names no standard, and `flags` keep that for later builds; a standard the user names is kept and
// its failure reported as such.
TEST(CompileUserProgram, FallsBackToCxx17OnlyWhenNoStandardIsNamed) {
  if (!braid::find_cuda_toolchain()) GTEST_SKIP() << "no nvcc";
  const std::string src = "const char* greeting = u8\"hello\";\nint main() { return greeting[0] == 'h' ? 0 : 1; }\n";
  const auto work = std::filesystem::current_path() / "convert-nvcc-user" / "cxx17_only";
  BuildFlags flags;
  std::string note;
  braid::BuildResult r = compile_user_program(src, work, "p", {}, flags, &note);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_NE(note.find("built as C++17"), std::string::npos) << note;
  EXPECT_NE(std::find(flags.extra.begin(), flags.extra.end(), "-std=c++17"), flags.extra.end());
  BuildFlags named;
  named.extra = {"-std=c++20"};
  std::string none;
  EXPECT_FALSE(compile_user_program(src, work / "named", "p", {}, named, &none).ok);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(named.extra, std::vector<std::string>{"-std=c++20"});
}
