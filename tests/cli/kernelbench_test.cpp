// `braid init DIR --kernelbench problem.py` (issue 24 part 2): the generator on the shipped
// examples, its refusals (one line naming the file, exit 2, nothing written), the seed's
// "nothing to move" refusal under the knob mutator, and the evaluator's Python compiling.
// The evaluator's run on a GPU is tests/cli/kernelbench_gpu_check.sh.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "../e2e/e2e_support.hpp"
#include "braid/eval/workload.hpp"
#include "braid/program/program.hpp"

namespace braid::test {
namespace {

const std::filesystem::path kSource = test_source_dir();

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

bool python3_present() { return std::system("python3 -c pass >/dev/null 2>&1") == 0; }

// `python3 -m py_compile`, with the bytecode written outside the source tree.
int py_compile(const std::filesystem::path& file, const std::filesystem::path& scratch) {
  std::string cmd = "python3 -c \"import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)\" '" +
                    file.string() + "' '" + (scratch / "compiled.pyc").string() + "'";
  return std::system(cmd.c_str());
}

class KernelBenchInit : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fresh_dir("kernelbench");
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

  // Runs braid and checks the bad-input contract: exit 2, one line naming `file` and `what`.
  void expect_refused(const std::vector<std::string>& args, const std::string& file, const std::string& what) {
    auto o = run_braid(args);
    EXPECT_EQ(o.code, 2) << o.output;
    std::string out = o.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(out.find('\n'), std::string::npos) << "expected one line, got:\n" << o.output;
    EXPECT_EQ(out.rfind("braid: ", 0), 0u) << o.output;
    EXPECT_NE(out.find(file), std::string::npos) << o.output;
    EXPECT_NE(out.find(what), std::string::npos) << o.output;
  }

  std::filesystem::path init(const std::string& example) {
    auto dir = root_ / example;
    auto o = run_braid({"init", dir.string(), "--kernelbench", (kSource / "examples/kernelbench" / (example + ".py")).string()});
    EXPECT_EQ(o.code, 0) << o.output;
    return dir;
  }

  std::filesystem::path root_;
};

// A problem that is valid but for what a test removes from it.
const char* kValidProblem = R"(import torch
import torch.nn as nn

SCALE = 2.0


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * SCALE


def get_inputs():
    return [torch.randn(16, 16)]


def get_init_inputs():
    return []
)";

std::string without(std::string text, const std::string& piece) {
  auto p = text.find(piece);
  EXPECT_NE(p, std::string::npos) << piece;
  if (p != std::string::npos) text.erase(p, piece.size());
  return text;
}

TEST_F(KernelBenchInit, WritesAWorkloadForEveryExample) {
  for (const std::string example : {"bias_gelu", "row_softmax", "matmul_relu"}) {
    SCOPED_TRACE(example);
    auto dir = init(example);
    for (const char* f : {"program.py", "evaluate.py", "reference.py", "workload.yaml", "config.yaml", "README.md"})
      EXPECT_TRUE(std::filesystem::is_regular_file(dir / f)) << f;
    EXPECT_EQ(read(dir / "reference.py"), read(kSource / "examples/kernelbench" / (example + ".py")));
    EXPECT_EQ(read(dir / "evaluate.py"), read(kSource / "templates/kernelbench/evaluate.py"));

    const std::string program = read(dir / "program.py");
    Program parsed = Program::parse(program, "program.py");
    ASSERT_TRUE(parsed.ok()) << parsed.error()->message;
    ASSERT_EQ(parsed.blocks().size(), 1u);
    EXPECT_TRUE(parsed.knobs().empty());
    // The CUDA source, its loading and ModelNew are all inside the one block; the loader helper is frozen.
    const std::string block = program.substr(parsed.blocks()[0].begin, parsed.blocks()[0].end - parsed.blocks()[0].begin);
    for (const char* inside : {"CUDA_SOURCE = r\"\"\"", "CPP_SOURCE", "FUNCTIONS", "load_kernels(", "class ModelNew(nn.Module)"})
      EXPECT_NE(block.find(inside), std::string::npos) << inside;
    EXPECT_NE(program.find("from torch.utils.cpp_extension import load_inline"), std::string::npos);
    EXPECT_EQ(program.find("class Model("), std::string::npos);
    EXPECT_EQ(program.find("def get_inputs"), std::string::npos);
    EXPECT_EQ(program.find("{{"), std::string::npos) << "a placeholder was left unfilled";

    WorkloadSpec spec = load_workload(dir);
    EXPECT_EQ(spec.name, example);
    EXPECT_EQ(spec.language, "python");
    EXPECT_EQ(spec.program.filename(), "program.py");
    EXPECT_EQ(spec.evaluator.value("kind", ""), "external");
    EXPECT_EQ(spec.evaluator.value("command", ""), "python3 evaluate.py");
    EXPECT_EQ(spec.evaluator.value("verdict", ""), "channel");
    EXPECT_NE(spec.task.find("def get_inputs"), std::string::npos) << "the task shows the problem";
    EXPECT_NE(make_evaluator(spec), nullptr);
  }
}

