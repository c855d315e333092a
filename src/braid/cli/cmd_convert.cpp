// `braid convert`: the fast path. Analyse a host-driven NCCL program (--explain, --json), convert
// the collectives that rules handle to device-initiated primitives (-o), check that the result
// compiles, and with --verify run the gate (original and converted on N local ranks, outputs of
// every rank compared, times reported) before writing it as accepted. Programs without
// `// braid:` markers or a harness entry go through the differential gate (diff_gate.hpp), whose
// per-buffer comparison --explain prints and --json records.
#include <cstdio>

#include <fmt/format.h>

#include "braid/cli/command.hpp"
#include "braid/convert/analyzer.hpp"
#include "braid/convert/build_flags.hpp"
#include "braid/convert/diff_gate.hpp"
#include "braid/convert/gate.hpp"
#include "braid/convert/transform.hpp"
#include "braid/pipeline/user_flags.hpp"
#include "braid/util/command_line.hpp"
#include "braid/util/error.hpp"
#include "braid/util/fs.hpp"

namespace braid::cli {
namespace {

struct ConvertArgs {
  std::filesystem::path input, output, json_path, work_dir;
  bool explain = false, verify = false, no_build = false;
  int ranks = 2;
  double gate_timeout_s = 120.0;  // each side's run in the gate
  unsigned long long seed = 1;
  std::string harness_args, program_args;
  UserFlags flags;  // -I -D -L -l --nvcc-flags
};

int do_convert(const ConvertArgs& o) {
  using namespace braid::convert;
  if (!(o.gate_timeout_s > 0)) throw UserError("--gate-timeout", "must be a number of seconds > 0");
  if (std::filesystem::is_directory(o.input))
    throw UserError(o.input.string(), "is a folder: give one CUDA/NCCL source file (.cu)");
  if (!std::filesystem::is_regular_file(o.input)) throw UserError(o.input.string(), "no such file");
  const BuildFlags user = to_build_flags(o.flags);
  const InlinedSource inlined = read_user_program(o.input, o.flags);
  const std::string& source = inlined.text;
  const Analysis analysis =
      analyze(o.input.string(), source, true, with_inlined(SourceContext{user.includes, user.defines}, inlined));
  const Conversion conversion = transform(analysis, source);
  // nvcc runs in its own folder: every path it gets is absolute.
  const std::filesystem::path output = o.output.empty() ? o.output : std::filesystem::absolute(o.output);
  if (o.explain) {
    std::printf("%s", analysis_to_text(analysis).c_str());
    std::printf("\n%s", conversion_to_text(conversion).c_str());
  }
  if (!o.json_path.empty()) {
    json j = analysis_to_json(analysis);
    j["conversion"] = conversion_to_json(conversion);
    write_file_atomic(o.json_path, j.dump(2) + "\n");
  }
  if (output.empty()) {
    if (!o.explain) std::printf("%s", conversion_to_text(conversion).c_str());
    return 0;
  }
  if (conversion.converted_calls == 0) {
    if (!o.explain) std::printf("%s", conversion_to_text(conversion).c_str());
    throw UserError(o.input.string(),
                    fmt::format("no NCCL call can be converted by rules ({} found, reasons above); nothing written",
                                conversion.nccl_calls));
  }
  BuildFlags flags = resolve_build_flags(o.input.string(), source, user);
  const std::filesystem::path work = o.work_dir.empty() ? output.parent_path() / (output.filename().string() + ".work")
                                                        : std::filesystem::absolute(o.work_dir);
  json summary = conversion_to_json(conversion);
  std::string status = "unchecked";
  if (!o.no_build) {
    std::string note;
    const BuildResult br = compile_user_program(conversion.source, work / "compile", "converted",
                                                std::filesystem::absolute(o.input).parent_path(), flags, &note);
    if (!note.empty()) std::fprintf(stderr, "braid: %s: %s\n", o.input.string().c_str(), note.c_str());
    if (!br.ok) {
      std::fflush(stdout);  // the plan printed so far comes first when both go to one pipe
      std::fprintf(stderr, "braid: %s: the converted program does not compile; nothing written:\n%s\n",
                   o.input.string().c_str(), br.error.c_str());
      return 1;
    }
    status = "compiled";
  }
  if (o.verify) {
    GateOptions g;
    g.work_dir = work / "gate";
    g.source_dir = std::filesystem::absolute(o.input).parent_path();
    g.ranks = o.ranks;
    g.run_timeout_s = o.gate_timeout_s;
    g.seed = o.seed;
    g.flags = flags.compile_flags();
    g.libs = flags.libs;
    if (!o.harness_args.empty()) g.harness_args = o.harness_args;
    if (!o.program_args.empty()) {
      std::string why;
      const auto words = split_command_words(o.program_args, &why);
      if (!words) throw UserError("--program-args", why);
      g.program_args = *words;
    }
    const GateResult r = run_gate(analysis, source, conversion, g);
    summary["gate"] = gate_to_json(r);
    const bool differential = r.details.value("mode", std::string()) == "differential";
    if (differential && o.explain) std::printf("\n%s", diff_gate_to_text(r).c_str());
    if (!o.json_path.empty()) {
      json j = analysis_to_json(analysis);
      j["conversion"] = conversion_to_json(conversion);
      j["gate"] = summary["gate"];
      write_file_atomic(o.json_path, j.dump(2) + "\n");
    }
    if (!r.passed) {
      std::fflush(stdout);
      std::fprintf(stderr, "braid: %s: the verification gate failed; nothing written as accepted:\n%s\n",
                   o.input.string().c_str(), r.failure.c_str());
      write_file_atomic(work / "gate.json", summary.dump(2) + "\n");
      return 1;
    }
    status = "verified";
    if (differential)
      std::printf("gate (differential, %s): %s\n", r.details.value("launcher", std::string()).c_str(),
                  diff_gate_summary(r).c_str());
    else
      std::printf("gate: outputs match on %d ranks; original %.3f ms, converted %.3f ms, ratio %.3f\n", o.ranks,
                  r.original_ms, r.converted_ms, r.original_ms > 0 ? r.converted_ms / r.original_ms : 0.0);
  }
  summary["status"] = status;
  summary["accepted"] = status == "verified";
  std::string text = conversion_to_text(conversion) + fmt::format("status: {}\n", status);
  // A host-only source (.cpp, .cc) comes back with kernels in it: the user's build must treat it as CUDA.
  if (const std::string ext = output.extension().string(); ext != ".cu" && ext != ".cuh")
    text += fmt::format(
        "note: {} now holds device code (the converted calls are kernels): build it as CUDA (nvcc, `-x cu`, or "
        "CMake `set_source_files_properties({} PROPERTIES LANGUAGE CUDA)`)\n",
        output.filename().string(), output.filename().string());
  write_file_atomic(output, conversion.source);
  write_file_atomic(output.string() + ".summary.json", summary.dump(2) + "\n");
  write_file_atomic(output.string() + ".summary.txt", text);
  if (!o.explain) std::printf("%s", text.c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "wrote %s (%s)\n", output.string().c_str(), status.c_str());
  return 0;
}

Registrar convert_reg(40, [](CLI::App& app, Action& action) {
  static ConvertArgs args;
  auto* cmd =
      app.add_subcommand("convert", "Convert a host-driven NCCL program to device-initiated primitives (fast path)");
  cmd->add_option("file", args.input, "Host-driven CUDA/NCCL source (.cu)")->required();
  cmd->add_flag("--explain", args.explain, "Print the communication dependency graph and the conversion plan");
  cmd->add_option("--json", args.json_path, "Write the graph and the plan as JSON");
  cmd->add_option("-o,--output", args.output, "Write the converted source (+ .summary.json, .summary.txt)");
  cmd->add_flag("--verify", args.verify,
                "Run the gate on local GPUs before accepting (original vs converted, every rank)");
  cmd->add_flag("--no-build", args.no_build, "Do not compile the converted program before writing it");
  cmd->add_option("--ranks", args.ranks, "Ranks for --verify")->default_val(2);
  cmd->add_option("--gate-timeout", args.gate_timeout_s,
                  "Seconds each side (original, converted) may run in the gate before it counts as a hang")
      ->default_val(120);
  cmd->add_option("--seed", args.seed, "Seed of the gate's random inputs")->default_val(1);
  cmd->add_option("--work", args.work_dir, "Folder for builds and gate runs (default: OUTPUT.work)");
  cmd->add_option("--harness-args", args.harness_args, "Arguments for harness programs in the gate");
  cmd->add_option(
      "--program-args", args.program_args,
      "The program's command line in the differential gate (programs without markers or harness), one quoted string");
  add_user_flag_options(*cmd, args.flags);
  cmd->callback([&action] { action = [] { return do_convert(args); }; });
});

}  // namespace
}  // namespace braid::cli
