#include "braid/program/constraint.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <memory>
#include <optional>

namespace braid {

namespace {

enum class TokKind { Int, Name, String, Op, End };
struct Token {
  TokKind kind = TokKind::End;
  std::string text;
  std::int64_t number = 0;
  std::size_t pos = 0;
};

// Integer, or enum/string value compared by text. Booleans are the integers 0 and 1.
struct Value {
  bool is_symbol = false;
  std::int64_t number = 0;
  std::string symbol;
};

struct EvalError {
  std::string message;
};

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// 'x' and "x" name the same value.
std::string normalize_string_literal(std::string_view s) {
  if (s.size() >= 2 && (s.front() == '\'' || s.front() == '"') && s.back() == s.front())
    return "\"" + std::string(s.substr(1, s.size() - 2)) + "\"";
  return std::string(s);
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t v = 0;
  const char* first = s.data();
  const char* last = s.data() + s.size();
  if (first != last && *first == '+') ++first;
  auto [ptr, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || ptr != last || first == last) return std::nullopt;
  return v;
}

std::vector<Token> tokenize(std::string_view s) {
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    Token t;
    t.pos = i;
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      while (j < s.size() && is_name_char(s[j])) ++j;
      auto v = parse_int(s.substr(i, j - i));
      if (!v) throw EvalError{"bad number '" + std::string(s.substr(i, j - i)) + "'"};
      t.kind = TokKind::Int;
      t.number = *v;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (is_name_start(c)) {
      // Qualified names (Strategy::Serial, Algo.RING) are one token.
      std::size_t j = i;
      while (j < s.size()) {
        if (is_name_char(s[j])) {
          ++j;
        } else if (s.compare(j, 2, "::") == 0 && j + 2 < s.size() && is_name_start(s[j + 2])) {
          j += 2;
        } else if (s[j] == '.' && j + 1 < s.size() && is_name_start(s[j + 1])) {
          ++j;
        } else {
          break;
        }
      }
      t.kind = TokKind::Name;
      t.text = std::string(s.substr(i, j - i));
      i = j;
    } else if (c == '"' || c == '\'') {
      std::size_t j = s.find(c, i + 1);
      if (j == std::string_view::npos) throw EvalError{"unterminated string literal"};
      t.kind = TokKind::String;
      t.text = normalize_string_literal(s.substr(i, j - i + 1));
      i = j + 1;
    } else {
      static const char* const ops[] = {"==", "!=", "<=", ">=", "&&", "||", "+", "-", "*", "/",
                                        "%",  "<",  ">",  "!",  "(",  ")"};
      bool found = false;
      for (const char* op : ops) {
        std::string_view o(op);
        if (s.compare(i, o.size(), o) == 0) {
          t.kind = TokKind::Op;
          t.text = std::string(o);
          i += o.size();
          found = true;
          break;
        }
      }
      if (!found) throw EvalError{std::string("unexpected character '") + c + "'"};
    }
    out.push_back(std::move(t));
  }
  Token end;
  end.pos = s.size();
  out.push_back(end);
  return out;
}

struct Node {
  enum Kind { Literal, Ref, Unary, Binary } kind = Literal;
  std::string op;    // Unary/Binary operator, canonical C spelling
  Value literal;     // Literal
  std::string name;  // Ref
  std::unique_ptr<Node> lhs, rhs;
};
using NodePtr = std::unique_ptr<Node>;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  NodePtr parse_all() {
    if (peek().kind == TokKind::End) throw EvalError{"empty expression"};
    NodePtr n = parse_or();
    if (peek().kind != TokKind::End)
      throw EvalError{"unexpected '" + peek().text + "' at column " + std::to_string(peek().pos + 1)};
    return n;
  }

