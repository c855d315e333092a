// The analyzer's walk (analyzer_passes.hpp): one pass over the code tokens in source order that
// tracks scopes (namespaces, functions, loops) and the open NCCL group, and records kernels,
// streams, events, loops, groups and calls, with the buffers the allocating calls create.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "braid/convert/analyzer_passes.hpp"
#include "braid/util/error.hpp"

namespace braid::convert {

bool allocates(const Call& c) {
  return (c.kind == CallKind::Memory &&
          (c.name == "cudaMalloc" || c.name == "cudaMallocAsync" || c.name == "cudaMallocFromPoolAsync" ||
           c.name == "cudaMallocManaged") &&
          c.args.size() >= 2) ||
         (c.name == "ncclMemAlloc" && c.args.size() == 2) || (c.name == "cudaMallocPitch" && c.args.size() == 4);
}

bool releases(const Call& c) { return c.name == "cudaFree" || c.name == "cudaFreeAsync" || c.name == "ncclMemFree"; }

namespace {

// A pitched allocation's bytes, pitch x height, readable after the call: `cudaMallocPitch(&p, &pitch,
// w, h)` is `pitch * (h)`.
std::string pitched_bytes(const Call& c) {
  const std::string& pitch = c.args[1].text;
  const std::string row = pitch.rfind('&', 0) == 0 ? pitch.substr(1) : "*(" + pitch + ")";
  return row + " * (" + c.args[3].text + ")";
}

bool is(const Token& t, const char* text) { return t.text == text; }

// The API family a called name belongs to; Other for names the analysis does not record.
CallKind api_kind(const std::string& name) {
  if (name.rfind("nccl", 0) == 0) return CallKind::Nccl;
  if (name.rfind("cublas", 0) == 0 || name.rfind("cublasLt", 0) == 0) return CallKind::Cublas;
  if (name.rfind("cudaStream", 0) == 0) return CallKind::Stream;
  if (name.rfind("cudaEvent", 0) == 0) return CallKind::Event;
  if (name.rfind("cudaMalloc", 0) == 0 || name.rfind("cudaFree", 0) == 0 || name.rfind("cudaMemcpy", 0) == 0 ||
      name.rfind("cudaMemset", 0) == 0 || name == "cudaDeviceSynchronize" || name == "cudaIpcGetMemHandle")
    return CallKind::Memory;
  return CallKind::Other;
}

// Adds the base variable of each argument to the call's buffer candidates (filtered after the walk).
void add_argument_variables(Call& c) {
  for (const Argument& arg : c.args) {
    const std::string v = base_variable(arg.text);
    if (!v.empty() && std::find(c.buffers.begin(), c.buffers.end(), v) == c.buffers.end()) c.buffers.push_back(v);
  }
}

class CallWalker {
 public:
  CallWalker(const std::string& file, const std::vector<Token>& toks, const BufferFlow& flow,
             const PointerTypes& pointer_types, const MacroTable& macros, Analysis& a)
      : file_(file), toks_(toks), flow_(flow), pointer_types_(pointer_types), macros_(macros), a_(a) {}

  void run() {
    for (std::size_t i = 0; i < toks_.size(); ++i) {
      const Token& t = toks_[i];
      if (is(t, "__global__")) note_kernel_definition(i);
      if (is(t, "cudaStream_t") || is(t, "cudaEvent_t")) note_handles(i);
      if (enter_loop(i) || enter_scope(i) || leave_scope(i)) continue;
      if (is(t, ";") && single_statement_loop_ >= 0 && scopes_.size() == single_statement_end_depth_)
        single_statement_loop_ = -1;
      if (t.kind != TokenKind::Identifier || i + 1 >= toks_.size()) continue;
      const std::size_t after = launch_open_after(i);
      if (toks_[after].kind == TokenKind::LaunchOpen) {
        record_launch(i, after);
        continue;
      }
      if (is(toks_[i + 1], "(")) record_api_call(i);
    }
    if (open_group_ >= 0)
      throw UserError(fmt::format("{}:{}", file_, a_.groups[(std::size_t)open_group_].start_line),
                      "ncclGroupStart without a matching ncclGroupEnd");
    a_.streams.assign(stream_set_.begin(), stream_set_.end());
    a_.events.assign(event_set_.begin(), event_set_.end());
  }

