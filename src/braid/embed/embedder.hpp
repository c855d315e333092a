// Embedder: code -> unit-length vector, for the novelty filter and clustering.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

class Embedder {
 public:
  virtual ~Embedder() = default;
  virtual std::vector<float> embed(std::string_view code) = 0;  // L2-normalized
  virtual std::string name() const = 0;
};

// Offline default: hashed token n-grams (identifiers, numbers, punctuation; comments and
// whitespace ignored), n = 1..3, into `dims` buckets with signed hashing, L2-normalized.
std::unique_ptr<Embedder> make_hashed_ngram_embedder(int dims = 512);

float cosine(const std::vector<float>& a, const std::vector<float>& b);  // dot of unit vectors

}  // namespace braid