TEST_F(KernelBenchInit, KeepsContextRenamesSuperAndDropsTheMainBlock) {
  write(root_ / "p.py", std::string("\"\"\"A module docstring\n\nclass Model(nn.Module): inside it is text.\n\"\"\"\n") +
                            kValidProblem + "\n\nif __name__ == \"__main__\":\n    print(Model()(*get_inputs()))\n");
  auto o = run_braid({"init", (root_ / "wl").string(), "--kernelbench", (root_ / "p.py").string()});
  ASSERT_EQ(o.code, 0) << o.output;
  const std::string program = read(root_ / "wl" / "program.py");
  EXPECT_NE(program.find("SCALE = 2.0"), std::string::npos);
  EXPECT_NE(program.find("super(ModelNew, self).__init__()"), std::string::npos);
  EXPECT_NE(program.find("A module docstring"), std::string::npos);
  EXPECT_EQ(program.find("__main__"), std::string::npos);
  // The docstring's "class Model(" at column 0 is text, not the class (kept, in the context).
  EXPECT_EQ(program.find("class Model("), program.find("class Model(nn.Module): inside it is text."));
  EXPECT_NE(program.find("class ModelNew(nn.Module):\n    def __init__"), std::string::npos);
}

TEST_F(KernelBenchInit, RefusesAProblemWithoutGetInputs) {
  write(root_ / "p.py", without(kValidProblem, "def get_inputs():\n    return [torch.randn(16, 16)]\n"));
  expect_refused({"init", (root_ / "wl").string(), "--kernelbench", (root_ / "p.py").string()}, "p.py", "get_inputs()");
  EXPECT_FALSE(std::filesystem::exists(root_ / "wl"));
}

TEST_F(KernelBenchInit, RefusesAProblemWithoutGetInitInputs) {
  write(root_ / "p.py", without(kValidProblem, "def get_init_inputs():\n    return []\n"));
  expect_refused({"init", (root_ / "wl").string(), "--kernelbench", (root_ / "p.py").string()}, "p.py", "get_init_inputs()");
  EXPECT_FALSE(std::filesystem::exists(root_ / "wl"));
}

TEST_F(KernelBenchInit, RefusesAProblemWithoutModel) {
  std::string text = kValidProblem;
  text.replace(text.find("class Model("), 12, "class Net(");
  write(root_ / "p.py", text);
  expect_refused({"init", (root_ / "wl").string(), "--kernelbench", (root_ / "p.py").string()}, "p.py", "class Model(nn.Module)");
  EXPECT_FALSE(std::filesystem::exists(root_ / "wl"));
}

TEST_F(KernelBenchInit, RefusesAModelThatIsNoModule) {
  std::string text = kValidProblem;
  text.replace(text.find("class Model(nn.Module)"), 22, "class Model(object)");
  write(root_ / "p.py", text);
  expect_refused({"init", (root_ / "wl").string(), "--kernelbench", (root_ / "p.py").string()}, "p.py", "subclassing nn.Module");
  EXPECT_FALSE(std::filesystem::exists(root_ / "wl"));
}

TEST_F(KernelBenchInit, RefusesAMissingProblemFile) {
  expect_refused({"init", (root_ / "wl").string(), "--kernelbench", (root_ / "nowhere.py").string()}, "nowhere.py", "cannot be read");
  EXPECT_FALSE(std::filesystem::exists(root_ / "wl"));
}

TEST_F(KernelBenchInit, RefusesAProblemWithEvolveMarkers) {
  std::string text = kValidProblem;
  text.insert(text.find("    def forward"), "    # EVOLVE-BLOCK-START mine\n");
  write(root_ / "p.py", text);
  expect_refused({"init", (root_ / "wl").string(), "--kernelbench", (root_ / "p.py").string()}, "p.py", "EVOLVE-BLOCK");
  EXPECT_FALSE(std::filesystem::exists(root_ / "wl"));
}