 private:
  struct Scope {
    enum Kind { Namespace, Function, Loop, Other } kind;
    int loop = -1;
    std::string function;
  };

  void note_kernel_definition(std::size_t i) {
    for (std::size_t j = i + 1; j < toks_.size() && j < i + 40; ++j)
      if (is(toks_[j], "(") && toks_[j - 1].kind == TokenKind::Identifier) {
        a_.kernels.push_back(toks_[j - 1].text);
        return;
      }
  }

  // The names declared by `cudaStream_t a, b;` / `cudaEvent_t e`.
  void note_handles(std::size_t i) {
    const bool stream = is(toks_[i], "cudaStream_t");
    for (std::size_t j = i + 1; j < toks_.size() && !is(toks_[j], ";") && !is(toks_[j], ")") && !is(toks_[j], "="); ++j)
      if (toks_[j].kind == TokenKind::Identifier) (stream ? stream_set_ : event_set_).insert(toks_[j].text);
  }

  // for (...) / while (...) / do { : a new loop; `i` moves past its header.
  bool enter_loop(std::size_t& i) {
    const Token& t = toks_[i];
    if ((is(t, "for") || is(t, "while")) && i + 1 < toks_.size() && is(toks_[i + 1], "(")) {
      std::size_t close = matching(toks_, i + 1);
      // `} while (cond);` closes a do-loop already recorded.
      if (is(t, "while") && i > 0 && is(toks_[i - 1], "}") && close + 1 < toks_.size() && is(toks_[close + 1], ";")) {
        i = close + 1;
        return true;
      }
      a_.loops.push_back(Loop{t.text, t.line, normalise(toks_, i + 2, close)});
      const int id = (int)a_.loops.size() - 1;
      if (close + 1 < toks_.size() && is(toks_[close + 1], "{")) {
        scopes_.push_back(Scope{Scope::Loop, id, current_function_});
        i = close + 1;
      } else {
        single_statement_loop_ = id;
        single_statement_end_depth_ = scopes_.size();
        i = close;
      }
      return true;
    }
    if (is(t, "do") && i + 1 < toks_.size() && is(toks_[i + 1], "{")) {
      a_.loops.push_back(Loop{"do", t.line, ""});
      scopes_.push_back(Scope{Scope::Loop, (int)a_.loops.size() - 1, current_function_});
      ++i;
      return true;
    }
    return false;
  }

  // `{`: a namespace, a function body (its name becomes the current function) or another block.
  bool enter_scope(std::size_t i) {
    if (!is(toks_[i], "{")) return false;
    Scope s{Scope::Other, -1, current_function_};
    if (i >= 2 && is(toks_[i - 2], "namespace")) s.kind = Scope::Namespace;
    else if (i >= 1 && is(toks_[i - 1], "namespace")) s.kind = Scope::Namespace;
    else if (current_function_.empty()) {
      // A function body (a constructor's after its member-initialiser list), named as BufferFlow names it.
      if (const FunctionHead h = function_head(toks_, i); h.name != SIZE_MAX) {
        s.kind = Scope::Function;
        s.function = (h.name > 0 && is(toks_[h.name - 1], "~") ? "~" : "") + toks_[h.name].text;
        current_function_ = s.function;
      }
    }
    scopes_.push_back(s);
    return true;
  }

  bool leave_scope(std::size_t i) {
    if (!is(toks_[i], "}")) return false;
    if (!scopes_.empty()) {
      if (scopes_.back().kind == Scope::Function) {
        close_bracket_group();
        current_function_.clear();
      }
      scopes_.pop_back();
    }
    if (!scopes_.empty()) current_function_ = scopes_.back().function;
    return true;
  }

  int enclosing_loop() const {
    int loop = single_statement_loop_;
    for (auto it = scopes_.rbegin(); it != scopes_.rend() && loop < 0; ++it)
      if (it->kind == Scope::Loop) loop = it->loop;
    return loop;
  }

