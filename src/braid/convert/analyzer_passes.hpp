// The passes of analyze() (analyzer.hpp), in the order it runs them, and the token helpers they
// share. Internal to the analyzer: each pass reads the tokens and fills its part of the Analysis.
//   analyzer_syntax.cpp  token helpers: argument splitting, integer constants, base variables, statements
//   analyzer_scan.cpp    before the walk: the source check, annotations, constants, pointer types, harness buffers
//   analyzer_walk.cpp    the walk: scopes, loops, groups, kernel launches and API calls
//   analyzer_follow.cpp  after the walk: buffers and communicators followed, order edges, statement ranges
//   analyzer_comms.cpp   after the walk: communicator creations and modes, members' communicators, ranks per process
//   analyzer_streams.cpp, analyzer_capture.cpp, analyzer_ranks.cpp: calls on several streams, calls in graph
//                        captures, sizes that depend on the rank
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/lexer.hpp"
#include "braid/convert/macros.hpp"

namespace braid::convert {

// ---- token helpers (analyzer_syntax.cpp) ----

// The data-moving NCCL calls with the position of their arguments.
std::span<const NcclSignature> nccl_signatures();
// Tokens [b, e) as one whitespace-normalised text (`a * b`, `f(x)`).
std::string normalise(const std::vector<Token>& toks, std::size_t b, std::size_t e);
// Index of the token closing the bracket opened at `open`, or toks.size().
std::size_t matching(const std::vector<Token>& toks, std::size_t open);
// Splits (open, close) into top-level comma-separated arguments.
std::vector<Argument> split_args(const std::vector<Token>& toks, std::size_t open, std::size_t close);

// ---- passes before the walk (analyzer_scan.cpp) ----

// The lexed source; a UserError for binary data or text the lexer rejects.
LexResult lex_source(const std::string& file, const std::string& source);
// A UserError unless the tokens look like a C++/CUDA translation unit (prose, JSON or YAML do not).
void require_translation_unit(const std::string& file, const std::string& source, const LexResult& lexed,
                              const std::vector<Token>& code);
// The preprocessor lines the macro table reads: the -D macros first (`#define NAME VALUE`, before
// any source), then the file's own, each quoted include preceded by its header's lines (read from
// the including file's folder, then `context.include_dirs`; nested includes followed, each header
// once), numbered at the include so that they are in scope after it.
std::vector<Token> with_context_directives(const std::string& file, const std::vector<Token>& all,
                                           const SourceContext& context);
// `#include "name"` -> name; "" for any other line (system includes are not read).
std::string quoted_include(const std::string& directive);
// A quoted include's file: in `from` (the including file's folder), then in `dirs` (-I); empty if none.
std::filesystem::path find_header(const std::string& name, const std::filesystem::path& from,
                                  const std::vector<std::string>& dirs);
// A header's text and tokens, the first time it is met (`seen`, at most 64 headers); none when it
// was met before or cannot be read or lexed (the compiler will say).
struct HeaderText {
  std::string text;
  LexResult lexed;
};
std::optional<HeaderText> lex_header_once(const std::filesystem::path& header, std::set<std::string>& seen);
// A header's text and tokens; none when it cannot be read or lexed (the compiler will say).
std::optional<HeaderText> read_header(const std::filesystem::path& header);
// Whether a header's code tokens call what the rules follow (NCCL, allocations, releases), or
// declare that API (NCCL's or CUDA's own headers, found through -I): those are not the program's.
enum class HeaderCalls { None, Program, Library };
HeaderCalls header_calls(const std::vector<Token>& code);
// The code of the quoted headers the file includes whose code calls NCCL, allocates or frees
// (`inline void tp_sum(...) { ncclAllReduce(...); }` in "common.h"), read where the #include
// stands so that their calls are seen, followed and kept host NCCL (braid writes only the file).
// Each header's tokens are numbered past the source (from `source_size + 1`), with the include's
// line; `end` is the first offset after them. Not for braid's own workloads (an include of
// "braid/..."): their headers belong to braid's harness.
struct HeaderSpan {
  std::string name;                      // as included: "tp_serving.h"
  std::size_t begin = 0, end = 0;        // offsets its tokens are numbered at
  std::size_t include_offset = 0;        // the file's #include that brings it
  std::vector<std::size_t> line_starts;  // of the header's text: its own line numbers
};
struct HeaderCode {
  std::vector<Token> code;  // the file's code tokens with the headers' inserted
  std::vector<HeaderSpan> spans;
  std::size_t end = 0;
};
HeaderCode with_header_code(const std::string& file, const std::vector<Token>& all, const std::vector<Token>& code,
                            const SourceContext& context, std::size_t source_size);
// `// braid:input|output x` comments into annotations.
void read_annotations(const std::string& file, const std::vector<Token>& all, Analysis& a);
// The code tokens with each use of a macro whose body calls NCCL or allocates or frees (MacroUse)
// replaced by its expansion's tokens, numbered from past the end of the source (the use's line
// kept); a use that cannot be expanded is listed in unsupported and left as written.
std::vector<Token> splice_macro_uses(const std::vector<Token>& code, const MacroTable& macros, std::size_t source_size,
                                     Analysis& a);
// Object-like macros with an integer value (`#define N_LAYERS 2`) into constants.
void collect_macro_constants(const MacroTable& macros, Analysis& a);
// The byte offset in the source a token of the analysed stream stands for: its own, or for a
// token of a macro's expansion, its use's.
std::size_t source_offset(const Analysis& a, std::size_t offset);
// `constexpr T NAME = expr;` and `const T NAME = expr;` with an integer value into constants.
void collect_constants(const std::vector<Token>& toks, Analysis& a);
// Declared pointers `T* name` / `T *name`: name -> element type.
using PointerTypes = std::map<std::string, std::string>;
PointerTypes declared_pointer_types(const std::vector<Token>& toks);
// Buffers bound to the harness (`Buffer& x = c.buffer("x")`, sized by `c.alloc("x", bytes)`).
void collect_harness_buffers(const std::vector<Token>& toks, Analysis& a);

// ---- the walk (analyzer_walk.cpp) ----

// Kernels, streams, events, loops, groups and calls (kernel launches and NCCL, cuBLAS, stream,
// event and memory API calls) in source order, with the buffers allocated by the calls.
// The arguments of NCCL calls are read with the file's macros expanded (`NCCL_DTYPE` -> `ncclBfloat16`).
void walk_calls(const std::string& file, const std::vector<Token>& toks, const BufferFlow& flow,
                const PointerTypes& pointer_types, const MacroTable& macros, Analysis& a);

// ---- passes after the walk (analyzer_follow.cpp) ----

// Constructs whose effect on ordering or on the communicator the rules do not model.
void list_not_followed(const std::vector<Token>& toks, Analysis& a);
// Byte offset of a code token -> its index.
using TokenIndex = std::map<std::size_t, std::size_t>;
TokenIndex index_tokens(const std::vector<Token>& toks);
// Each call's `conditional`: under if/else/switch/?:.
void mark_conditional_calls(const BufferFlow& flow, const TokenIndex& token_at, Analysis& a);
// Buffer and communicator arguments of the collectives followed to their allocation sites and
// creations; a call whose buffer cannot be followed keeps the reason (it stays host NCCL).
void follow_collective_arguments(const BufferFlow& flow, const TokenIndex& token_at,
                                 const std::vector<std::size_t>& collectives, Analysis& a);
// A collective whose stream argument may differ between its launches (an element of a stream array
// chosen at run time, `streams[s]`; a helper's parameter given different streams) keeps the reason
// and stays host NCCL: its launches may overlap on one rank (analyzer_streams.cpp). A send or
// receive whose every launch runs on one stream converts (the runtime keeps its plan per stream).
// Runs after attach_reached_group_members: a group's members decide it.
void hold_calls_on_varying_streams(const BufferFlow& flow, const TokenIndex& token_at,
                                   const std::vector<std::size_t>& collectives, Analysis& a);
// Allocations whose size names a value that depends on the rank (MPI_Comm_rank, ncclCommUserRank,
// a RANK environment variable, and what is computed from them or assigned under a condition on
// them): their Buffer::rank_dependent_size, since a window is registered with one size on every rank.
void mark_rank_dependent_sizes(const std::vector<Token>& toks, const BufferFlow& flow, const TokenIndex& token_at,
                               Analysis& a);
// Of the allocations with a rank-dependent size, the communicator creations that run before them
// on every path (Buffer::after_creations): the converted runtime agrees on one size over those.
void mark_allocations_after_creations(const std::vector<Token>& toks, const BufferFlow& flow,
                                      const TokenIndex& token_at, Analysis& a);
// NCCL calls that run while a stream is captured into a CUDA graph (between cudaStreamBeginCapture
// and its cudaStreamEndCapture, or in a function called there): their Call::captured_line.
void mark_captured_calls(const BufferFlow& flow, const TokenIndex& token_at, Analysis& a);
// Buffers the program registers itself: Buffer::window_line for a window on the whole buffer
// (ncclCommWindowRegister(comm, buf, ...): the runtime's own window serves it, and the program's
// call gets that handle), Buffer::registered_line for a window from inside the buffer, so that the
// rules never register it a second time (ncclCommRegister is a local registration, not a window:
// not recorded).
// And those it shares through CUDA IPC (cudaIpcGetMemHandle, a custom all-reduce's workspace):
// Buffer::ipc_exported_line, since legacy IPC refuses ncclMemAlloc (cuMem) memory.
void mark_program_registered_buffers(const BufferFlow& flow, const TokenIndex& token_at, Analysis& a);
// Wrappers that open and close a group (`void start_coalescing() { ncclGroupStart(); }` and its
// `end_coalescing()`), called in pairs: each call of the opening one followed in its block by one of
// the closing one, each a statement of its own. Such a pair is a Group whose members run between
// the paired calls (Group::regions); a bracket not paired that way stays a GroupBracket.
void pair_group_wrappers(const BufferFlow& flow, const std::vector<Token>& toks, const TokenIndex& token_at,
                         const std::vector<std::size_t>& collectives, Analysis& a);
// Calls that run inside an ncclGroupStart/End through the functions called there (a helper or a
// lambda holding the ncclSend) are members of that group, as if written in it; one reached from
// several groups, or through a function also used as a value (called through a pointer, maybe
// inside a group), keeps the reason and stays host NCCL.
void attach_reached_group_members(const BufferFlow& flow, const TokenIndex& token_at,
                                  const std::vector<std::size_t>& collectives, Analysis& a);
// Calls that may run inside a group opened by a bracket its function leaves unpaired (a scope
// guard's constructor, a group_begin() wrapper: Analysis::group_brackets): those in the bracket's
// function, those after a call of an opening one up to the end of that call's block (where a guard
// is destroyed) or an earlier call of a closing one there, and those of every function reached
// from either keep the reason and stay host NCCL, as the group's members are not followed.
void hold_calls_near_group_brackets(const BufferFlow& flow, const std::vector<Token>& toks, const TokenIndex& token_at,
                                    const std::vector<std::size_t>& collectives, Analysis& a);
// Communicator creations, and the single-process multi-GPU form (ncclCommInitAll).
void collect_comm_inits(const BufferFlow& flow, const std::vector<Token>& toks, const TokenIndex& token_at,
                        Analysis& a);
// A communicator named by a bare field name in a member function (`comm`, i.e. this->comm) is
// the one created as that field (`ncclCommInitRank(&c.comm, ...)`) when exactly one creation
// has that field name.
void match_member_communicators(Analysis& a);

// A device allocation the analyzer records (its buffer keyed by the target), and a release.
bool allocates(const Call& c);
bool releases(const Call& c);
// Several ranks in one process through threads: a communicator created in a function (or lambda)
// that a thread runs (std::thread/jthread, emplace_back into threads, pthread_create, std::async),
// or under `#pragma omp parallel`. A rank per thread converts (Analysis::rank_per_thread) when every
// creation, group, window registration and data movement runs in the threads; otherwise, and when
// threads call NCCL on communicators one thread made for every GPU, the file is left untouched.
void detect_threaded_ranks(const std::vector<Token>& toks, const std::vector<Token>& all, const BufferFlow& flow,
                           const TokenIndex& token_at, Analysis& a);
// NCCL collectives named without a call (taken by address, through a function pointer).
void list_address_taken(const std::vector<Token>& toks, Analysis& a);
// A UserError for an annotation that names no allocated buffer.
void check_annotations(const std::string& file, const Analysis& a);
// Order edges: consecutive work on one stream, event record -> wait, buffers shared across streams.
void order_calls(Analysis& a);
// Each call's statement range, for tools that insert code after a call (diagnostic_rerun.hpp).
void find_statement_ranges(const std::vector<Token>& toks, const TokenIndex& token_at, Analysis& a);
// Calls in header code (HeaderSpan): Call::header set, their byte ranges moved to the #include
// (nothing rewrites them), and the buffers a release there frees marked (Buffer::freed_in_header;
// every buffer where its pointer is not followed, when the function holding it is called).
void mark_header_calls(const std::vector<HeaderSpan>& spans, const std::vector<Token>& toks, const BufferFlow& flow,
                       const TokenIndex& token_at, Analysis& a);
// Calls read in a macro's expansion placed at its use: their byte ranges and statement become the
// use's, with Call::macro_use and the offset of the call in the expansion.
void place_macro_calls(const std::vector<Token>& toks, const TokenIndex& token_at, Analysis& a);

}  // namespace braid::convert
