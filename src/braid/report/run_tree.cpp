// RunReader's lineage views: the laid-out subtree around a candidate and the pages of a
// candidate's children. Kept apart from run_reader.cpp, which reads the run and lists it.
#include <algorithm>
#include <set>

#include "braid/report/run_reader.hpp"

namespace braid::report {

json RunReader::tree(const TreeQuery& q) {
  std::lock_guard lock(mutex_);
  refresh_locked();
  json out = {{"nodes", json::array()}, {"edges", json::array()}, {"focus", nullptr}, {"total", nodes_.size()}};
  if (nodes_.empty()) return out;
  std::optional<std::uint32_t> focus = q.focus.empty() ? best_index() : index_of(q.focus);
  if (!focus && q.focus.empty()) focus = 0;
  if (!focus) return out;
  out["focus"] = nodes_[*focus].id;

  // Walk up to the top ancestor shown; the path down to the focus is always kept.
  std::set<std::uint32_t> on_path = {*focus};
  std::uint32_t top = *focus;
  int up = 0;
  while (up < std::max(0, q.up) && nodes_[top].parent_index >= 0) {
    top = static_cast<std::uint32_t>(nodes_[top].parent_index);
    on_path.insert(top);
    ++up;
  }
  int max_depth = up + std::max(0, q.down);
  int max_children = std::clamp(q.max_children, 1, 64);
  std::size_t max_nodes = static_cast<std::size_t>(std::clamp(q.max_nodes, 1, 5000));

  struct Placed {
    std::uint32_t index;
    int depth;
    int parent_slot;  // index into `placed`, -1 for the top
    std::vector<int> kids;
    int hidden = 0;
    double y = 0;
  };
  std::vector<Placed> placed;
  placed.push_back({top, 0, -1, {}, 0, 0});
  // Breadth first so a node budget cuts the deepest levels, not a whole branch.
  for (std::size_t cursor = 0; cursor < placed.size(); ++cursor) {
    auto idx = placed[cursor].index;
    int depth = placed[cursor].depth;
    const auto& kids = nodes_[idx].children;
    if (depth >= max_depth) {
      placed[cursor].hidden = static_cast<int>(kids.size());
      continue;
    }
    std::vector<std::uint32_t> order(kids.begin(), kids.end());
    std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) {
      bool pa = on_path.count(a), pb = on_path.count(b);
      if (pa != pb) return pa;
      if (nodes_[a].correct != nodes_[b].correct) return nodes_[a].correct;
      return nodes_[a].score > nodes_[b].score;
    });
    int shown = 0;
    for (auto child : order) {
      if (shown >= max_children || placed.size() >= max_nodes) break;
      placed.push_back({child, depth + 1, static_cast<int>(cursor), {}, 0, 0});
      placed[cursor].kids.push_back(static_cast<int>(placed.size() - 1));
      ++shown;
    }
    placed[cursor].hidden = static_cast<int>(kids.size()) - shown;
  }
  // Layered layout: leaves take consecutive rows in depth-first order; a parent sits at the
  // middle of its children.
  double next_row = 0;
  std::vector<int> stack = {0};
  std::vector<int> post;
  std::vector<std::size_t> next_kid(placed.size(), 0);
  while (!stack.empty()) {
    int s = stack.back();
    auto& p = placed[static_cast<std::size_t>(s)];
    if (next_kid[static_cast<std::size_t>(s)] < p.kids.size()) {
      stack.push_back(p.kids[next_kid[static_cast<std::size_t>(s)]++]);
      continue;
    }
    stack.pop_back();
    if (p.kids.empty()) {
      p.y = next_row++;
    } else {
      p.y =
          (placed[static_cast<std::size_t>(p.kids.front())].y + placed[static_cast<std::size_t>(p.kids.back())].y) / 2;
    }
  }
  for (const auto& p : placed) {
    json n = node_json(nodes_[p.index]);
    n["x"] = p.depth;
    n["y"] = p.y;
    n["hidden"] = p.hidden;
    n["focus"] = p.index == *focus;
    n["has_parent"] = nodes_[p.index].parent_index >= 0;
    out["nodes"].push_back(std::move(n));
    if (p.parent_slot >= 0)
      out["edges"].push_back(
          {{"from", nodes_[placed[static_cast<std::size_t>(p.parent_slot)].index].id}, {"to", nodes_[p.index].id}});
  }
  out["rows"] = next_row;
  out["depth"] = max_depth;
  return out;
}

json RunReader::children(const std::string& id, int offset, int limit) {
  std::lock_guard lock(mutex_);
  refresh_locked();
  json out = {{"id", id}, {"total", 0}, {"items", json::array()}};
  auto i = index_of(id);
  if (!i) return out;
  auto kids = nodes_[*i].children;
  std::sort(kids.begin(), kids.end(), [&](auto a, auto b) {
    if (nodes_[a].correct != nodes_[b].correct) return nodes_[a].correct;
    return nodes_[a].score > nodes_[b].score;
  });
  out["total"] = kids.size();
  std::size_t start = static_cast<std::size_t>(std::max(0, offset));
  std::size_t end = std::min(kids.size(), start + static_cast<std::size_t>(std::clamp(limit, 1, 500)));
  for (std::size_t k = start; k < end; ++k) out["items"].push_back(node_json(nodes_[kids[k]]));
  return out;
}

}  // namespace braid::report
