// Distinct changes for concurrent sibling proposals (issue #25). Proposals for the same parent
// text whose generations are less than `window` apart (2 x max_parallel_proposals, the builder's
// sibling lag) are asked blind: neither prompt can name the other's answer. Each is therefore
// given its own share of the parent's one-knob changes to choose from ("focus"), dealt round
// robin over min(window, changes) shares, so two such siblings share no change while a share
// with changes left is free: generation g takes the first share, counting from g mod shares,
// that no earlier sibling within the window holds and that has a change not yet taken when g is
// prepared; else the held share with the most changes not yet taken (listed from a later start
// for each further holder); else the first share nobody holds, or the least recently held one.
// A share is claimed when its earlier holders are as many as its changes left; the builder then
// gives the generation a share of the parent's two-knob changes from a second SiblingFocus.
// A function of the generations' parents and what was evaluated when they were prepared, so a
// replay repeats it whatever the timing of the answers.
// Search thread only; generations are assigned in increasing order.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace braid {

// The changes of share `share` of `shares`: every change whose index is share mod shares.
std::vector<std::string> focus_share(const std::vector<std::string>& changes, int share, int shares);

class SiblingFocus {
 public:
  explicit SiblingFocus(std::int64_t window) : window_(window) {}
  // Generation g's share of `changes` (the parent's one-knob changes in a fixed order), its
  // parent text being `parent_code`, `taken` the changes already taken (listed last). Empty when
  // the parent has no change. With `keys` (the knob vector of each change), a change whose vector
  // is in the focus of a sibling of another parent within the window is left out: two parents can
  // reach one vector (a child's change undone is its parent's other change).
  std::vector<std::string> assign(std::int64_t g, const std::string& parent_code,
                                  const std::vector<std::string>& changes, const std::vector<std::string>& taken = {},
                                  const std::vector<std::string>& keys = {});
  // The share assign() gave generation g (-1: none, or out of the window by now).
  int share_of(std::int64_t g) const;
  // Whether the share assign() gave g has no change left beyond one for each earlier sibling
  // holding it (each likely takes one): g is better sent elsewhere (to two-knob changes).
  bool claimed(std::int64_t g) const;

 private:
  struct Held {
    std::string parent;  // hash of the parent text
    int share = -1;
    bool claimed = false;
    std::vector<std::string> keys;  // the knob vectors of the changes it was given (when known)
  };
  std::int64_t window_;
  std::map<std::int64_t, Held> held_;  // generations within the window of the latest one
};

}  // namespace braid