 private:
  const Token& peek() const { return toks_[pos_]; }
  bool accept_op(std::string_view op) {
    if (peek().kind == TokKind::Op && peek().text == op) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool accept_word(std::string_view w) {
    if (peek().kind == TokKind::Name && peek().text == w) {
      ++pos_;
      return true;
    }
    return false;
  }
  static NodePtr binary(std::string op, NodePtr l, NodePtr r) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Binary;
    n->op = std::move(op);
    n->lhs = std::move(l);
    n->rhs = std::move(r);
    return n;
  }
  static NodePtr unary(std::string op, NodePtr operand) {
    auto n = std::make_unique<Node>();
    n->kind = Node::Unary;
    n->op = std::move(op);
    n->lhs = std::move(operand);
    return n;
  }

  NodePtr parse_or() {
    NodePtr l = parse_and();
    while (accept_op("||") || accept_word("or")) l = binary("||", std::move(l), parse_and());
    return l;
  }
  NodePtr parse_and() {
    NodePtr l = parse_not();
    while (accept_op("&&") || accept_word("and")) l = binary("&&", std::move(l), parse_not());
    return l;
  }
  // Python's `not` binds looser than comparisons; C's `!` is handled in parse_unary.
  NodePtr parse_not() {
    if (accept_word("not")) return unary("!", parse_not());
    return parse_cmp();
  }
  NodePtr parse_cmp() {
    NodePtr l = parse_add();
    for (std::string_view op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (accept_op(op)) {
        NodePtr r = parse_add();
        if (peek().kind == TokKind::Op &&
            (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
             peek().text == "<=" || peek().text == ">="))
          throw EvalError{"chained comparison at column " + std::to_string(peek().pos + 1) +
                          ": use && between comparisons"};
        return binary(std::string(op), std::move(l), std::move(r));
      }
    }
    return l;
  }
  NodePtr parse_add() {
    NodePtr l = parse_mul();
    while (true) {
      if (accept_op("+")) {
        l = binary("+", std::move(l), parse_mul());
      } else if (accept_op("-")) {
        l = binary("-", std::move(l), parse_mul());
      } else {
        return l;
      }
    }
  }
  NodePtr parse_mul() {
    NodePtr l = parse_unary();
    while (true) {
      std::string op;
      if (accept_op("*")) op = "*";
      else if (accept_op("/")) op = "/";
      else if (accept_op("%")) op = "%";
      else return l;
      l = binary(op, std::move(l), parse_unary());
    }
  }
  NodePtr parse_unary() {
    if (accept_op("-")) return unary("-", parse_unary());
    if (accept_op("+")) return parse_unary();
    if (accept_op("!")) return unary("!", parse_unary());
    return parse_primary();
  }
  NodePtr parse_primary() {
    const Token& t = peek();
    auto n = std::make_unique<Node>();
    switch (t.kind) {
      case TokKind::Int:
        n->kind = Node::Literal;
        n->literal.number = t.number;
        ++pos_;
        return n;
      case TokKind::String:
        n->kind = Node::Literal;
        n->literal.is_symbol = true;
        n->literal.symbol = t.text;
        ++pos_;
        return n;
      case TokKind::Name:
        if (t.text == "and" || t.text == "or" || t.text == "not")
          throw EvalError{"'" + t.text + "' needs an operand before it at column " + std::to_string(t.pos + 1)};
        n->kind = Node::Ref;
        n->name = t.text;
        ++pos_;
        return n;
      case TokKind::Op:
        if (t.text == "(") {
          ++pos_;
          NodePtr inner = parse_or();
          if (!accept_op(")")) throw EvalError{"missing ')' at column " + std::to_string(peek().pos + 1)};
          return inner;
        }
        throw EvalError{"unexpected '" + t.text + "' at column " + std::to_string(t.pos + 1)};
      case TokKind::End:
        break;
    }
    throw EvalError{"expression ends too early"};
  }

  std::vector<Token> toks_;
  std::size_t pos_ = 0;
};

Value value_of_text(std::string_view text) {
  Value v;
  if (auto n = parse_int(text)) {
    v.number = *n;
  } else if (text == "true" || text == "True") {
    v.number = 1;
  } else if (text == "false" || text == "False") {
    v.number = 0;
  } else {
    v.is_symbol = true;
    v.symbol = normalize_string_literal(text);
  }
  return v;
}

