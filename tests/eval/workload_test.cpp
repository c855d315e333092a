#include "braid/eval/workload.hpp"

#include <gtest/gtest.h>

#include <fstream>

#include "braid/eval/cascade.hpp"
#include "braid/program/program.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "eval_test_support.hpp"

namespace braid {
namespace {

using testing::TempDir;

TEST(Workload, LoadsTheExample) {
  WorkloadSpec spec = load_workload(testing::example_dir("matmul_cpu"));
  EXPECT_EQ(spec.name, "matmul_cpu");
  EXPECT_EQ(spec.program, testing::example_dir("matmul_cpu") / "program.cpp");
  EXPECT_TRUE(std::filesystem::exists(spec.program));
  EXPECT_EQ(spec.language, "cpp");
  EXPECT_NE(spec.task.find("matmul_kernel"), std::string::npos);
  EXPECT_EQ(spec.config, testing::example_dir("matmul_cpu") / "config.yaml");
  EXPECT_EQ(spec.evaluator["kind"], "cascade");
  EXPECT_EQ(spec.evaluator["run_timeout_s"], 30.0);
  auto evaluator = make_evaluator(spec);
  auto* cascade = dynamic_cast<CascadeEvaluator*>(evaluator.get());
  ASSERT_NE(cascade, nullptr);
  EXPECT_EQ(cascade->config().program_filename, "program.cpp");
  EXPECT_NE(evaluator->describe().find("g++"), std::string::npos);

  WorkloadSpec external = load_workload(testing::example_dir("matmul_cpu_external") / "workload.yaml");
  EXPECT_EQ(external.evaluator["kind"], "external");
  EXPECT_EQ(external.evaluator["timeout_s"], 120.0);
  EXPECT_EQ(external.program, spec.program);
  EXPECT_NE(make_evaluator(external)->describe().find("evaluate.py"), std::string::npos);
}

// The example's knobs parse with the program module and span a real search space.
TEST(Workload, ExampleProgramHasAWideKnobSpace) {
  WorkloadSpec spec = load_workload(testing::example_dir("matmul_cpu"));
  Program program = Program::parse(read_file(spec.program), spec.program.string());
  ASSERT_TRUE(program.ok()) << program.error()->message;
  ASSERT_EQ(program.knobs().size(), 6u);
  EXPECT_EQ(program.constraints().size(), 2u);
  EXPECT_FALSE(program.violated_constraint({}).has_value());  // the defaults are valid

  std::size_t valid = 0, total = 0;
  std::map<std::string, std::string> values;
  std::function<void(std::size_t)> walk = [&](std::size_t i) {
    if (i == program.knobs().size()) {
      ++total;
      if (!program.violated_constraint(values)) ++valid;
      return;
    }
    for (const auto& v : program.knobs()[i].domain) {
      values[program.knobs()[i].name] = v;
      walk(i + 1);
    }
  };
  walk(0);
  EXPECT_EQ(total, 3000u);
  EXPECT_EQ(valid, 1920u);  // as README.md states
}

class WorkloadErrors : public ::testing::Test {
 protected:
  TempDir dir{"workload"};
  void SetUp() override { write_file_atomic(dir / "program.cpp", "int main() { return 0; }\n"); }
  void write_yaml(const std::string& text) { write_file_atomic(dir / "workload.yaml", text); }
  // The one-line message of the UserError that loading raises.
  std::string load_error() {
    try {
      load_workload(dir.path());
    } catch (const UserError& e) {
      EXPECT_EQ(e.file(), (dir / "workload.yaml").string());
      std::string message = e.what();
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      return message;
    }
    ADD_FAILURE() << "no UserError";
    return {};
  }
  static std::string cascade(const std::string& extra = "") {
    return "evaluator:\n  kind: cascade\n  build: \"g++ -o {artifact} {program}\"\n  run: \"{artifact}\"\n" + extra;
  }
};

TEST_F(WorkloadErrors, UnknownTopLevelKey) {
  write_yaml("name: w\nprogram: program.cpp\nevalutor: {}\n" + cascade());
  std::string message = load_error();
  EXPECT_EQ(message.rfind((dir / "workload.yaml").string() + ": line 3: unknown key 'evalutor'", 0), 0u) << message;
}

TEST_F(WorkloadErrors, UnknownEvaluatorKey) {
  write_yaml("program: program.cpp\n" + cascade("  bench_timeout: 5\n"));
  EXPECT_NE(load_error().find("line 6: unknown key 'bench_timeout' in evaluator"), std::string::npos);
}

TEST_F(WorkloadErrors, MissingProgramFile) {
  write_yaml("program: kernel.cpp\n" + cascade());
  EXPECT_NE(load_error().find("program file 'kernel.cpp' does not exist"), std::string::npos);
  write_yaml(cascade());
  EXPECT_NE(load_error().find("missing key 'program'"), std::string::npos);
}

TEST_F(WorkloadErrors, WrongTypes) {
  write_yaml("program: program.cpp\n" + cascade("  run_timeout_s: soon\n"));
  EXPECT_NE(load_error().find("'run_timeout_s' must be a positive number of seconds"), std::string::npos);
  write_yaml("program: [a, b]\n" + cascade());
  EXPECT_NE(load_error().find("'program' must be a string"), std::string::npos);
  write_yaml("program: program.cpp\nevaluator: cascade\n");
  EXPECT_NE(load_error().find("'evaluator' must be a mapping"), std::string::npos);
  write_yaml("- just\n- a list\n");
  EXPECT_NE(load_error().find("must be a mapping"), std::string::npos);
}

TEST_F(WorkloadErrors, BadEvaluators) {
  write_yaml("program: program.cpp\nevaluator:\n  kind: docker\n");
  EXPECT_NE(load_error().find("evaluator kind 'docker' is unknown"), std::string::npos);
  write_yaml("program: program.cpp\nevaluator:\n  kind: cascade\n  build: \"g++ {program}\"\n");
  EXPECT_NE(load_error().find("missing key 'run' in evaluator"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade("  bench: \"{artefact} --bench\"\n"));
  EXPECT_NE(load_error().find("unknown placeholder {artefact}"), std::string::npos);
  write_yaml("program: program.cpp\nevaluator: {kind: external, command: \"python3 'evaluate.py\"}\n");
  EXPECT_NE(load_error().find("unterminated single quote"), std::string::npos);
  write_yaml("program: program.cpp\n");
  EXPECT_NE(load_error().find("missing key 'evaluator'"), std::string::npos);
}

// A cascade split into a driver and a worker (docs/sandbox.md, "Driver and worker").
TEST_F(WorkloadErrors, DriverKeys) {
  const std::string split = "  driver_build: \"g++ -o {driver} {workload_dir}/driver.cpp\"\n  worker: \"{artifact}\"\n";
  write_yaml("program: program.cpp\n" + cascade("  worker: \"{artifact}\"\n"));
  EXPECT_NE(load_error().find("evaluator 'worker' needs 'driver_build'"), std::string::npos);
  write_yaml("program: program.cpp\nevaluator:\n  kind: cascade\n  build: \"g++ -o {artifact} {program}\"\n  run: \"{driver}\"\n");
  EXPECT_NE(load_error().find("evaluator 'run' names {driver} but there is no 'driver_build'"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade("  driver_build: \"g++ -o driver driver.cpp\"\n  worker: \"{artifact}\"\n"));
  EXPECT_NE(load_error().find("evaluator 'driver_build' must write {driver}"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade("  driver_build: \"g++ -o {driver} driver.cpp\"\n"));
  EXPECT_NE(load_error().find("evaluator 'driver_build' needs 'worker'"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade("  driver_build: \"g++ -o {driver} driver.cpp\"\n  worker: \"{driver}\"\n"));
  EXPECT_NE(load_error().find("may not name {driver}"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade(split + "  verdict: files\n"));
  EXPECT_NE(load_error().find("evaluator verdict 'files' does not go with a driver"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade(split));
  WorkloadSpec spec = load_workload(dir.path());
  EXPECT_EQ(spec.evaluator["worker"], "{artifact}");
  auto evaluator = make_evaluator(spec);
  auto* cascade_evaluator = dynamic_cast<CascadeEvaluator*>(evaluator.get());
  ASSERT_NE(cascade_evaluator, nullptr);
  // The program never names the channel: the driver does, so the verdict comes through it.
  EXPECT_EQ(cascade_evaluator->config().verdict, VerdictSource::Channel);
  EXPECT_NE(evaluator->describe().find("beside the driver"), std::string::npos);
}

TEST_F(WorkloadErrors, SandboxKeys) {
  write_yaml("program: program.cpp\n" + cascade("  verdict: trust_me\n"));
  EXPECT_NE(load_error().find("evaluator verdict 'trust_me' is unknown (expected auto, channel or files)"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade("  max_processes: 3\n"));
  EXPECT_NE(load_error().find("'max_processes' in evaluator must be 0 (no limit) or at least 8"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade("  network: maybe\n"));
  EXPECT_NE(load_error().find("network"), std::string::npos);
  write_yaml("program: program.cpp\n" + cascade("  sandbox: false\n  max_processes: 0\n  network: true\n  verdict: files\n"));
  WorkloadSpec spec = load_workload(dir.path());
  EXPECT_EQ(spec.evaluator["sandbox"], false);
  EXPECT_EQ(spec.evaluator["max_processes"], 0);
  EXPECT_EQ(spec.evaluator["network"], true);
  auto evaluator = make_evaluator(spec);
  auto* cascade_evaluator = dynamic_cast<CascadeEvaluator*>(evaluator.get());
  ASSERT_NE(cascade_evaluator, nullptr);
  EXPECT_EQ(cascade_evaluator->config().verdict, VerdictSource::Files);
  EXPECT_FALSE(cascade_evaluator->config().sandbox.enabled);
  write_yaml("program: program.cpp\n" + cascade());
  spec = load_workload(dir.path());
  EXPECT_EQ(spec.evaluator["sandbox"], true);
  EXPECT_EQ(spec.evaluator["max_processes"], 512);
  EXPECT_EQ(spec.evaluator["network"], false);
  EXPECT_EQ(spec.evaluator["verdict"], "auto");
}

TEST_F(WorkloadErrors, YamlSyntaxAndMissingFile) {
  write_yaml("program: program.cpp\nevaluator: {kind: cascade\n");
  EXPECT_NE(load_error().find("line "), std::string::npos);
  std::filesystem::remove(dir / "workload.yaml");
  try {
    load_workload(dir.path());
    ADD_FAILURE() << "no UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "workload.yaml").string() + ": no such workload file");
  }
}

TEST_F(WorkloadErrors, OptionalKeysAndDefaults) {
  write_file_atomic(dir / "config.yaml", "num_generations: 3\n");
  write_yaml("program: program.cpp\nconfig: config.yaml\nlanguage: cuda\n" +
             cascade("  env: {OMP_NUM_THREADS: 1}\n"));
  WorkloadSpec spec = load_workload(dir / "workload.yaml");
  EXPECT_EQ(spec.name, dir.path().filename().string());
  EXPECT_EQ(spec.config, dir / "config.yaml");
  EXPECT_EQ(spec.language, "cuda");
  EXPECT_EQ(spec.evaluator["bench"], "");
  EXPECT_EQ(spec.evaluator["build_timeout_s"], 60.0);
  EXPECT_EQ(spec.evaluator["env"]["OMP_NUM_THREADS"], "1");
}

}  // namespace
}  // namespace braid
