// CudaAnalyzer: the communication dependency graph of a host-driven NCCL program.
//
// From the token stream (lexer.hpp) it collects kernels and their launches, streams and events,
// cuBLAS calls, NCCL calls (and whether they sit inside ncclGroupStart/End or a loop), the
// buffers each call touches with their sizes where derivable (cudaMalloc, ncclMemAlloc, the
// harness's ctx.alloc*, constexpr/const integer expressions), `// braid:input|output`
// annotations, and the order among calls (stream order, event edges, cross-stream buffer use).
// Constructs it cannot follow are listed with their line (`unsupported`), never guessed.
// Bad input (not C++/CUDA, no NCCL call, unbalanced groups, a collective on a buffer of unknown
// size) is a UserError naming file and line.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "braid/convert/lexer.hpp"
#include "braid/util/json.hpp"

namespace braid::convert {

enum class CallKind { Nccl, Kernel, Cublas, Stream, Event, Memory, Other };

struct Argument {
  std::string text;                // the argument's source text, whitespace-normalised
  std::size_t begin = 0, end = 0;  // byte range in the source
};

struct Buffer {
  std::string name;               // variable (or harness buffer variable)
  std::string element_type;       // "float", "__nv_bfloat16", "" if unknown
  std::string allocator;          // cudaMalloc | ncclMemAlloc | cudaMallocAsync | harness
  std::string bytes_expr;         // allocation size as written
  std::optional<uint64_t> bytes;  // evaluated when every name in it is a known constant
  int line = 0;
  std::string harness_name;           // c.buffer("x") / c.alloc("x", ...)
  std::size_t alloc_call = SIZE_MAX;  // index into calls of the allocating call, if any
  std::string path;                   // access path of the allocation site (buffer_flow.hpp): `layers[].w`
  bool conditional = false;           // allocated under if/else/switch: may differ between ranks
  std::string conditional_caller;     // or in a function called (or class constructed) under one: `DeviceBuffer`
  int conditional_call_line = 0;      // ... at this line
  int rank_dependent_trip_line = 0;   // or in a loop whose trip count depends on the rank (conditional too)
  int registered_line = 0;            // the program registers a window from inside it here (buf + off)
  int window_line = 0;  // the program registers its own window on the whole buffer here (ncclCommWindowRegister)
  std::string rank_dependent_size;  // a name in its size that depends on the rank (`w.pool.num_blocks`), "" if none
  std::vector<std::size_t> after_creations;  // with such a size: the comm_inits made before it on every path
  bool allocated_in_loop = false;            // ... and made in a loop (or by a call in one): again at every trip
  int ipc_exported_line =
      0;  // the program exports it through cudaIpcGetMemHandle here (legacy IPC refuses cuMem memory)
  std::string freed_in_header;  // released by a call in a header braid does not rewrite ("cudaFree in x.h:60 (in f())")
};

// A quoted header written into the analysed text in place of its #include (header_inline.hpp).
struct InlinedHeader {
  std::string name;                // as included: "tp_serving.h"
  std::size_t begin = 0, end = 0;  // its block in the text (braid's comment lines included)
  std::size_t text_begin = 0;      // where the header's own first line starts
  int include_line = 0;            // the #include's line in the file as the user wrote it
  int added_lines = 0;             // lines the block adds to the file
  bool nested = false;             // included by another inlined header (inside its block)
};

struct Call {
  CallKind kind = CallKind::Other;
  std::string name;  // ncclAllReduce, the kernel's name, cublasGemmEx, ...
  int line = 0;
  std::vector<Argument> args;
  std::vector<Argument> launch_config;       // kernels: grid, block, shared, stream
  std::string stream;                        // stream expression ("0" where defaulted, "" if none)
  std::vector<std::string> buffers;          // buffers among the arguments, by variable name
  int group = -1;                            // index into groups when inside ncclGroupStart/End
  int loop = -1;                             // innermost enclosing loop, index into loops
  std::string function;                      // enclosing function
  std::size_t stmt_begin = 0, stmt_end = 0;  // the whole statement (wrapper macro included, ';' included);
                                             // both 0 when the call is not a statement of its own
                                             // (a condition, a lambda argument)
  bool stmt_is_body = false;                 // the unbraced body of if/else/for/while/do
  std::size_t call_begin = 0, call_end = 0;  // name .. ')' of the call itself
  // NCCL calls: how each buffer argument was followed to its allocation sites (keys of
  // Analysis::buffers, in `buffers`), or why it could not be (the call then stays host NCCL).
  std::vector<std::string> via;
  std::string unresolved;
  std::map<int, std::vector<std::string>> arg_buffers;  // argument index -> allocation sites
  std::vector<std::string> comm_paths;                  // the communicator argument, followed like a buffer
  std::vector<std::string> comm_via;                    // how it was followed (parameters, fields set by constructors)
  bool conditional = false;                             // under if/else/switch/?: (may run on some ranks only)
  int captured_line = 0;                                // runs inside a CUDA graph capture begun at this line
  // A call written in a macro's body: index into Analysis::macro_uses (its use is this call site:
  // call_begin/call_end and the statement are the use's) and the name's offset in its expansion.
  int macro_use = -1;
  std::size_t expansion_at = 0;
  // A call written in a quoted header the file includes ("tp_serving.h:44"): read for the graph and
  // the rules, never rewritten (braid writes only the file). Its byte ranges are the #include's.
  std::string header;
  // A call in a header written into the file (header_inline.hpp): "tp_serving.h:48". Converted
  // like the file's own calls; its line is the #include's.
  std::string inlined_from;
};

// A use of a macro defined in the file whose body calls NCCL or allocates or frees
// (`ALLREDUCE_F32(grads, n)` with `#define ALLREDUCE_F32(b, n) NCCLCHECK(ncclAllReduce(b, b, n, ...))`):
// its expansion is read as written at the use, so each call in it is a call site there. A
// conversion writes the expansion in place of the use; the #define stays.
struct MacroUse {
  std::string name;
  int line = 0;
  std::size_t begin = 0, end = 0;    // the use in the source: name .. ')' (the name of an object-like macro)
  std::string expansion;             // the use expanded (macros without such calls, NCCLCHECK, left as written)
  std::size_t expansion_offset = 0;  // where the expansion's tokens are numbered in the analysed token stream
};

// A communicator creation: ncclCommInitRank(&comm, ...), ncclCommInitRankConfig, ncclCommInitRankScalable,
// ncclCommSplit(.., &comm, ..).
struct CommInit {
  std::size_t call = 0;  // index into calls
  std::string path;      // the communicator it creates
  bool conditional = false;
  bool nonblocking = false;  // given a config while the file sets `blocking = 0`: may return ncclInProgress
};

struct Group {
  int start_line = 0, end_line = 0;
  std::size_t start_call = 0, end_call = 0;  // indices of ncclGroupStart / ncclGroupEnd
  std::vector<std::size_t> members;          // NCCL calls inside
  // A group opened and closed by a pair of wrappers (`pg.start_coalescing(); ... pg.end_coalescing();`):
  // the code tokens between each paired call of the two, where its members run. Empty for a group
  // written in one function (its members lie between start_call and end_call).
  std::vector<std::pair<std::size_t, std::size_t>> regions;
};

// An ncclGroupStart or ncclGroupEnd that its function does not pair: a scope guard's constructor or
// destructor (`GroupGuard() { ncclGroupStart(); }`), a wrapper (`void group_begin()`). Which calls
// run inside such a group is not followed.
struct GroupBracket {
  std::string function;
  int line = 0;
  bool opens = false;           // ncclGroupStart (else ncclGroupEnd)
  std::size_t call = SIZE_MAX;  // index of that ncclGroupStart / ncclGroupEnd
  bool paired = false;          // its calls pair with a closing (opening) wrapper's: a Group of its own
};

struct Loop {
  std::string kind;  // for | while | do
  int line = 0;
  std::string header;  // loop header text
};

struct Annotation {
  std::string kind;    // input | output
  std::string buffer;  // variable name after the marker
  int line = 0;
  std::size_t begin = 0, end = 0;  // the comment's byte range
};

struct Issue {
  int line = 0;
  std::string construct;
  std::string reason;
};

struct Edge {
  std::size_t from = 0, to = 0;  // call indices
  std::string reason;            // "stream s", "event e: s1 -> s2", "buffer x across streams"
};

struct Analysis {
  std::string file;
  std::vector<Call> calls;
  std::map<std::string, Buffer> buffers;
  std::vector<std::string> kernels;  // __global__ functions defined in the file
  std::vector<std::string> streams;
  std::vector<std::string> events;
  std::vector<Group> groups;
  std::vector<GroupBracket> group_brackets;
  std::vector<Loop> loops;
  std::vector<Annotation> annotations;
  std::vector<Issue> unsupported;
  std::vector<Edge> edges;
  std::map<std::string, int64_t> constants;
  std::vector<CommInit> comm_inits;
  std::vector<MacroUse> macro_uses;
  bool single_process_multi_gpu = false;  // several ranks in one process (ncclCommInitAll, a thread per GPU)
  std::string single_process_why;         // how the file does it, for the reason of every call
  // One rank per process with a background thread calling collectives on its communicator, which
  // converts (analyzer_comms.cpp says when): how, for --explain; empty when there is none.
  std::string background_thread;
  bool one_thread_drives_ranks = false;   // of those, one thread drives every rank (ncclCommInitAll, a group
                                          // or loop of creations), not a thread per rank
  bool rank_per_thread = false;           // of those, a thread per rank, every rank's NCCL calls made in its
                                          // thread (each thread's runtime state is its own)
  bool uses_harness = false;              // harness_main(...) with a Candidate
  std::vector<InlinedHeader> inlined;     // headers written into the analysed text (SourceContext)

