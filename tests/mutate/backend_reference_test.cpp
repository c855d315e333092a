// The backend context of mutation prompts (mutate/backend_reference + platform/device_headers):
// NCCL declarations read from header text, the sections each API type gets, the token budget, and
// the rendered system message of an LSA island against a one-GPU workload's. Tests that read the
// installed NCCL headers skip (visibly) where none are found.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>

#include "braid/mutate/backend_reference.hpp"
#include "braid/mutate/llm_mutator.hpp"
#include "braid/mutate/llm_runtime.hpp"
#include "braid/platform/toolchain.hpp"
#include "braid/util/error.hpp"

namespace braid {
namespace {

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

std::string joined(const std::vector<ApiDeclaration>& decls) {
  std::string s;
  for (const auto& d : decls)
    for (const auto& l : d.lines) s += l + "\n";
  return s;
}

const char* kHeader = R"(/*****
 * Copyright notice
 *****/
#ifndef X_H_
#define X_H_
#include "core.h"

struct ncclThing;
template<typename Coop> struct ncclThingSession_internal;

// A session: every thread of Coop calls it.
template<typename Coop>
struct ncclThingSession: ncclThingSession_internal<Coop> {
  __device__ ncclThingSession(Coop, int index, ncclHandle h={});
  NCCL_DEVICE_INLINE int size() const { return 32; }
  NCCL_DEVICE_INLINE constexpr ncclThingSession(int a, int b):
    a(a), b(b) {
  }
  ncclThingSession<Coop>& operator+=(int d);
  ncclThingSession<Coop>& operator+=(long d);
  // internal:
  void* _handle;
};

// Unrelated comment, a blank line below.

NCCL_EXTERN_C __host__ ncclResult_t ncclThingCreate(ncclComm_t,
                                                   int n);
NCCL_DEVICE_INLINE ulong2* ncclThing_stash() {
  __shared__ ulong2 stash;
  return &stash;
}
enum class ncclLevel {
  Relaxed
};
#endif
)";

TEST(HeaderDeclarations, SignaturesWithTheirCommentsNoBodiesNoInternals) {
  const auto decls = header_declarations(kHeader);
  ASSERT_EQ(decls.size(), 3u) << joined(decls);
  EXPECT_EQ(decls[0].name, "ncclThingSession");
  EXPECT_EQ(decls[1].name, "ncclThingCreate");
  EXPECT_EQ(decls[2].name, "ncclLevel");
  const std::string text = joined(decls);
  EXPECT_EQ(decls[0].lines.front(), "// A session: every thread of Coop calls it.");
  EXPECT_TRUE(has(text, "__device__ ncclThingSession(Coop, int index, ncclHandle h={});")) << text;
  EXPECT_TRUE(has(text, "__device__ int size() const;")) << text;
  EXPECT_TRUE(has(text, "__device__ constexpr ncclThingSession(int a, int b);")) << text;
  EXPECT_TRUE(has(text, "__host__ ncclResult_t ncclThingCreate(ncclComm_t,\n  int n);")) << text;
  EXPECT_TRUE(has(text, "enum class ncclLevel {\n  Relaxed\n};")) << text;
  EXPECT_EQ(text.find("operator+="), text.rfind("operator+="));  // one overload per operator
  for (const char* gone : {"Copyright", "#include", "_internal;", "_handle", "_stash", "return 32", "a(a)",
                           "Unrelated comment", "struct ncclThing;", "NCCL_DEVICE_INLINE", "NCCL_EXTERN_C"})
    EXPECT_FALSE(has(text, gone)) << gone << " in\n" << text;
}

ReferenceInputs fake_inputs(const llm::PromptLibrary* prompts) {
  ReferenceInputs in;
  in.prompts = prompts;
  in.braid = {{"comm.cuh", "comm contract"}, {"harness.cuh", "harness contract"}, {"runtime.cuh", "runtime contract"}};
  for (const char* h : {"barrier.h", "coop.h", "core.h", "gin.h", "gin_barrier.h", "ll_a2a.h", "lsa_barrier.h", "ptr.h",
                        "impl/comm__types.h"})
    in.nccl.push_back({std::string("nccl_device/") + h, {{"decl", {std::string("// declared in ") + h, "void f();"}}}});
  in.nccl_origin = "/fake/include (NCCL 2.28.9)";
  return in;
}

std::vector<std::string> names(const std::vector<ReferenceSection>& sections) {
  std::vector<std::string> n;
  for (const auto& s : sections) n.push_back(s.name);
  return n;
}

TEST(BackendReference, SectionsSelectedByApiType) {
  llm::PromptLibrary prompts;
  const auto in = fake_inputs(&prompts);
  using V = std::vector<std::string>;
  EXPECT_EQ(names(reference_sections("lsa", in)),
            (V{"reference_lsa.md", "braid/harness.cuh", "braid/comm.cuh", "strategies_lsa.md", "nccl_device/core.h",
               "nccl_device/impl/comm__types.h", "nccl_device/lsa_barrier.h", "nccl_device/coop.h", "nccl_device/ptr.h",
               "nccl_device/ll_a2a.h", "braid/runtime.cuh"}));
  EXPECT_EQ(names(reference_sections("gin", in)),
            (V{"reference_gin.md", "braid/harness.cuh", "braid/comm.cuh", "strategies_gin.md", "nccl_device/gin.h",
               "nccl_device/gin_barrier.h", "nccl_device/barrier.h", "nccl_device/core.h",
               "nccl_device/impl/comm__types.h", "nccl_device/coop.h", "nccl_device/ptr.h", "braid/runtime.cuh"}));
  const auto hybrid = names(reference_sections("hybrid", in));
  for (const char* h : {"nccl_device/lsa_barrier.h", "nccl_device/gin.h", "nccl_device/barrier.h", "nccl_device/ll_a2a.h"})
    EXPECT_NE(std::find(hybrid.begin(), hybrid.end(), h), hybrid.end()) << h;
  EXPECT_EQ(names(reference_sections("host", in)),
            (V{"reference_host.md", "braid/harness.cuh", "braid/comm.cuh", "strategies_host.md", "braid/runtime.cuh"}));
  EXPECT_EQ(names(reference_sections("cuda", in)), (V{"reference_cuda.md", "braid/harness.cuh"}));
  // The first NCCL section says where the declarations come from.
  for (const auto& s : reference_sections("gin", in))
    if (s.name == "nccl_device/gin.h") EXPECT_TRUE(has(s.text, "/fake/include (NCCL 2.28.9)")) << s.text;
}

TEST(BackendReference, BudgetCutsByPriorityAtLineBoundaries) {
  std::vector<ReferenceSection> sections = {{"first", "aaaa aaaa\nbbbb\n"}, {"second", ""}, {"third", "x\n"}};
  for (int i = 0; i < 200; ++i) sections[1].text += "line " + std::to_string(i) + " of the second section\n";
  const auto all = fit_reference(sections, 0);
  EXPECT_EQ(all.shown.size(), 3u);
  EXPECT_TRUE(all.cut.empty());
  for (std::size_t tokens : {5u, 20u, 300u, 1000u}) {
    const auto r = fit_reference(sections, tokens);
    EXPECT_LE(r.text.size(), tokens * 4) << tokens;
    EXPECT_LE(approx_tokens(r.text.size()), tokens);
    // Never mid-line: every line is a whole line of a section, a separator or the marker.
    std::istringstream lines(r.text);
    for (std::string l; std::getline(lines, l);)
      EXPECT_TRUE(l.empty() || has(sections[0].text, l + "\n") || has(sections[1].text, l + "\n") ||
                  has(sections[2].text, l + "\n") || l.rfind("[... ", 0) == 0)
          << "cut line '" << l << "' at " << tokens;
    EXPECT_TRUE(r.text.empty() || r.text.back() == '\n');
  }
  const auto small = fit_reference(sections, 300);  // 1200 characters: first whole, second cut
  EXPECT_EQ(small.shown, std::vector<std::string>{"first"});
  EXPECT_EQ(small.cut, "second");
  EXPECT_EQ(small.left_out, std::vector<std::string>{"third"});
  EXPECT_TRUE(has(small.text, "more lines of second left out: backend_context_tokens]"));
  const auto tiny = fit_reference(sections, 2);  // nothing fits
  EXPECT_TRUE(tiny.text.empty());
  EXPECT_EQ(tiny.left_out, (std::vector<std::string>{"first", "second", "third"}));
}

// The NCCL include folder the platform module finds, or "" (the test then skips).
std::filesystem::path installed_nccl() {
  const auto t = search_toolchain();
  return std::filesystem::exists(t.nccl_include / "nccl_device.h") ? t.nccl_include : std::filesystem::path();
}

TEST(BackendReference, InstalledNcclDeviceApiHasTheKeyNames) {
  const auto inc = installed_nccl();
  if (inc.empty()) GTEST_SKIP() << "no NCCL device headers (nccl_device.h) found by search_toolchain()";
  const auto api = nccl_device_api(inc);
  std::string all;
  for (const auto& h : api) all += h.prompt_section();
  for (const char* name : {"ncclLsaBarrierSession", "ncclGetLsaPointer", "ncclGetLocalPointer", "ncclTeamLsa",
                           "ncclCoopCta", "ncclCoopWarp", "ncclSymPtr", "ncclGin_BackendMask", "ncclGin_SignalInc",
                           "waitSignal", "ncclGinBarrierSession", "ncclBarrierSession", "ncclLLA2ASession",
                           "ncclDevCommRequirements", "lsaBarrierCount", "int lsaRank, lsaSize;"})
    EXPECT_TRUE(has(all, name)) << name;
  for (const char* gone : {"NCCL_DEVICE_INLINE", "_internal<Coop>;", "__syncthreads();", "Copyright"})
    EXPECT_FALSE(has(all, gone)) << gone;

  llm::PromptLibrary prompts;
  const auto in = reference_inputs(&prompts);
  const auto lsa = fit_reference(reference_sections("lsa", in), 0).text;
  const auto gin = fit_reference(reference_sections("gin", in), 0).text;
  EXPECT_TRUE(has(lsa, "ncclLsaBarrierSession(Coop, ncclDevComm const&, ncclTeamTagLsa, uint32_t index"));
  EXPECT_FALSE(has(lsa, "ncclGin_SignalInc"));
  EXPECT_TRUE(has(gin, "ncclGin_SignalInc"));
  EXPECT_FALSE(has(gin, "ncclLsaBarrierCreateRequirement"));
  for (const auto& api_type : api_types()) {
    const auto r = fit_reference(reference_sections(api_type, in), 6000);
    EXPECT_LE(r.text.size(), 6000u * 4) << api_type;
  }
}

TEST(BackendReference, ConfigKeyAndCudaApiType) {
  EXPECT_EQ(parse_llm_settings(json::object(), "c.yaml").backend_context_tokens, 8000);
  const auto s = parse_llm_settings(json{{"backend_context_tokens", 3000}, {"api_type", "cuda"}}, "c.yaml");
  EXPECT_EQ(s.backend_context_tokens, 3000);
  EXPECT_EQ(s.api_type, "cuda");
  for (const json& bad : {json(-1), json("many"), json(1e9)}) {
    try {
      parse_llm_settings(json{{"backend_context_tokens", bad}}, "c.yaml");
      ADD_FAILURE() << bad.dump() << " accepted";
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("c.yaml: backend_context_tokens", 0), 0u) << e.what();
    }
  }
  const auto& keys = llm_config_keys();
  EXPECT_NE(std::find(keys.begin(), keys.end(), "backend_context_tokens"), keys.end());
}