  // The token after the name at `i`, past template arguments when `<<<` follows them
  // (`kernel<T, 4><<<...>>>`).
  std::size_t launch_open_after(std::size_t i) const {
    std::size_t after = i + 1;
    if (!is(toks_[after], "<") || current_function_.empty()) return after;
    int depth = 0;
    std::size_t j = after;
    for (; j < toks_.size() && j < after + 64; ++j) {
      if (is(toks_[j], "<")) ++depth;
      else if (is(toks_[j], ">") && --depth == 0) break;
      else if (is(toks_[j], ">>") && (depth -= 2) <= 0) break;
      else if (is(toks_[j], ";")) break;
    }
    if (j < toks_.size() && j + 1 < toks_.size() && toks_[j + 1].kind == TokenKind::LaunchOpen) after = j + 1;
    return after;
  }

  // Kernel launch: name [<targs>] <<< cfg >>> ( args ); `i` moves to its closing ')'.
  void record_launch(std::size_t& i, std::size_t after) {
    const Token& t = toks_[i];
    std::size_t cfg_close = after + 1;
    while (cfg_close < toks_.size() && toks_[cfg_close].kind != TokenKind::LaunchClose && !is(toks_[cfg_close], ";"))
      ++cfg_close;
    if (cfg_close + 1 >= toks_.size() || !is(toks_[cfg_close + 1], "(")) {
      a_.unsupported.push_back(
          Issue{t.line, t.text + "<<<...>>>", "kernel launch whose configuration could not be followed"});
      return;
    }
    Call c;
    c.kind = CallKind::Kernel;
    c.name = t.text;
    c.line = t.line;
    {  // Configuration args: split between the launch brackets.
      std::vector<Token> cfg(toks_.begin() + after, toks_.begin() + cfg_close + 1);
      cfg.front().text = "(";
      cfg.back().text = ")";
      c.launch_config = split_args(cfg, 0, cfg.size() - 1);
    }
    std::size_t close = matching(toks_, cfg_close + 1);
    c.args = split_args(toks_, cfg_close + 1, close);
    c.stream = c.launch_config.size() >= 4 ? c.launch_config[3].text : "0";
    c.loop = enclosing_loop();
    c.group = open_group_;
    c.function = current_function_;
    c.call_begin = t.offset;
    c.call_end = toks_[std::min(close, toks_.size() - 1)].end;
    a_.calls.push_back(c);
    i = close;
  }

  // A call `name(args)` of the NCCL, cuBLAS, stream, event or memory API.
  void record_api_call(std::size_t i) {
    if (i > 0 && (is(toks_[i - 1], ".") || is(toks_[i - 1], "->"))) return;  // member calls are not API calls
    const Token& t = toks_[i];
    const std::string& name = t.text;
    const CallKind kind = api_kind(name);
    if (kind == CallKind::Other) return;
    // Declarations (`ncclResult_t ncclFoo(...)` prototypes) are not calls.
    if (i > 0 &&
        (is(toks_[i - 1], "ncclResult_t") || is(toks_[i - 1], "cudaError_t") || is(toks_[i - 1], "cublasStatus_t")))
      return;
    std::size_t close = matching(toks_, i + 1);
    if (close >= toks_.size())
      throw UserError(fmt::format("{}:{}", file_, t.line), "unbalanced parentheses in call to " + name);
    Call c;
    c.kind = kind;
    c.name = name;
    c.line = t.line;
    c.args = split_args(toks_, i + 1, close);
    c.loop = enclosing_loop();
    c.function = current_function_;
    c.call_begin = t.offset;
    c.call_end = toks_[close].end;
    track_group(c, t);
    if (const NcclSignature* sig = nccl_signature(name)) read_nccl_call(c, *sig, t);
    else if (allocates(c)) record_allocation(c, i);
    else read_stream(c);
    if (kind == CallKind::Kernel || kind == CallKind::Cublas || kind == CallKind::Memory) add_argument_variables(c);
    a_.calls.push_back(c);
  }

