#include "braid/search/sibling_focus.hpp"

#include <algorithm>

#include "braid/util/hash.hpp"

namespace braid {

std::vector<std::string> focus_share(const std::vector<std::string>& changes, int share, int shares) {
  std::vector<std::string> out;
  if (shares <= 0 || share < 0) return out;
  for (std::size_t i = std::size_t(share); i < changes.size(); i += std::size_t(shares)) out.push_back(changes[i]);
  return out;
}

std::vector<std::string> SiblingFocus::assign(std::int64_t g, const std::string& parent_code,
                                              const std::vector<std::string>& changes,
                                              const std::vector<std::string>& taken) {
  while (!held_.empty() && held_.begin()->first <= g - window_) held_.erase(held_.begin());
  const std::string parent = hash_hex(parent_code);
  const int shares = int(std::min<std::int64_t>(window_, std::int64_t(changes.size())));
  if (shares <= 0) {
    held_[g] = Held{parent, -1};
    return {};
  }
  // The latest generation of the window holding each share for this parent text (-1: none).
  std::vector<std::int64_t> last(std::size_t(shares), -1);
  for (const auto& [other, h] : held_)
    if (other < g && h.parent == parent && h.share >= 0 && h.share < shares) last[std::size_t(h.share)] = other;
  auto has_free = [&](int s) {
    for (const auto& change : focus_share(changes, s, shares))
      if (std::find(taken.begin(), taken.end(), change) == taken.end()) return true;
    return false;
  };
  int chosen = -1;
  for (bool need_free : {true, false})
    for (int i = 0; i < shares && chosen < 0; ++i) {
      const int s = int((g + i) % shares);
      if (last[std::size_t(s)] < 0 && (!need_free || has_free(s))) chosen = s;
    }
  if (chosen < 0)  // every share is held: the one held longest ago
    chosen = int(std::min_element(last.begin(), last.end()) - last.begin());
  held_[g] = Held{parent, chosen};
  return focus_share(changes, chosen, shares);
}

int SiblingFocus::share_of(std::int64_t g) const {
  auto it = held_.find(g);
  return it == held_.end() ? -1 : it->second.share;
}

}  // namespace braid