  std::vector<std::size_t> nccl_collectives() const;  // indices of data-moving NCCL calls
  const Buffer* buffer_of_argument(const std::string& arg_text) const;
};

// The variable an argument expression designates: `buf`, `buf + off`, `(void*)buf`,
// `&buf[i]`, `static_cast<T*>(buf)`, `a.ptr` -> "a". "" when there is none.
std::string base_variable(const std::string& arg_text);

// Data-moving NCCL calls and the position of their arguments.
struct NcclSignature {
  const char* name;
  int arity;
  int send = -1, recv = -1, count = -1, dtype = -1, op = -1, root = -1, peer = -1, comm = -1, stream = -1;
};
const NcclSignature* nccl_signature(const std::string& name);

// The statement a call forms, in code tokens (code_tokens()): `name_token` is the call's name,
// `close_token` its closing ')'. Wrapper macros (BRAID_NCCL(...)), assignments and casts belong
// to it; begin == end == 0 when the call is no statement of its own (inside a condition, a lambda).
struct StatementRange {
  std::size_t begin = 0, end = 0;  // byte range, ';' included
  bool control_body = false;       // the unbraced body of if/else/for/while/do
};
StatementRange statement_of(const std::vector<Token>& code, std::size_t name_token, std::size_t close_token);

// What the compiler is told besides the file: the folders its quoted includes are searched in
// after the file's own folder (-I), and the macros defined on its command line (-D NAME[=V]). The
// #defines of the headers it includes with quotes (`#include "common.h"`, nested ones too) and
// the -D macros are read with the file's own, so a collective written in a header's macro, or a
// type named through -D, is seen at its use. System headers (`<...>`) are not read.
struct SourceContext {
  std::vector<std::string> include_dirs;
  std::vector<std::string> defines;  // NAME or NAME=VALUE
  // Headers written into the source given to analyze(): tokens keep the user's line numbers (a
  // header's tokens take its #include's line) and each call in one names where it was written.
  std::vector<InlinedHeader> inlined = {};
};

// Analyses `source` (named `file` in messages; its folder, when `file` names one, is searched
// first for quoted includes). Throws UserError on bad input.
// `require_collective` false: a program without NCCL collectives is analysed too (a rewrite whose
// communication is all device code).
Analysis analyze(const std::string& file, const std::string& source, bool require_collective = true,
                 const SourceContext& context = {});

// Evaluates an integer expression over known constants (+ - * / % << >> parentheses, sizeof of
// the arithmetic and CUDA element types); nullopt when any part is unknown.
std::optional<int64_t> evaluate_integer(const std::string& expr, const std::map<std::string, int64_t>& constants);

std::size_t element_size(const std::string& type);  // 0 if unknown

json analysis_to_json(const Analysis& a);
std::string analysis_to_text(const Analysis& a);
const char* call_kind_name(CallKind k);

}  // namespace braid::convert
