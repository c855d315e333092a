// The analyzer's passes after the walk (analyzer_passes.hpp): constructs the rules do not model,
// buffer and communicator arguments followed to their allocation sites and creations
// (buffer_flow.hpp), the order among calls and each call's statement range.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "braid/convert/analyzer_passes.hpp"
#include "braid/util/error.hpp"

namespace braid::convert {
namespace {

// Paths are names: a local of another function with the same name (a single-GPU reference
// solver's own `a` beside main's `a`) is another variable, unless the way to the call at code token
// `tok` went through that function (an argument it passes, a pointer it returns; an exchange inside
// it, `std::swap(a, a_new)`, keeps its locals in it). When that would leave nothing, all stay.
void drop_other_functions_locals(const BufferFlow& flow, const Analysis& a, std::size_t tok, const Call& c,
                                 std::vector<std::string>& keys) {
  const std::string here = flow.function_at(tok);
  std::vector<std::string> related;
  for (const std::string& key : keys) {
    const Buffer& b = a.buffers.at(key);
    const std::string there = b.alloc_call < a.calls.size() ? a.calls[b.alloc_call].function : "";
    const bool other_local =
        !there.empty() && there != here && b.path == split_root(b.path).first && flow.local_of(b.path, there) &&
        std::none_of(c.via.begin(), c.via.end(), [&](const std::string& v) {
          return (v.find(" <- ") != std::string::npos && v.find("in " + there + "()") != std::string::npos) ||
                 v.find(there + "() returns") != std::string::npos;
        });
    if (!other_local) related.push_back(key);
  }
  if (!related.empty()) keys = std::move(related);
}

// The allocation sites whose path is `path` and whose call is in `function` (a helper's parameter,
// a constructor's local), into `keys`, each said once in `c.via` as `why`. Whether there was one.
bool sites_in(const Analysis& a, const std::string& path, const std::string& function, const std::string& why,
              std::vector<std::string>& keys, Call& c) {
  bool found = false;
  for (const auto& [key, b] : a.buffers)
    if (path_matches(path, b.path) && b.alloc_call < a.calls.size() && a.calls[b.alloc_call].function == function) {
      keys.push_back(key);
      found = true;
      c.via.push_back(why);
    }
  return found;
}

// A variable a helper fills through a reference or pointer-to-pointer parameter (`alloc(g, n)` with
// `float*& p`, `dev_alloc(&g, n)` with `float** p`): that helper's allocation sites, into `keys`.
// Same-named parameters of other helpers are other allocations.
bool filled_by_helper(const BufferFlow& flow, const Analysis& a, const std::string& path,
                      std::vector<std::string>& keys, Call& c) {
  bool found = false;
  for (const BufferFlow::Fill& fill : flow.reference_fills(path))
    found = sites_in(a, fill.param, fill.function,
                     fmt::format("{} is filled by {}() through its parameter {}", path, fill.function, fill.param),
                     keys, c) ||
            found;
  return found;
}

// `ws.buf` of an object whose class allocates `buf` in its own code (`ws.init(n)`), and that nothing
// outside writes: that allocation's sites, into `keys`.
bool allocated_by_own_class(const BufferFlow& flow, const Analysis& a, const std::string& path,
                            std::vector<std::string>& keys, Call& c) {
  const BufferFlow::OwnField own = flow.own_field_allocation(path);
  if (own.cls.empty()) return false;
  const BufferFlow::Resolution written = flow.written_to(path);
  if (!written.paths.empty() || !written.reason.empty()) return false;
  bool found = false;
  for (const auto& [key, b] : a.buffers)
    if (path_matches(own.path, b.path) && b.alloc_call < a.calls.size() &&
        flow.owner_of(a.calls[b.alloc_call].function) == own.cls) {
      keys.push_back(key);
      found = true;
      c.via.push_back(fmt::format("{} is field {} of class {}, allocated by its own code", path, own.path, own.cls));
    }
  return found;
}

// `model.grads_[i]` of an object whose class fills its member container with its own allocations
// (`cudaMalloc(&g, ..); grads_.push_back(g);` in its constructor): those allocation sites, into `keys`.
bool filled_by_own_class(const BufferFlow& flow, const Analysis& a, const std::string& path,
                         std::vector<std::string>& keys, Call& c) {
  bool found = false;
  for (const BufferFlow::OwnCopy& copy : flow.own_container_copies(path))
    found = sites_in(a, copy.origin, copy.function,
                     fmt::format("{} holds copies of {}, allocated by {}() of class {}", path, copy.origin,
                                 copy.function, copy.cls),
                     keys, c) ||
            found;
  return found;
}

// `B.grads[i]` of an object whose member container a helper fills through its reference or pointer
// parameter (`alloc_stage(B)` with `b.grads.push_back(p)` after `cudaMalloc(&p, ..)`): the helper's
// allocation sites, into `keys`.
bool filled_through_parameter(const BufferFlow& flow, const Analysis& a, const std::string& path,
                              std::vector<std::string>& keys, Call& c) {
  bool found = false;
  for (const BufferFlow::OwnCopy& copy : flow.parameter_container_copies(path))
    found = sites_in(a, copy.origin, copy.function,
                     fmt::format("{} holds copies of {}, allocated by {}(), which fills it through its parameter", path,
                                 copy.origin, copy.function),
                     keys, c) ||
            found;
  return found;
}

// Why buffer `text`, followed to `path`, names no allocation: what the assignments it is given do
// not reach (`given`), a pointer taken back out of a container the program fills itself (a pool's or
// caching allocator's free list: which allocation it was is decided at run time), or no allocation.
std::string no_allocation_reason(const BufferFlow& flow, const std::string& text, const std::string& path,
                                 const std::string& given) {
  if (!given.empty()) return fmt::format("buffer `{}` (followed to `{}`): {}", text, path, given);
  if (const int kept_at = path.find('[') != std::string::npos ? flow.sequence_fill_line(split_root(path).first) : 0;
      kept_at > 0)
    return fmt::format(
        "buffer `{}` (followed to `{}`) is a pointer taken out of `{}`, which the program fills itself (line {}): what "
        "a container filled at run time holds (a pool's free list, a cache, a list of owned blocks) is not traced to "
        "an allocation",
        text, path, split_root(path).first, kept_at);
  return fmt::format("buffer `{}` (followed to `{}`) has no cudaMalloc/ncclMemAlloc allocation in this file", text,
                     path);
}

// The path an object handed where a pointer goes stands for: its field, when its class converts to it
// (`operator T*() { return p_; }`) or indexes it (`operator[](i) { return bufs_[i]; }`); a map's value
// read as `.second`; else the path as followed.
std::string object_path(const BufferFlow& flow, const std::string& followed, Call& c) {
  if (std::string converted = flow.conversion_path(followed); !converted.empty()) {
    c.via.push_back(fmt::format("`{}` converts to its field: {}", followed, converted));
    return converted;
  }
  if (std::string value = flow.map_value_path(followed); !value.empty()) return value;
  if (std::string indexed = flow.index_operator_path(followed); !indexed.empty()) {
    c.via.push_back(fmt::format("`{}` is an element of its class's field: {}", followed, indexed));
    return indexed;
  }
  return followed;
}

// The allocation sites (keys of a.buffers) a buffer argument of call `c` reaches; none, with the
// reason in c.unresolved, when it cannot be followed.
std::vector<std::string> resolve_sites(const BufferFlow& flow, const Analysis& a, const std::string& text,
                                       std::size_t tok, Call& c) {
  // A harness buffer (`const Buffer& kv = c.buffer("kv")`) is used as `kv.ptr` or
  // `kv.as<T>() + off`: the variable is the allocation, whatever member reaches its pointer.
  if (auto h = a.buffers.find(base_variable(text)); h != a.buffers.end() && h->second.allocator == "harness")
    return {h->first};
  const BufferFlow::Resolution r = flow.resolve(text, flow.function_at(tok), tok);
  for (const std::string& v : r.via) c.via.push_back(v);
  if (!r.reason.empty()) {
    if (c.unresolved.empty()) c.unresolved = r.reason;
    return {};
  }
  // A pointer the file exchanges with another buffer's (`std::swap(a, a_new)`) is either allocation
  // (a temporary of the exchange, `tmp = a`, has none of its own).
  const BufferFlow::Resolution exchanged = flow.exchanged_with(r.paths);
  c.via.insert(c.via.end(), exchanged.via.begin(), exchanged.via.end());
  if (!exchanged.reason.empty()) {  // it may also point where braid cannot see
    if (c.unresolved.empty()) c.unresolved = exchanged.reason;
    return {};
  }
  std::vector<std::string> keys;
  for (const std::string& followed : r.paths) {
    const std::string path = object_path(flow, followed, c);
    bool found = false;
    for (const auto& [key, b] : a.buffers)
      if (path_matches(path, b.path)) {
        keys.push_back(key);
        found = true;
      }
    // A pointer to an array's first element, walked or not (`for (fl = fields; ...; fl++) fl->d`,
    // `f(fields)` for `f(struct field* fl)`): `fields.d` is an element's field, `fields[].d`.
    if (const auto [root, rest] = split_root(path); !found && rest.starts_with("."))
      for (const auto& [key, b] : a.buffers)
        if (path_matches(root + "[]" + rest, b.path)) {
          keys.push_back(key);
          found = true;
          c.via.push_back(fmt::format("`{}` points to an element of `{}`", path, root));
        }
    // A field the file writes with another buffer (`model.params = alloc_params(n)`), or with a
    // view of another such field (a workspace carved in steps: `ws.b = ws.a + n; ws.a = ws.base;`).
    const auto through_writes = [&](const std::string& start) {
      std::vector<std::string> pending{start}, steps;
      bool reached = false;
      for (std::size_t k = 0; !reached && k < pending.size() && k < 16; ++k) {
        const BufferFlow::Resolution w = flow.written_to(pending[k]);
        if (!w.reason.empty() && c.unresolved.empty()) c.unresolved = w.reason;
        steps.insert(steps.end(), w.via.begin(), w.via.end());
        for (const std::string& p : w.paths) {
          bool matched = false;
          for (const auto& [key, b] : a.buffers)
            if (path_matches(p, b.path)) {
              keys.push_back(key);
              matched = true;
            }
          reached = reached || matched;
          if (!matched && std::find(pending.begin(), pending.end(), p) == pending.end()) pending.push_back(p);
        }
      }
      if (reached) c.via.insert(c.via.end(), steps.begin(), steps.end());
      return reached;
    };
    found = found || through_writes(path);
    // An element of a container filled with copies of a variable whose fields were allocated
    // there, or written with a helper's buffer (`t.grad = device_alloc(n); params[name] = t;`).
    for (const std::string& origin : found ? std::vector<std::string>{} : flow.element_origins(path)) {
      bool matched = false;
      for (const auto& [key, b] : a.buffers)
        if (path_matches(origin, b.path)) {
          keys.push_back(key);
          matched = true;
        }
      matched = matched || through_writes(origin);
      if (matched)
        c.via.push_back(fmt::format("{} holds copies of {}", split_root(path).first, split_root(origin).first));
      found = found || matched;
    }
    found = found || filled_by_helper(flow, a, path, keys, c);
    found = found || allocated_by_own_class(flow, a, path, keys, c);
    found = found || filled_by_own_class(flow, a, path, keys, c);
    found = found || filled_through_parameter(flow, a, path, keys, c);
    // A variable the file points into buffers by assignment (`d_r = d_pool + n;`): those, when
    // every value it is given is an assignment braid follows (no declared value; for an array's
    // elements, `grads[i] = ...`, no other use that could write one).
    const bool assigned_only =
        !found && (path.find('[') == std::string::npos ? !flow.declared_with_value(split_root(path).first)
                                                       : flow.elements_only_assigned(split_root(path).first));
    const BufferFlow::Resolution given = assigned_only ? flow.exchanged_with({path}) : BufferFlow::Resolution{};
    for (const std::string& p : given.reason.empty() ? given.paths : std::vector<std::string>{})
      for (const auto& [key, b] : a.buffers)
        if (path_matches(p, b.path)) {
          keys.push_back(key);
          found = true;
          c.via.insert(c.via.end(), given.via.begin(), given.via.end());
        }
    if (!found && c.unresolved.empty()) c.unresolved = no_allocation_reason(flow, text, path, given.reason);
  }
  for (const std::string& path : exchanged.paths)
    for (const auto& [key, b] : a.buffers)
      if (path_matches(path, b.path)) keys.push_back(key);
  // Several paths into one allocation (llm.c's tensors carved from one block) name it once, and
  // each step of the way is said once (`--explain` stays readable).
  const auto once = [](std::vector<std::string>& v) {
    std::vector<std::string> kept;
    for (std::string& x : v)
      if (std::find(kept.begin(), kept.end(), x) == kept.end()) kept.push_back(std::move(x));
    v = std::move(kept);
  };
  once(keys);
  once(c.via);
  drop_other_functions_locals(flow, a, tok, c, keys);
  return keys;
}

// The send/receive buffers and the communicator of one collective at code token `tok`.
void follow_call(const BufferFlow& flow, const NcclSignature& sig, std::size_t tok, Analysis& a, Call& c) {
  c.buffers.clear();
  for (int idx : {sig.send, sig.recv}) {
    if (idx < 0) continue;
    const std::string& text = c.args[(std::size_t)idx].text;
    if (text == "nullptr" || text == "NULL") continue;
    for (const std::string& k : resolve_sites(flow, a, text, tok, c)) {
      c.arg_buffers[idx].push_back(k);
      if (std::find(c.buffers.begin(), c.buffers.end(), k) == c.buffers.end()) c.buffers.push_back(k);
    }
  }
  const BufferFlow::Resolution comm = flow.resolve(c.args[(std::size_t)sig.comm].text, flow.function_at(tok), tok);
  c.comm_paths = comm.paths;
  c.comm_via = comm.via;
  if (!comm.reason.empty()) c.comm_via.push_back(comm.reason);
  // The harness hands every entry point its one communicator (`c.comm`), so the expression
  // as written names it even though run()'s caller is outside this file.
  if (comm.paths.empty() && a.uses_harness)
    if (std::string p = access_path(c.args[(std::size_t)sig.comm].text, false); !p.empty()) c.comm_paths = {p};
}

bool is_work(const Call& c) {
  return c.kind == CallKind::Kernel || (c.kind == CallKind::Nccl && nccl_signature(c.name)) ||
         (c.kind == CallKind::Cublas && c.name.find("Gemm") != std::string::npos) || c.name == "cudaMemcpyAsync";
}

// The edge of `cudaStreamWaitEvent(stream, e)` at call `i`: from the last work before e's record
// to the next work on the waiting stream.
void add_event_edge(Analysis& a, std::size_t i,
                    const std::map<std::string, std::pair<std::size_t, std::string>>& recorded) {
  const Call& c = a.calls[i];
  auto it = recorded.find(c.args[1].text);
  if (it == recorded.end()) return;
  for (std::size_t j = i + 1; j < a.calls.size(); ++j)
    if (a.calls[j].stream == c.stream && (a.calls[j].kind == CallKind::Kernel || a.calls[j].kind == CallKind::Nccl ||
                                          a.calls[j].kind == CallKind::Cublas)) {
      a.edges.push_back(
          Edge{it->second.first, j, fmt::format("event {}: {} -> {}", c.args[1].text, it->second.second, c.stream)});
      return;
    }
}

}  // namespace

void list_not_followed(const std::vector<Token>& toks, Analysis& a) {
  static const std::map<std::string, std::string> kNotFollowed = {
      {"ncclCommShrink", "a derived communicator: calls on it run as host NCCL"},
      {"cudaStreamBeginCapture", "CUDA graph capture: first-use window registration must not be captured"},
      {"cudaGraphLaunch", "CUDA graph launch: the graph's contents are not visible to the analysis"},
      {"cudaLaunchKernel", "kernel launched through the runtime API: its buffers and stream are not followed"},
      {"cudaLaunchCooperativeKernel",
       "kernel launched through the runtime API: its buffers and stream are not followed"},
      {"ncclCommRegister",
       "user buffer registration: kept as written (a local registration for host NCCL, on the buffer as allocated, "
       "symmetric or not); the rules register windows themselves"}};
  for (std::size_t i = 0; i + 1 < toks.size(); ++i) {
    auto it = kNotFollowed.find(toks[i].text);
    if (it != kNotFollowed.end() && toks[i + 1].text == "(")
      a.unsupported.push_back(Issue{toks[i].line, it->first, it->second});
  }
}

TokenIndex index_tokens(const std::vector<Token>& toks) {
  TokenIndex token_at;
  for (std::size_t k = 0; k < toks.size(); ++k) token_at[toks[k].offset] = k;
  return token_at;
}

void mark_conditional_calls(const BufferFlow& flow, const TokenIndex& token_at, Analysis& a) {
  for (Call& c : a.calls)
    if (auto tok = token_at.find(c.call_begin); tok != token_at.end()) c.conditional = flow.conditional(tok->second);
}

void follow_collective_arguments(const BufferFlow& flow, const TokenIndex& token_at,
                                 const std::vector<std::size_t>& collectives, Analysis& a) {
  for (std::size_t ci : collectives) {
    Call& c = a.calls[ci];
    const NcclSignature* sig = nccl_signature(c.name);
    if ((int)c.args.size() != sig->arity) continue;
    auto tok = token_at.find(c.call_begin);
    if (tok == token_at.end()) continue;
    follow_call(flow, *sig, tok->second, a, c);
  }
}

void mark_program_registered_buffers(const BufferFlow& flow, const TokenIndex& token_at, Analysis& a) {
  for (std::size_t ci = 0; ci < a.calls.size(); ++ci) {
    Call c = a.calls[ci];  // a scratch copy: resolve_sites notes how it followed the argument
    const bool ipc = c.name == "cudaIpcGetMemHandle";
    // ncclCommRegister is not among them: a local registration for host NCCL's user-buffer paths,
    // not a window, so it stays as written on whatever the rules allocate (ncclMemAlloc memory is
    // what NCCL recommends registering) and the buffer's collectives convert like any other.
    if ((c.name != "ncclCommWindowRegister" && !ipc) || c.args.size() < 2) continue;
    auto tok = token_at.find(c.call_begin);
    if (tok == token_at.end()) continue;
    // A window on the buffer as allocated can be the runtime's own (braid_converted::window_register);
    // one from inside it (`buf + off`) stays the program's; a buffer exported through CUDA IPC stays
    // cudaMalloc (legacy IPC refuses cuMem memory).
    const std::string& arg = c.args[1].text;
    const bool whole_window = c.name == "ncclCommWindowRegister" && arg.find_first_of("+-[") == std::string::npos;
    for (const std::string& key : resolve_sites(flow, a, arg, tok->second, c))
      (ipc            ? a.buffers.at(key).ipc_exported_line
       : whole_window ? a.buffers.at(key).window_line
                      : a.buffers.at(key).registered_line) = c.line;
  }
}

void list_address_taken(const std::vector<Token>& toks, Analysis& a) {
  for (std::size_t k = 0; k + 1 < toks.size(); ++k)
    if (nccl_signature(toks[k].text) && toks[k + 1].text != "(" && (k == 0 || toks[k - 1].text != "p" + toks[k].text))
      a.unsupported.push_back(
          Issue{toks[k].line, toks[k].text + " (not called by name)",
                "taken by address: calls through the pointer are not followed and run as host NCCL"});
}

void check_annotations(const std::string& file, const Analysis& a) {
  for (const Annotation& an : a.annotations)
    if (!a.buffers.count(an.buffer))
      throw UserError(fmt::format("{}:{}", file, an.line),
                      fmt::format("braid:{} names `{}`, which is not an allocated buffer", an.kind, an.buffer));
}

void order_calls(Analysis& a) {
  std::map<std::string, std::size_t> last_on_stream;
  std::map<std::string, std::pair<std::size_t, std::string>> recorded;    // event -> (last op before record, stream)
  std::map<std::string, std::pair<std::size_t, std::string>> last_touch;  // buffer -> (call, stream)
  for (std::size_t i = 0; i < a.calls.size(); ++i) {
    const Call& c = a.calls[i];
    if (c.name == "cudaEventRecord" && !c.args.empty()) {
      auto it = last_on_stream.find(c.stream);
      if (it != last_on_stream.end()) recorded[c.args[0].text] = {it->second, c.stream};
      continue;
    }
    if (c.name == "cudaStreamWaitEvent" && c.args.size() >= 2) {
      add_event_edge(a, i, recorded);  // attached to the next operation on the waiting stream
      continue;
    }
    if (!is_work(c) || c.stream.empty()) continue;
    auto it = last_on_stream.find(c.stream);
    if (it != last_on_stream.end()) a.edges.push_back(Edge{it->second, i, "stream " + c.stream});
    last_on_stream[c.stream] = i;
    for (const std::string& b : c.buffers) {
      auto lt = last_touch.find(b);
      if (lt != last_touch.end() && lt->second.second != c.stream)
        a.edges.push_back(Edge{lt->second.first, i,
                               fmt::format("buffer {} across streams {} -> {}", b, lt->second.second, c.stream)});
      last_touch[b] = {i, c.stream};
    }
  }
}

void find_statement_ranges(const std::vector<Token>& toks, const TokenIndex& token_at, Analysis& a) {
  for (Call& c : a.calls) {
    auto name = token_at.find(c.call_begin);
    if (name == token_at.end() || c.call_end == 0) continue;
    auto close = token_at.find(c.call_end - 1);
    if (close == token_at.end()) continue;
    const StatementRange r = statement_of(toks, name->second, close->second);
    c.stmt_begin = r.begin;
    c.stmt_end = r.end;
    c.stmt_is_body = r.control_body;
  }
}

void mark_header_calls(const std::vector<HeaderSpan>& spans, const std::vector<Token>& toks, const BufferFlow& flow,
                       const TokenIndex& token_at, Analysis& a) {
  const auto span_of = [&](std::size_t offset) -> const HeaderSpan* {
    for (const HeaderSpan& s : spans)
      if (offset >= s.begin && offset < s.end) return &s;
    return nullptr;
  };
  // A function the program calls (or names) anywhere besides its definition.
  const auto used = [&](const std::string& function) {
    return std::count_if(toks.begin(), toks.end(), [&](const Token& t) { return t.text == function; }) > 1;
  };
  for (Call& c : a.calls) {
    const HeaderSpan* s = span_of(c.call_begin);
    if (!s) continue;
    const auto line = std::upper_bound(s->line_starts.begin(), s->line_starts.end(), c.call_begin - s->begin);
    c.header = fmt::format("{}:{}", s->name, line - s->line_starts.begin());
    // A release braid cannot rewrite frees with the program's allocator: what it frees stays out of
    // symmetric memory (ncclMemAlloc memory given to cudaFree is freed with the wrong allocator).
    if (releases(c) && !c.args.empty() && c.args[0].text != "nullptr" && c.args[0].text != "NULL" &&
        (c.function.empty() || used(c.function))) {
      const std::string what =
          fmt::format("{} in {}{}", c.name, c.header, c.function.empty() ? "" : " (in " + c.function + "())");
      Call scratch = c;  // resolve_sites notes how it followed the argument
      const auto tok = token_at.find(c.call_begin);
      const std::vector<std::string> keys = tok == token_at.end()
                                                ? std::vector<std::string>{}
                                                : resolve_sites(flow, a, c.args[0].text, tok->second, scratch);
      for (auto& [key, b] : a.buffers)
        if (b.freed_in_header.empty() && (keys.empty() || std::find(keys.begin(), keys.end(), key) != keys.end()))
          b.freed_in_header = keys.empty() ? what + ", whose pointer is not followed" : what;
    }
    c.call_begin = c.call_end = s->include_offset;
    for (Argument& arg : c.args) arg.begin = arg.end = s->include_offset;
    c.stmt_begin = c.stmt_end = 0;
    c.stmt_is_body = false;
  }
}

void place_macro_calls(const std::vector<Token>& toks, const TokenIndex& token_at, Analysis& a) {
  if (a.macro_uses.empty()) return;
  const std::size_t first_expansion = a.macro_uses.front().expansion_offset;
  for (Call& c : a.calls) {
    if (c.call_begin < first_expansion) continue;
    for (std::size_t u = 0; u < a.macro_uses.size(); ++u) {
      const MacroUse& use = a.macro_uses[u];
      const std::size_t end = use.expansion_offset + use.expansion.size();
      if (c.call_begin < use.expansion_offset || c.call_begin >= end) continue;
      c.macro_use = (int)u;
      c.expansion_at = c.call_begin - use.expansion_offset;
      // The statement is the use's: from its expansion's first token to its last.
      auto first = token_at.find(use.expansion_offset);
      auto last = token_at.lower_bound(end);
      StatementRange r;
      if (first != token_at.end() && last != token_at.begin())
        r = statement_of(toks, first->second, std::prev(last)->second);
      c.stmt_begin = r.end == 0 ? 0 : r.begin >= first_expansion ? use.begin : r.begin;
      c.stmt_end = r.end == 0 ? 0 : r.end >= first_expansion ? use.end : r.end;
      c.stmt_is_body = r.control_body;
      c.call_begin = use.begin;
      c.call_end = c.call_end >= first_expansion ? use.end : c.call_end;  // `AR(...)` with `#define AR ncclAllReduce`
      for (Argument& arg : c.args) arg.begin = use.begin, arg.end = use.end;
      break;
    }
  }
}

}  // namespace braid::convert
