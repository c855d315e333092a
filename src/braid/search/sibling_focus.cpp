#include "braid/search/sibling_focus.hpp"

#include <algorithm>
#include <set>

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
                                              const std::vector<std::string>& taken,
                                              const std::vector<std::string>& keys) {
  while (!held_.empty() && held_.begin()->first <= g - window_) held_.erase(held_.begin());
  const std::string parent = hash_hex(parent_code);
  const int shares = int(std::min<std::int64_t>(window_, std::int64_t(changes.size())));
  if (shares <= 0) {
    held_[g] = Held{parent, -1, true, {}};
    return {};
  }
  // The latest generation of the window holding each share for this parent text (-1: none).
  std::vector<std::int64_t> last(std::size_t(shares), -1);
  for (const auto& [other, h] : held_)
    if (other < g && h.parent == parent && h.share >= 0 && h.share < shares) last[std::size_t(h.share)] = other;
  auto free_in = [&](int s) {
    int n = 0;
    for (const auto& change : focus_share(changes, s, shares))
      n += std::find(taken.begin(), taken.end(), change) == taken.end() ? 1 : 0;
    return n;
  };
  // The first share nobody within the window holds, counting from g mod shares (with a change
  // left, when asked); -1 when none is.
  auto first_unheld = [&](bool with_changes_left) {
    for (int i = 0; i < shares; ++i) {
      const int s = int((g + i) % shares);
      if (last[std::size_t(s)] < 0 && (!with_changes_left || free_in(s) > 0)) return s;
    }
    return -1;
  };
  // The held share with the most changes left (the one held longest ago among equals); -1 when
  // none has any: sharing it beats asking with no list at all.
  auto held_with_most_left = [&] {
    int best = -1, most = 0;
    for (int s = 0; s < shares; ++s) {
      if (last[std::size_t(s)] < 0) continue;
      const int n = free_in(s);
      if (n > most || (n == most && n > 0 && last[std::size_t(s)] < last[std::size_t(best)])) best = s, most = n;
    }
    return best;
  };
  int chosen = first_unheld(true);
  if (chosen < 0) chosen = held_with_most_left();
  if (chosen < 0) chosen = first_unheld(false);
  if (chosen < 0)  // every share is held: the one held longest ago
    chosen = int(std::min_element(last.begin(), last.end()) - last.begin());
  // A share held already is listed from a later start for each further holder, so a model that
  // takes the first change of its list does not repeat an in-flight sibling's.
  int holders = 0;
  for (const auto& [other, h] : held_)
    if (other < g && h.parent == parent && h.share == chosen) ++holders;
  // The vectors other parents' siblings within the window were given.
  std::set<std::string> elsewhere;
  for (const auto& [other, h] : held_)
    if (other < g && h.parent != parent) elsewhere.insert(h.keys.begin(), h.keys.end());
  const auto key_of = [&](const std::string& change) -> const std::string* {
    if (keys.size() != changes.size()) return nullptr;
    const auto at = std::find(changes.begin(), changes.end(), change);
    return at == changes.end() ? nullptr : &keys[std::size_t(at - changes.begin())];
  };
  std::vector<std::string> left, spent;
  for (auto& change : focus_share(changes, chosen, shares)) {
    const std::string* key = key_of(change);
    if (key != nullptr && elsewhere.count(*key)) continue;
    (std::find(taken.begin(), taken.end(), change) == taken.end() ? left : spent).push_back(std::move(change));
  }
  if (!left.empty())
    std::rotate(left.begin(), left.begin() + std::ptrdiff_t(std::size_t(holders) % left.size()), left.end());
  Held held{parent, chosen, std::size_t(holders) >= left.size(), {}};
  for (const auto& change : left)
    if (const std::string* key = key_of(change)) held.keys.push_back(*key);
  held_[g] = std::move(held);
  left.insert(left.end(), spent.begin(), spent.end());
  return left;
}

bool SiblingFocus::claimed(std::int64_t g) const {
  auto it = held_.find(g);
  return it != held_.end() && it->second.claimed;
}

int SiblingFocus::share_of(std::int64_t g) const {
  auto it = held_.find(g);
  return it == held_.end() ? -1 : it->second.share;
}

}  // namespace braid
