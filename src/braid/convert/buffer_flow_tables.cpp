// BufferFlow (buffer_flow.hpp) on tables of pointers to fields, as llm.c points its activations into
// one allocation: `fill_in_activation_sizes(&model->acts, model->acts_specs, ..)` fills entries
// `tensors[k] = TensorSpec{(void**)(&data->output), size, ..}` (the TENSOR_SPEC macro, read expanded),
// and `malloc_and_point_activations(model->acts_specs)` stores through each, `*(tensors[i].ptr) = it;`,
// with `it` walking its cudaMalloc'd block. Each entry's field is then written with the store's value.
#include <fmt/format.h>

#include <algorithm>

#include "braid/convert/buffer_flow.hpp"
#include "braid/convert/buffer_flow_tokens.hpp"

namespace braid::convert {

using namespace flow_tokens;

namespace {

bool starts_statement(const std::vector<Token>& code, std::size_t k) {
  return k > 0 && (code[k - 1].text == ";" || code[k - 1].text == "{" || code[k - 1].text == "}");
}

}  // namespace

// `tensors [ k ] = [Type] { (void**)(&data->f) , .. } ;` at code token k (`tensors`).
void BufferFlow::record_table_entry(std::size_t k, const std::string& function, std::size_t end) {
  if (k + 1 >= end || code_[k].kind != TokenKind::Identifier || code_[k + 1].text != "[" || !starts_statement(code_, k))
    return;
  const std::size_t index_close = match_forward(code_, k + 1, end);
  std::size_t brace = index_close + 2;
  if (brace >= end || code_[index_close + 1].text != "=") return;
  std::string type;
  for (; brace < end && (code_[brace].kind == TokenKind::Identifier || code_[brace].text == "::"); ++brace)
    type = code_[brace].text;
  if (brace >= end || code_[brace].text != "{") return;
  const std::size_t brace_close = match_forward(code_, brace, end);
  if (brace_close + 1 >= end || code_[brace_close + 1].text != ";") return;
  const std::vector<std::string> values = split_top(code_, brace, brace_close);
  if (values.empty()) return;
  bool address = false;
  const std::vector<Token> first = strip(code_tokens(lex(values[0]).tokens), address);
  const std::string field = join(first, 0, first.size());
  if (!address || access_path(field, false).find('.') == std::string::npos) return;
  const std::vector<std::string> fields = type.empty() ? std::vector<std::string>{} : struct_fields(type);
  table_entries_.push_back(TableEntry{function, code_[k].text, fields.empty() ? "" : fields[0], field, k});
}

// `* ( tensors [ i ] . ptr ) = value ;` (or without the parentheses) at code token k (`tensors`).
void BufferFlow::record_table_store(std::size_t k, const std::string& function, std::size_t end) {
  if (k < 2 || k + 1 >= end || code_[k].kind != TokenKind::Identifier || code_[k + 1].text != "[") return;
  const bool parenthesised = code_[k - 1].text == "(" && code_[k - 2].text == "*";
  const std::size_t star = parenthesised ? k - 2 : k - 1;
  if (code_[star].text != "*" || !starts_statement(code_, star)) return;
  std::size_t j = match_forward(code_, k + 1, end) + 1;
  if (j + 1 >= end || code_[j].text != "." || code_[j + 1].kind != TokenKind::Identifier) return;
  const std::string member = code_[j + 1].text;
  j += 2;
  if (parenthesised) j = j < end && code_[j].text == ")" ? j + 1 : end;
  if (j >= end || code_[j].text != "=") return;
  const std::size_t e = statement_end(code_, j + 1, end);
  const std::string value = join(code_, j + 1, e);
  if (value == "NULL" || value == "nullptr" || value == "0") return;
  table_stores_.push_back(TableStore{function, code_[k].text, member, value, k});
}

void BufferFlow::link_table_stores() {
  if (table_entries_.empty() || table_stores_.empty()) return;
  // What each table name reaches, once per entry and per store: one table when two names reach a
  // common object (the caller's `model->acts_specs`), or, reaching none, are one name in one function.
  const auto reached = [&](const auto& sites) {
    std::vector<std::vector<std::string>> out;
    for (const auto& x : sites) out.push_back(resolve(x.table, x.function, x.token).paths);
    return out;
  };
  const std::vector<std::vector<std::string>> entry_paths = reached(table_entries_),
                                              store_paths = reached(table_stores_);
  std::vector<FieldWrite> writes;
  for (std::size_t i = 0; i < table_stores_.size(); ++i)
    for (std::size_t j = 0; j < table_entries_.size(); ++j) {
      const TableStore& s = table_stores_[i];
      const TableEntry& e = table_entries_[j];
      const std::vector<std::string>&a = store_paths[i], &b = entry_paths[j];
      const bool same = a.empty() || b.empty() ? s.table == e.table && s.function == e.function
                                               : std::find_first_of(a.begin(), a.end(), b.begin(), b.end()) != a.end();
      if (same && (e.member.empty() || e.member == s.member))
        writes.push_back(FieldWrite{s.function, e.field, s.value, s.token,
                                    fmt::format("*({}[i].{})", s.table, s.member), e.function, e.token});
    }
  field_writes_.insert(field_writes_.end(), writes.begin(), writes.end());
}

}  // namespace braid::convert