  // ncclGroupStart opens a group, ncclGroupEnd closes it; calls between are members. A nested pair
  // (NCCL counts the depth) is part of the outer group. A bracket its function leaves unpaired (a
  // scope guard's constructor or destructor, a wrapper) is a GroupBracket: no group of its own.
  void track_group(Call& c, const Token& t) {
    if (c.name == "ncclGroupStart") {
      if (open_group_ >= 0) {
        ++group_depth_;
        c.group = open_group_;
        return;
      }
      a_.groups.push_back(Group{t.line, 0, a_.calls.size(), 0, {}, {}});
      open_group_ = (int)a_.groups.size() - 1;
      group_depth_ = 1;
    } else if (c.name == "ncclGroupEnd") {
      if (open_group_ < 0) {
        if (current_function_ == "main")
          throw UserError(fmt::format("{}:{}", file_, t.line), "ncclGroupEnd without a matching ncclGroupStart");
        a_.group_brackets.push_back(GroupBracket{current_function_, t.line, false, a_.calls.size()});
        return;
      }
      if (--group_depth_ > 0) {
        c.group = open_group_;
        return;
      }
      a_.groups[(std::size_t)open_group_].end_line = t.line;
      a_.groups[(std::size_t)open_group_].end_call = a_.calls.size();
      c.group = open_group_;
      open_group_ = -1;
    } else {
      c.group = open_group_;
    }
  }

  // At the end of a function body: a group still open was opened for a caller (a guard, a wrapper).
  void close_bracket_group() {
    if (open_group_ < 0) return;
    const Group g = a_.groups[(std::size_t)open_group_];
    // In main, the program's own error. Elsewhere a wrapper (`void start_coalescing() { ncclGroupStart(); }`),
    // called here, through a pointer, or never (a class's unused API): a bracket, its calls held.
    if (current_function_ == "main")
      throw UserError(fmt::format("{}:{}", file_, g.start_line), "ncclGroupStart without a matching ncclGroupEnd");
    a_.group_brackets.push_back(GroupBracket{current_function_, g.start_line, true, g.start_call});
    for (Call& c : a_.calls)
      if (c.group == open_group_) c.group = -1;
    a_.groups.erase(a_.groups.begin() + open_group_);
    open_group_ = -1;
    group_depth_ = 0;
  }

  // A data-moving NCCL call: its stream, its send/receive variables, its group membership.
  void read_nccl_call(Call& c, const NcclSignature& sig, const Token& t) {
    expand_macro_arguments(c, t);
    if ((int)c.args.size() != sig.arity) {
      a_.unsupported.push_back(
          Issue{t.line, c.name, fmt::format("{} arguments where {} are expected", c.args.size(), sig.arity)});
    } else {
      c.stream = c.args[(std::size_t)sig.stream].text;
      for (int idx : {sig.send, sig.recv}) {
        if (idx < 0) continue;
        const std::string v = base_variable(c.args[(std::size_t)idx].text);
        if (v.empty()) continue;
        if (std::find(c.buffers.begin(), c.buffers.end(), v) == c.buffers.end()) c.buffers.push_back(v);
      }
    }
    if (c.group >= 0) a_.groups[(std::size_t)c.group].members.push_back(a_.calls.size());
  }

  // Arguments naming the file's macros read as the compiler sees them (`NCCL_DTYPE` -> `ncclBfloat16`).
  void expand_macro_arguments(Call& c, const Token& t) const {
    const std::size_t at = source_offset(a_, t.offset);
    for (Argument& arg : c.args) {
      const std::vector<Token> words = code_tokens(lex(arg.text).tokens);
      if (std::none_of(words.begin(), words.end(), [&](const Token& w) { return macros_.at(w.text, at) != nullptr; }))
        continue;
      const std::vector<Token> expanded = code_tokens(lex(macros_.expand_text(arg.text, at)).tokens);
      arg.text = normalise(expanded, 0, expanded.size());
    }
  }

