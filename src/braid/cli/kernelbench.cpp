#include "braid/cli/kernelbench.hpp"

#include <vector>

#include "braid/cli/templates.hpp"
#include "braid/program/program.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"
#include "braid/util/text.hpp"

namespace braid::cli {
namespace {

// One top-level statement of a Python file with the lines that belong to it (its indented
// body, continuation lines, and the blank and comment lines after it).
struct Unit {
  std::string header;  // the first line that is not a decorator
  std::string text;
};

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

// Lines that open a new top-level statement: unindented code, outside a triple-quoted string,
// not a closing bracket of a multi-line expression.
std::vector<Unit> split_top_level(const std::string& text) {
  std::vector<Unit> units;
  std::string open_quote;  // the delimiter of a triple-quoted string spanning lines, or ""
  bool decorators_only = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos + 1);
    pos = end == std::string::npos ? text.size() : end + 1;
    const std::string_view code = trim_right(line);
    const bool top = open_quote.empty() && !code.empty() && !is_space(code[0]) && code[0] != '#' && code[0] != ')' &&
                     code[0] != ']' && code[0] != '}';
    if (top && !decorators_only) units.push_back({});
    if (units.empty()) units.push_back({});  // comments before the first statement
    if (top && code[0] != '@' && units.back().header.empty()) units.back().header = std::string(code);
    if (top) decorators_only = code[0] == '@';
    units.back().text += line;
    for (const char* quote : {"\"\"\"", "'''"}) {
      if (!open_quote.empty() && open_quote != quote) continue;
      std::size_t count = 0;
      for (std::size_t p = line.find(quote); p != std::string::npos; p = line.find(quote, p + 3)) ++count;
      if (count % 2 == 1) open_quote = open_quote.empty() ? quote : "";
    }
  }
  return units;
}

// `def name(` or `class name(` / `class name:`, the name not merely a prefix of a longer one.
bool defines(const std::string& header, std::string_view keyword, std::string_view name) {
  const std::string prefix = std::string(keyword) + " " + std::string(name);
  if (!starts_with(header, prefix)) return false;
  std::string_view rest = trim_left(std::string_view(header).substr(prefix.size()));
  return !rest.empty() && (rest[0] == '(' || rest[0] == ':');
}

std::string without_trailing_blank_lines(std::string text) {
  while (!text.empty() && is_space(text.back())) text.pop_back();
  return text + "\n";
}

std::string indented(const std::string& text, const std::string& indent) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    std::string_view line = std::string_view(text).substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (!trim(line).empty()) out += indent;
    out += std::string(trim_right(line)) + "\n";
    pos = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

const std::string& template_text(const std::string& file) {
  for (const auto& [name, text] : kernelbench_template_files())
    if (name == file) return text;
  throw SystemError("templates/kernelbench/" + file + " is not embedded in this braid binary");
}

}  // namespace

std::string fill_placeholders(std::string_view text, const std::map<std::string, std::string>& values) {
  std::string out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t open = text.find("{{", pos);
    std::size_t close = open == std::string_view::npos ? open : text.find("}}", open + 2);
    if (close == std::string_view::npos) break;
    auto it = values.find(std::string(text.substr(open + 2, close - open - 2)));
    out += text.substr(pos, open - pos);
    out += it == values.end() ? std::string(text.substr(open, close + 2 - open)) : it->second;
    pos = close + 2;
  }
  out += text.substr(pos);
  return out;
}

KernelBenchProblem read_kernelbench_problem(const std::filesystem::path& path) {
  auto text = try_read_file(path);
  if (!text) throw UserError(path.string(), "cannot be read (a KernelBench problem file is expected)");
  KernelBenchProblem problem;
  problem.text = *text;
  bool inputs = false, init_inputs = false, model_without_module = false;
  for (const Unit& unit : split_top_level(*text)) {
    if (defines(unit.header, "class", "Model")) {
      // Model(nn.Module), Model(torch.nn.Module), Model(Module), ...
      if (unit.header.find("Module") == std::string::npos) model_without_module = true;
      else problem.model_class = without_trailing_blank_lines(unit.text);
    } else if (defines(unit.header, "def", "get_inputs")) {
      inputs = true;
    } else if (defines(unit.header, "def", "get_init_inputs")) {
      init_inputs = true;
    } else if (!starts_with(unit.header, "if __name__")) {
      problem.context += unit.text;
    }
  }
  std::string missing;
  auto need = [&](bool present, const char* what) {
    if (!present) missing += std::string(missing.empty() ? "" : ", ") + what;
  };
  need(!problem.model_class.empty(), model_without_module ? "class Model subclassing nn.Module" : "class Model(nn.Module)");
  need(inputs, "def get_inputs()");
  need(init_inputs, "def get_init_inputs()");
  if (!missing.empty())
    throw UserError(path.string(), "is not a KernelBench problem: no top-level " + missing +
                                       " (it must define class Model(nn.Module), get_inputs() and get_init_inputs())");
  problem.context = without_trailing_blank_lines(problem.context);
  return problem;
}

std::string model_new_source(const std::string& model_class) {
  std::string out = model_class;
  auto replace_all = [&out](const std::string& from, const std::string& to) {
    for (std::size_t p = out.find(from); p != std::string::npos; p = out.find(from, p + to.size())) out.replace(p, from.size(), to);
  };
  replace_all("class Model", "class ModelNew");
  replace_all("super(Model,", "super(ModelNew,");
  return out;
}

std::map<std::string, std::string> kernelbench_workload_files(const KernelBenchProblem& problem, const std::string& name,
                                                              const std::string& dir, const std::string& problem_path) {
  const std::map<std::string, std::string> values = {
      {"name", name},
      {"dir", dir},
      {"problem", problem_path},
      {"problem_context", problem.context},
      {"problem_indented", indented(problem.text, "    ")},
      {"model_new", "# The reference's Model under a new name: replace its operations with kernels.<name>(...) calls.\n" +
                        model_new_source(problem.model_class)},
  };
  std::map<std::string, std::string> files;
  for (const char* file : {"program.py", "workload.yaml", "config.yaml", "README.md"})
    files[file] = fill_placeholders(template_text(file), values);
  files["evaluate.py"] = template_text("evaluate.py");  // frozen, copied as it is
  files["reference.py"] = problem.text;
  // The program must parse as braid will parse it (markers in the problem's own text, ...).
  Program program = Program::parse(files["program.py"], "program.py");
  if (!program.ok()) throw UserError(problem_path, "gives a program braid cannot parse: " + program.error()->message);
  return files;
}

}  // namespace braid::cli
