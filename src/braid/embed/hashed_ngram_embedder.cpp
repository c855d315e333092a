// Offline embedder: a lexer-lite tokenizer for C/C++/CUDA feeding hashed token n-grams
// (feature hashing with a sign bit, as in Weinberger et al. 2009), so inner products of
// the sparse n-gram counts are preserved in expectation in a small dense vector.
#include <xxhash.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>

#include "braid/embed/embedder.hpp"
#include "braid/util/error.hpp"

namespace braid {

namespace {

constexpr int kMaxN = 3;

bool is_ident_start(unsigned char c) { return std::isalpha(c) || c == '_'; }
bool is_ident_char(unsigned char c) { return std::isalnum(c) || c == '_'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

// Longest operators first so that "<<=" is one token, not "<<" and "=".
constexpr std::array<std::string_view, 28> kOperators = {
    "<<=", ">>=", "...", "->*", "<=>", "::", "->", "++", "--", "<<", ">>", "<=", ">=", "==",
    "!=",  "&&",  "||",  "+=",  "-=",  "*=", "/=", "%=", "&=", "|=", "^=", ".*", "##", "[["};

// Calls `emit(token)` for each token of `code`: identifiers and keywords, numbers, string and
// character literals (whole), operators, other punctuation. Comments and whitespace are
// skipped, so reformatting or re-commenting a program does not change its embedding.
template <typename Emit>
void tokenize(std::string_view code, Emit&& emit) {
  const std::size_t n = code.size();
  std::size_t i = 0;
  auto at = [&](std::size_t k) -> unsigned char { return k < n ? static_cast<unsigned char>(code[k]) : 0; };
  while (i < n) {
    unsigned char c = at(i);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') {
      ++i;
      continue;
    }
    if (c == '/' && at(i + 1) == '/') {
      // A backslash at the end of a line continues a // comment, as in the preprocessor.
      while (i < n && !(code[i] == '\n' && (i == 0 || code[i - 1] != '\\'))) ++i;
      continue;
    }
    if (c == '/' && at(i + 1) == '*') {
      std::size_t end = code.find("*/", i + 2);
      i = end == std::string_view::npos ? n : end + 2;
      continue;
    }
    std::size_t start = i;
    // Raw string literal R"delim( ... )delim", possibly with an encoding prefix.
    if (c == 'R' || ((c == 'u' || c == 'U' || c == 'L') && (at(i + 1) == 'R' || (at(i + 1) == '8' && at(i + 2) == 'R')))) {
      std::size_t r = code.find('R', i);
      if (r != std::string_view::npos && r <= i + 2 && at(r + 1) == '"') {
        std::size_t paren = code.find('(', r + 2);
        if (paren != std::string_view::npos && paren - (r + 2) <= 16) {
          std::string closing = ")" + std::string(code.substr(r + 2, paren - (r + 2))) + "\"";
          std::size_t end = code.find(closing, paren + 1);
          i = end == std::string_view::npos ? n : end + closing.size();
          emit(code.substr(start, i - start));
          continue;
        }
      }
    }
    if (is_ident_start(c)) {
      while (i < n && is_ident_char(at(i))) ++i;
      // Encoding-prefixed literals (u8"..", L'x') stay one token with their prefix.
      if (i < n && (code[i] == '"' || code[i] == '\'') && i - start <= 2) {
        c = at(i);
      } else {
        emit(code.substr(start, i - start));
        continue;
      }
    }
    if (c == '"' || c == '\'') {
      const char quote = static_cast<char>(c);
      ++i;
      while (i < n && code[i] != quote && code[i] != '\n') {
        i += code[i] == '\\' ? 2 : 1;
      }
      i = i < n ? i + 1 : n;
      emit(code.substr(start, i - start));
      continue;
    }
    if (is_digit(c) || (c == '.' && is_digit(at(i + 1)))) {
      // pp-number: digits, letters, '.', digit separators, and signs after an exponent.
      while (i < n) {
        unsigned char d = at(i);
        if (is_ident_char(d) || d == '.' || d == '\'') {
          ++i;
        } else if ((d == '+' || d == '-') &&
                   (at(i - 1) == 'e' || at(i - 1) == 'E' || at(i - 1) == 'p' || at(i - 1) == 'P')) {
          ++i;
        } else {
          break;
        }
      }
      emit(code.substr(start, i - start));
      continue;
    }
    if (c >= 0x80) {
      // A run of non-ASCII bytes (UTF-8 text in identifiers or stray symbols) is one token.
      while (i < n && at(i) >= 0x80) ++i;
      emit(code.substr(start, i - start));
      continue;
    }
    std::size_t length = 1;
    for (std::string_view op : kOperators) {
      if (op[0] == static_cast<char>(c) && code.substr(i, op.size()) == op) {
        length = op.size();
        break;
      }
    }
    i += length;
    emit(code.substr(start, length));
  }
}

class HashedNgramEmbedder final : public Embedder {
 public:
  explicit HashedNgramEmbedder(int dims) : dims_(dims) {
    if (dims <= 0) throw UserError("", "embedding dimensions must be positive, got " + std::to_string(dims));
  }