TEST_F(KernelBenchInit, RefusesAFolderThatIsNotEmpty) {
  std::filesystem::create_directories(root_ / "busy");
  write(root_ / "busy" / "keep.txt", "mine\n");
  expect_refused({"init", (root_ / "busy").string(), "--kernelbench", (kSource / "examples/kernelbench/bias_gelu.py").string()},
                 "busy", "not empty");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root_ / "busy"), {}), 1);
  EXPECT_EQ(read(root_ / "busy" / "keep.txt"), "mine\n");
}

TEST_F(KernelBenchInit, KnobMutatorSaysItHasNothingToMove) {
  auto dir = init("row_softmax");
  auto results = root_ / "results";
  expect_refused({"evolve", dir.string(), "--llm", "none", "--results", results.string(), "--generations", "2"},
                 (dir / "program.py").string(), "nothing to move");
  EXPECT_FALSE(std::filesystem::exists(results));
}

// The evaluator's verdict through braid's channel (nonce in, one record out), with PyTorch made
// unimportable (-S -E: no site-packages, no PYTHONPATH) so that the verdict is known on any host:
// not correct, the evaluator's reason and stage, the record verified.
TEST_F(KernelBenchInit, EvaluatorAnswersThroughTheVerdictChannel) {
  if (!python3_present()) GTEST_SKIP() << "python3 not found";
  auto dir = init("bias_gelu");
  std::string yaml = read(dir / "workload.yaml");
  yaml.replace(yaml.find("\"python3 evaluate.py\""), 21, "\"python3 -E -S evaluate.py\"");
  write(dir / "workload.yaml", yaml);
  WorkloadSpec spec = load_workload(dir);
  auto evaluator = make_evaluator(spec);
  auto work = root_ / "run" / "gen_0" / "c1";
  std::filesystem::create_directories(work);
  EvalResult r = evaluator->evaluate(EvalRequest{"c1", read(dir / "program.py"), work, 11}, nullptr);
  EXPECT_FALSE(r.correct);
  EXPECT_EQ(r.failure, FailureKind::RunFailed) << r.error_text;
  EXPECT_NE(r.error_text.find("PyTorch is not importable"), std::string::npos) << r.error_text;
  EXPECT_EQ(r.private_metrics.value("verdict_channel", ""), "verified") << r.private_metrics.dump();
}

// The seed through braid's ExternalEvaluator on a GPU with the user's PyTorch: the workload's own
// settings (no sandbox, the address-space limit, the verdict channel) let CUDA work. Run by
// tests/cli/kernelbench_gpu_check.sh, which sets BRAID_KERNELBENCH_GPU=1.
TEST_F(KernelBenchInit, SeedScoresThroughBraidOnAGpu) {
  if (!std::getenv("BRAID_KERNELBENCH_GPU")) GTEST_SKIP() << "GPU check: run by tests/cli/kernelbench_gpu_check.sh";
  auto dir = init("row_softmax");
  auto evaluator = make_evaluator(load_workload(dir));
  auto work = root_ / "run" / "gen_0" / "seed";
  std::filesystem::create_directories(work);
  EvalResult r = evaluator->evaluate(EvalRequest{"seed", read(dir / "program.py"), work, 5}, nullptr);
  EXPECT_TRUE(r.correct) << r.error_text;
  EXPECT_EQ(r.failure, FailureKind::Ok) << r.error_text;
  EXPECT_GT(r.combined_score, 0.0);
  EXPECT_EQ(r.private_metrics.value("verdict_channel", ""), "verified") << r.private_metrics.dump();
  for (const char* key : {"ms", "eager_ms", "speedup_eager"}) EXPECT_TRUE(r.public_metrics.contains(key)) << key;
  std::printf("seed through braid: combined_score %.4f, %s\n", r.combined_score, r.text_feedback.c_str());
}

TEST_F(KernelBenchInit, PythonCompiles) {
  if (!python3_present()) GTEST_SKIP() << "python3 not found";
  EXPECT_EQ(py_compile(kSource / "templates/kernelbench/evaluate.py", root_), 0);
  for (const std::string example : {"bias_gelu", "row_softmax", "matmul_relu"}) {
    EXPECT_EQ(py_compile(kSource / "examples/kernelbench" / (example + ".py"), root_), 0) << example;
    EXPECT_EQ(py_compile(init(example) / "program.py", root_), 0) << example;
  }
}

}  // namespace
}  // namespace braid::test
