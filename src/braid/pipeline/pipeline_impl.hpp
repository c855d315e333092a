// Internal to pipeline/: the state of one `braid run` while its steps run (pipeline.cpp holds
// the order and the checks, pipeline_steps.cpp the steps).
#pragma once
#include <filesystem>
#include <memory>
#include <string>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/build_flags.hpp"
#include "braid/convert/transform.hpp"
#include "braid/mutate/llm_runtime.hpp"
#include "braid/pipeline/pipeline.hpp"
#include "braid/pipeline/pipeline_state.hpp"
#include "braid/pipeline/run_setup.hpp"

namespace braid::pipeline_detail {

namespace fs = std::filesystem;

inline bool wants_llm(const std::string& llm) { return !llm.empty() && llm != "none"; }

// A step's outcome: exit code 0, or why it failed (naming the input).
struct StepResult {
  int exit_code = 0;
  std::string failure;
};

class Pipeline {
 public:
  Pipeline(PipelineOptions options, PipelineHooks hooks);

  void validate();       // everything that can fail on bad input, before anything is written
  PipelineReport run();  // the steps, from the first one not finished

 private:
  // pipeline.cpp
  void read_input();
  void check_options();
  void check_results_folder();
  void record_options();
  PipelineReport run_steps();
  bool keep(const std::string& step) const;
  std::string kept_note(const std::string& step) const;
  void load(const std::string& step);
  StepResult run_step(const std::string& step);
  json llm_config() const;
  llm::LlmClient* llm_client();

  // pipeline_steps.cpp
  StepResult step_convert();
  StepResult compile_conversion(std::string& compiled);
  StepResult step_gate();
  std::string gate_possible() const;  // "" when the gate can run here, else why not
  StepResult step_annotate();
  StepResult step_workload();
  StepResult step_record();
  StepResult step_evolve();
  EvolveRequest evolve_request() const;
  json conversion_record() const;

  void say(const std::string& step, const std::string& text) const;
  std::string rel(const fs::path& p) const { return fs::relative(p, results_).string(); }
  void write_out(const std::string& relative, const std::string& text) const;  // <results>/<relative>
  fs::path seed_dir() const { return fs::absolute(o_.input).parent_path(); }

  PipelineOptions o_;
  PipelineHooks hooks_;
  fs::path results_;
  PipelineState state_;
  std::string original_, converted_;
  convert::Analysis analysis_;
  convert::Conversion rules_;
  json gate_ = json::object(), annotation_ = json::object();
  convert::BuildFlags flags_;
  std::shared_ptr<LlmRuntime> runtime_;
};

}  // namespace braid::pipeline_detail
