// unified_diff (patch.hpp): a common prefix and suffix, an LCS on the middle, hunks with context.
#include <algorithm>
#include <cstdint>
#include <utility>

#include "braid/program/patch.hpp"
#include "braid/program/patch_detail.hpp"

namespace braid {

using program_detail::lines_of;

std::string unified_diff(std::string_view before, std::string_view after, int context) {
  std::vector<std::string> a = lines_of(before), b = lines_of(after);
  if (a == b) return {};
  context = std::max(context, 0);
  // Common prefix and suffix first; LCS on the middle (a full rewrite when it is too large).
  std::size_t prefix = 0;
  while (prefix < a.size() && prefix < b.size() && a[prefix] == b[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < a.size() - prefix && suffix < b.size() - prefix &&
         a[a.size() - 1 - suffix] == b[b.size() - 1 - suffix])
    ++suffix;
  std::size_t n = a.size() - prefix - suffix, m = b.size() - prefix - suffix;
  enum Op : char { Keep = ' ', Del = '-', Add = '+' };
  std::vector<std::pair<Op, std::size_t>> script;  // index into a (Keep/Del) or b (Add)
  for (std::size_t i = 0; i < prefix; ++i) script.emplace_back(Keep, i);
  if (n * m <= 4'000'000) {
    std::vector<std::uint32_t> lcs((n + 1) * (m + 1), 0);
    auto at = [&](std::size_t i, std::size_t j) -> std::uint32_t& { return lcs[i * (m + 1) + j]; };
    for (std::size_t i = n; i-- > 0;)
      for (std::size_t j = m; j-- > 0;)
        at(i, j) = a[prefix + i] == b[prefix + j] ? at(i + 1, j + 1) + 1 : std::max(at(i + 1, j), at(i, j + 1));
    std::size_t i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && a[prefix + i] == b[prefix + j]) {
        script.emplace_back(Keep, prefix + i);
        ++i;
        ++j;
      } else if (j < m && (i == n || at(i, j + 1) > at(i + 1, j))) {
        script.emplace_back(Add, prefix + j);
        ++j;
      } else {
        script.emplace_back(Del, prefix + i);
        ++i;
      }
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) script.emplace_back(Del, prefix + i);
    for (std::size_t j = 0; j < m; ++j) script.emplace_back(Add, prefix + j);
  }
  for (std::size_t i = 0; i < suffix; ++i) script.emplace_back(Keep, a.size() - suffix + i);

  // Line numbers before each script entry, to label hunks.
  std::vector<std::size_t> a_line(script.size() + 1), b_line(script.size() + 1);
  for (std::size_t k = 0, x = 0, y = 0; k <= script.size(); ++k) {
    a_line[k] = x;
    b_line[k] = y;
    if (k == script.size()) break;
    if (script[k].first != Add) ++x;
    if (script[k].first != Del) ++y;
  }
  std::string out = "--- parent\n+++ child\n";
  const std::size_t ctx = static_cast<std::size_t>(context);
  std::size_t k = 0;
  while (k < script.size()) {
    while (k < script.size() && script[k].first == Keep) ++k;
    if (k == script.size()) break;
    std::size_t start = k >= ctx ? k - ctx : 0;
    // Extend the hunk while the next change is within 2*context kept lines.
    std::size_t end = k;
    while (true) {
      while (end < script.size() && script[end].first != Keep) ++end;
      std::size_t next = end;
      while (next < script.size() && script[next].first == Keep) ++next;
      if (next < script.size() && next - end <= 2 * ctx) {
        end = next;
        continue;
      }
      end = std::min(script.size(), end + ctx);
      break;
    }
    std::size_t a_count = a_line[end] - a_line[start], b_count = b_line[end] - b_line[start];
    out += "@@ -" + std::to_string(a_count ? a_line[start] + 1 : a_line[start]) + "," + std::to_string(a_count) + " +" +
           std::to_string(b_count ? b_line[start] + 1 : b_line[start]) + "," + std::to_string(b_count) + " @@\n";
    for (std::size_t s = start; s < end; ++s) {
      const auto& [op, idx] = script[s];
      out += static_cast<char>(op);
      out += op == Add ? b[idx] : a[idx];
      out += "\n";
    }
    k = end;
  }
  return out;
}

}  // namespace braid