  std::vector<float> embed(std::string_view code) override {
    // Counts stay exact in float (integers below 2^24).
    std::vector<float> sums(static_cast<std::size_t>(dims_), 0.0f);
    // The last kMaxN token hashes; an n-gram's feature is the hash of its tokens' hashes,
    // seeded by n so that a unigram and a bigram never share a feature.
    std::array<std::uint64_t, kMaxN> window{};
    int filled = 0;
    auto add_feature = [&](std::uint64_t h) {
      // Low bits pick the bucket, the top bit the sign: independent enough for xxh3.
      std::size_t bucket = static_cast<std::size_t>(h % static_cast<std::uint64_t>(dims_));
      sums[bucket] += (h >> 63) ? -1.0f : 1.0f;
    };
    tokenize(code, [&](std::string_view token) {
      window[0] = window[1];
      window[1] = window[2];
      window[2] = XXH3_64bits(token.data(), token.size());
      if (filled < kMaxN) ++filled;
      for (int len = 1; len <= filled; ++len) {
        const std::uint64_t* gram = window.data() + (kMaxN - len);
        add_feature(XXH3_64bits_withSeed(gram, sizeof(std::uint64_t) * static_cast<std::size_t>(len),
                                         static_cast<std::uint64_t>(len)));
      }
    });
    double norm2 = 0.0;
    for (float v : sums) norm2 += double(v) * v;
    // Code without any token (empty, comments only) has no direction: the zero vector,
    // whose cosine with anything is 0.
    if (norm2 == 0.0) return sums;
    const double scale = 1.0 / std::sqrt(norm2);
    for (float& v : sums) v = static_cast<float>(v * scale);
    return sums;
  }

  std::string name() const override { return "hashed-ngram-" + std::to_string(dims_); }

 private:
  int dims_;
};

}  // namespace

std::unique_ptr<Embedder> make_hashed_ngram_embedder(int dims) {
  return std::make_unique<HashedNgramEmbedder>(dims);
}

float cosine(const std::vector<float>& a, const std::vector<float>& b) {
  // Vectors of different lengths come from different embedders: unrelated, not an error.
  if (a.size() != b.size() || a.empty()) return 0.0f;
  // Eight independent partial sums let the compiler keep them in vector registers without
  // reassociating floating point; norms are computed too, so unnormalized inputs also work.
  constexpr std::size_t kLanes = 8;
  float dot[kLanes] = {}, na[kLanes] = {}, nb[kLanes] = {};
  const std::size_t n = a.size(), body = n - n % kLanes;
  const float* pa = a.data();
  const float* pb = b.data();
  for (std::size_t i = 0; i < body; i += kLanes) {
    for (std::size_t l = 0; l < kLanes; ++l) {
      dot[l] += pa[i + l] * pb[i + l];
      na[l] += pa[i + l] * pa[i + l];
      nb[l] += pb[i + l] * pb[i + l];
    }
  }
  float d = 0, x = 0, y = 0;
  for (std::size_t l = 0; l < kLanes; ++l) {
    d += dot[l];
    x += na[l];
    y += nb[l];
  }
  for (std::size_t i = body; i < n; ++i) {
    d += pa[i] * pb[i];
    x += pa[i] * pa[i];
    y += pb[i] * pb[i];
  }
  if (x == 0.0f || y == 0.0f) return 0.0f;
  float c = d / std::sqrt(x * y);
  return c > 1.0f ? 1.0f : (c < -1.0f ? -1.0f : c);
}

}  // namespace braid