  // A buffer keyed by allocation site: the access path of the target, `path@line` for a second site.
  void record_allocation(const Call& c, std::size_t i) {
    // Through references: `cudaMalloc(&L.w, ...)` in `for (auto& L : layers)` allocates `layers[].w`.
    std::string path = flow_.target_path(access_path(c.args[0].text, true), flow_.function_at(i), i);
    if (path.empty()) path = flow_.pointer_parameter_target(c.args[0].text, i);  // `cudaMalloc((void**)p, ..)`, `T** p`
    if (path.empty()) return;
    Buffer b;
    b.path = path;
    b.name = a_.buffers.count(path) ? fmt::format("{}@{}", path, c.line) : path;
    b.allocator = c.name;
    b.bytes_expr = c.name == "cudaMallocPitch" ? pitched_bytes(c) : c.args[1].text;
    b.bytes = evaluate_integer(b.bytes_expr, a_.constants);
    b.line = c.line;
    b.alloc_call = a_.calls.size();
    b.conditional = flow_.conditional(i);
    // A helper or constructor that some rank may not call allocates on some ranks only.
    std::tie(b.conditional_caller, b.conditional_call_line) = flow_.conditional_caller(flow_.function_at(i));
    b.conditional = b.conditional || b.conditional_call_line > 0;
    const std::string last =
        path.substr(path.find_last_of(".]") == std::string::npos ? 0 : path.find_last_of(".]") + 1);
    auto pt = pointer_types_.find(last.empty() ? split_root(path).first : last);
    b.element_type = pt == pointer_types_.end() ? "" : pt->second;
    a_.buffers[b.name] = b;
  }

  // The stream a cuBLAS, event or async memory call runs on.
  void read_stream(Call& c) {
    const std::string& name = c.name;
    if (c.kind == CallKind::Cublas) {
      if (name == "cublasSetStream" && c.args.size() == 2) cublas_stream_[c.args[0].text] = c.args[1].text;
      if (!c.args.empty()) {
        auto it = cublas_stream_.find(c.args[0].text);
        c.stream = it == cublas_stream_.end() ? "0" : it->second;
      }
    } else if (name == "cudaEventRecord" && c.args.size() >= 1) {
      c.stream = c.args.size() >= 2 ? c.args[1].text : "0";
    } else if (name == "cudaStreamWaitEvent" && c.args.size() >= 2) {
      c.stream = c.args[0].text;
    } else if ((name == "cudaMemcpyAsync" || name == "cudaMemsetAsync") && !c.args.empty()) {
      c.stream = c.args.back().text;
    }
  }

  const std::string& file_;
  const std::vector<Token>& toks_;
  const BufferFlow& flow_;
  const PointerTypes& pointer_types_;
  const MacroTable& macros_;
  Analysis& a_;
  std::vector<Scope> scopes_;
  int open_group_ = -1;
  int group_depth_ = 0;             // nested ncclGroupStart calls open in open_group_
  int single_statement_loop_ = -1;  // loop whose body is one statement without braces
  std::size_t single_statement_end_depth_ = 0;
  std::string current_function_;
  std::map<std::string, std::string> cublas_stream_;  // handle -> stream from cublasSetStream
  std::set<std::string> stream_set_, event_set_;
};

// Kernel-launch buffer arguments (the walk collects them for API calls only), then only names
// that are buffers (allocated or harness-bound) stay in the calls' buffer lists.
void keep_buffer_arguments(Analysis& a) {
  for (Call& c : a.calls)
    if (c.kind == CallKind::Kernel) add_argument_variables(c);
  for (Call& c : a.calls) {
    std::vector<std::string> kept;
    for (auto& b : c.buffers)
      if (a.buffers.count(b)) kept.push_back(b);
    c.buffers = kept;
  }
}

}  // namespace

void walk_calls(const std::string& file, const std::vector<Token>& toks, const BufferFlow& flow,
                const PointerTypes& pointer_types, const MacroTable& macros, Analysis& a) {
  CallWalker(file, toks, flow, pointer_types, macros, a).run();
  keep_buffer_arguments(a);
}

}  // namespace braid::convert