std::shared_ptr<LlmRuntime> runtime(const std::string& api_type) {
  auto rt = std::make_shared<LlmRuntime>();
  rt->settings.api_type = api_type;
  rt->language = "cuda";
  rt->task_message = "Make it fast.";
  rt->prompts = std::make_unique<llm::PromptLibrary>();
  return rt;
}

TEST(BackendReference, LsaIslandPromptCarriesNcclReferenceOneGpuWorkloadsDoesNot) {
  ProgramRecord parent;
  parent.id = "0000000000000001";
  MutationContext ctx;
  ctx.parent = &parent;

  const std::string lsa = LlmMutator(runtime("lsa")).system_message(ctx);
  EXPECT_TRUE(has(lsa, "## Communication backend: lsa"));
  EXPECT_TRUE(has(lsa, "braid/comm.cuh"));
  EXPECT_TRUE(has(lsa, "ncclGetLsaPointer"));  // reference_lsa.md names it even without headers

  // A workload of one GPU rank (serving_kernels' evaluator) gets "cuda" on every island.
  LlmSettings s;
  s.api_type = "lsa";
  s.island_api_types = {"lsa", "gin"};
  apply_workload_api_type(s, json{{"kind", "gpu"}, {"ranks", 1}});
  EXPECT_EQ(s.api_type_of(0), "cuda");
  EXPECT_EQ(s.api_type_of(1), "cuda");
  const std::string one_gpu = LlmMutator(runtime(s.api_type)).system_message(ctx);
  EXPECT_TRUE(has(one_gpu, "braid/harness.cuh"));
  for (const char* nccl : {"nccl_device/", "ncclLsa", "ncclGin", "ncclGet", "braid/comm.cuh"})
    EXPECT_FALSE(has(one_gpu, nccl)) << nccl;

  LlmSettings two;
  apply_workload_api_type(two, json{{"kind", "gpu"}, {"ranks", 2}});
  EXPECT_EQ(two.api_type, "lsa");
  apply_workload_api_type(two, json{{"kind", "external"}});
  EXPECT_EQ(two.api_type, "lsa");

  if (installed_nccl().empty()) GTEST_SKIP() << "no NCCL device headers found: NCCL declarations not checked";
  EXPECT_TRUE(has(lsa, "### nccl_device/lsa_barrier.h"));
  EXPECT_TRUE(has(lsa, "ncclLsaBarrierSession"));
}

}  // namespace
}  // namespace braid
