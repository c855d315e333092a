// The program's own headers whose code calls NCCL, allocates or frees, written into the file in
// place of their #include, so that a collective in a helper of "comm.h" (`inline void
// allreduce_grads(...)`, the usual shape of a multi-file program) converts like one written in the
// file, and braid still writes one file. Analysed with SourceContext::inlined, the text keeps the
// user's line numbers.
#pragma once
#include <string>
#include <vector>

#include "braid/convert/analyzer.hpp"
#include "braid/convert/lexer.hpp"

namespace braid::convert {

struct InlinedSource {
  std::string text;                    // the file with those headers written in
  std::vector<InlinedHeader> headers;  // where each sits in text (for SourceContext::inlined)
};

// `source` (named `file`; its folder is searched first) with each quoted header whose code, or a
// quoted header it includes, calls what the rules follow written in at its first #include
// (between two braid comment lines; a later #include of it becomes a comment on the same line).
// In a written header: `#pragma once` becomes a comment, and a quoted include of a header that
// stays a file is renamed relative to the file's folder when it was found beside the header.
// Unchanged for braid's own workloads (an include of "braid/...") and text that does not lex.
InlinedSource inline_headers(const std::string& file, const std::string& source, const SourceContext& context);

// The context analyze() needs for text from inline_headers.
SourceContext with_inlined(SourceContext context, const InlinedSource& in);

// Where the converted primitives must be declared at the latest in text from inline_headers: before
// the first written header (its code may call them), outside any braces around its #include
// (`extern "C" {`, a namespace); text.size() when no header was written.
std::size_t before_written_headers(const std::string& text, const std::vector<InlinedHeader>& headers);

// For analyze(), on text from inline_headers: tokens given the user's line numbers (a block's take
// its #include's line; those after it lose the lines it added), and each call in a block named by
// where it was written (Call::inlined_from, "tp_serving.h:48").
void keep_user_lines(std::vector<Token>& tokens, const std::vector<InlinedHeader>& headers);
void name_inlined_calls(const std::string& text, const std::vector<InlinedHeader>& headers, Analysis& a);

}  // namespace braid::convert