class Evaluator {
 public:
  Evaluator(const std::map<std::string, std::string>& values, const std::vector<std::string>& symbols)
      : values_(values), symbols_(symbols) {}

  Value eval(const Node& n) const {
    switch (n.kind) {
      case Node::Literal:
        return n.literal;
      case Node::Ref:
        return resolve(n.name);
      case Node::Unary: {
        Value v = number(eval(*n.lhs), n.op);
        v.number = n.op == "-" ? -v.number : (v.number == 0 ? 1 : 0);
        return v;
      }
      case Node::Binary:
        return binary(n);
    }
    throw EvalError{"bad expression"};
  }

 private:
  Value resolve(const std::string& name) const {
    if (auto it = values_.find(name); it != values_.end()) return value_of_text(it->second);
    if (name == "true" || name == "True") return value_of_text("true");
    if (name == "false" || name == "False") return value_of_text("false");
    bool qualified = name.find("::") != std::string::npos || name.find('.') != std::string::npos;
    if (qualified || std::find(symbols_.begin(), symbols_.end(), name) != symbols_.end()) {
      Value v;
      v.is_symbol = true;
      v.symbol = name;
      return v;
    }
    throw EvalError{"unknown name '" + name + "' (not a knob)"};
  }

  static Value number(Value v, const std::string& op) {
    if (v.is_symbol) throw EvalError{"operator " + op + " needs a number, got " + v.symbol};
    return v;
  }

  Value binary(const Node& n) const {
    const std::string& op = n.op;
    Value out;
    if (op == "&&" || op == "||") {
      Value l = number(eval(*n.lhs), op);
      if (op == "&&" && l.number == 0) return out;
      if (op == "||" && l.number != 0) {
        out.number = 1;
        return out;
      }
      out.number = number(eval(*n.rhs), op).number != 0 ? 1 : 0;
      return out;
    }
    Value l = eval(*n.lhs);
    Value r = eval(*n.rhs);
    if (op == "==" || op == "!=") {
      if (l.is_symbol != r.is_symbol) {
        const Value& sym = l.is_symbol ? l : r;
        const Value& num = l.is_symbol ? r : l;
        throw EvalError{"cannot compare " + sym.symbol + " with the number " + std::to_string(num.number)};
      }
      bool eq = l.is_symbol ? l.symbol == r.symbol : l.number == r.number;
      out.number = (op == "==") == eq ? 1 : 0;
      return out;
    }
    std::int64_t a = number(l, op).number;
    std::int64_t b = number(r, op).number;
    if (op == "<") out.number = a < b;
    else if (op == "<=") out.number = a <= b;
    else if (op == ">") out.number = a > b;
    else if (op == ">=") out.number = a >= b;
    else if (op == "+") out.number = a + b;
    else if (op == "-") out.number = a - b;
    else if (op == "*") out.number = a * b;
    else if (op == "/" || op == "%") {
      if (b == 0) throw EvalError{"division by zero"};
      out.number = op == "/" ? a / b : a % b;
    } else {
      throw EvalError{"unknown operator " + op};
    }
    return out;
  }

  const std::map<std::string, std::string>& values_;
  const std::vector<std::string>& symbols_;
};

}  // namespace

ConstraintCheck evaluate_constraint(std::string_view expr, const std::map<std::string, std::string>& values,
                                    const std::vector<std::string>& symbols) {
  ConstraintCheck check;
  try {
    Parser parser(tokenize(expr));
    NodePtr root = parser.parse_all();
    Value v = Evaluator(values, symbols).eval(*root);
    if (v.is_symbol) throw EvalError{"expression is the value " + v.symbol + ", not a condition"};
    check.holds = v.number != 0;
  } catch (const EvalError& e) {
    check.error = e.message;
  }
  return check;
}

}  // namespace braid
