#include "braid/mutate/knob_mutator.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

namespace braid {

namespace {

using Values = std::map<std::string, std::string>;

// Draws from ctx.rng only, with arithmetic of our own, so that a given RNG state gives the
// same proposal with any standard library.
class Draw {
 public:
  explicit Draw(std::mt19937_64& rng) : rng_(rng) {}
  std::size_t below(std::size_t n) { return n <= 1 ? 0 : static_cast<std::size_t>(rng_() % n); }
  double unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return unit() < p; }

 private:
  std::mt19937_64& rng_;
};

std::size_t index_of(const Knob& k, const std::string& value) {
  auto it = std::find(k.domain.begin(), k.domain.end(), value);
  return it == k.domain.end() ? 0 : static_cast<std::size_t>(it - k.domain.begin());
}

// Step of an Exploit move in domain positions: 1, lengthened by temperature (each extra
// position with probability `temperature`, capped below 1 so the walk ends).
std::size_t step_length(Draw& draw, double temperature, std::size_t domain_size) {
  double p = std::clamp(temperature, 0.0, 0.9);
  std::size_t step = 1;
  while (step + 1 < domain_size && draw.chance(p)) ++step;
  return step;
}

// A different value next to `current` in declared domain order.
std::string neighbour(Draw& draw, const Knob& k, const std::string& current, double temperature) {
  std::size_t n = k.domain.size();
  if (n <= 1) return current;
  std::size_t at = index_of(k, current);
  std::size_t step = step_length(draw, temperature, n);
  std::vector<std::size_t> options;
  if (at > 0) options.push_back(at >= step ? at - step : 0);
  if (at + 1 < n) options.push_back(std::min(n - 1, at + step));
  return k.domain[options[draw.below(options.size())]];
}

// A different value anywhere in the domain.
std::string jump(Draw& draw, const Knob& k, const std::string& current) {
  std::size_t n = k.domain.size();
  if (n <= 1) return current;
  std::size_t at = index_of(k, current);
  std::size_t pick = draw.below(n - 1);
  return k.domain[pick >= at ? pick + 1 : pick];
}

// The line of `text` holding byte `offset`, without its newline.
std::pair<std::size_t, std::size_t> line_around(const std::string& text, std::size_t offset) {
  std::size_t begin = 0;
  if (offset > 0) {
    std::size_t newline = text.rfind('\n', offset - 1);
    if (newline != std::string::npos) begin = newline + 1;
  }
  std::size_t end = text.find('\n', offset);
  if (end == std::string::npos) end = text.size();
  if (end > begin && text[end - 1] == '\r') --end;
  return {begin, end};
}

struct Sampler {
  const Program& parent;
  const MutationContext& ctx;
  Draw& draw;
  std::vector<const Knob*> mutable_knobs;  // knobs with more than one value
  std::vector<Values> cross_sources;       // knob values of the other parents (valid ones only)
  std::set<std::string> moved;             // knobs the last draw chose to change (kept by repair)

  std::string move(const Knob& k, const std::string& current, bool wide) {
    if (wide || ctx.phase == Phase::Explore) return jump(draw, k, current);
    return neighbour(draw, k, current, ctx.temperature);
  }

  // Change 1-2 knobs; Explore favours two.
  Values diff(bool wide) {
    Values v = parent.knob_values();
    std::size_t count = 1;
    double two = ctx.phase == Phase::Explore ? 0.5 : 0.25 + 0.25 * std::clamp(ctx.temperature, 0.0, 1.0);
    if (mutable_knobs.size() >= 2 && draw.chance(two)) count = 2;
    std::vector<const Knob*> pool = mutable_knobs;
    for (std::size_t i = 0; i < count; ++i) {
      std::size_t pick = draw.below(pool.size());
      const Knob* k = pool[pick];
      pool.erase(pool.begin() + static_cast<long>(pick));
      v[k->name] = move(*k, v[k->name], wide);
      moved.insert(k->name);
    }
    return v;
  }

  std::function<std::optional<Values>(const Values&)> structured_draw;  // ValidSpace::sequential

  // Resample every knob: uniformly when exploring (decision by decision when the valid vectors
  // are known), around the current value when exploiting.
  Values full(bool wide) {
    Values v = parent.knob_values();
    if ((wide || ctx.phase == Phase::Explore) && structured_draw)
      if (auto drawn = structured_draw(v)) return *drawn;
    for (const Knob* k : mutable_knobs) {
      if (wide || ctx.phase == Phase::Explore) {
        v[k->name] = k->domain[draw.below(k->domain.size())];
      } else if (draw.chance(0.5)) {
        v[k->name] = neighbour(draw, *k, v[k->name], ctx.temperature);
      }
    }
    return v;
  }

  // Each knob from one parent; late tries also move one knob so that parents that agree
  // everywhere still yield a new vector.
  Values cross(bool wide) {
    Values v = parent.knob_values();
    for (const Knob* k : mutable_knobs) {
      std::vector<std::string> options{v[k->name]};
      for (const auto& source : cross_sources)
        if (auto it = source.find(k->name); it != source.end()) options.push_back(it->second);
      v[k->name] = options[draw.below(options.size())];
    }
    if (wide) {
      const Knob* k = mutable_knobs[draw.below(mutable_knobs.size())];
      v[k->name] = move(*k, v[k->name], false);
    }
    return v;
  }

  Values sample(bool wide) {
    moved.clear();
    switch (ctx.patch_type) {
      case PatchType::Diff: return diff(wide);
      case PatchType::Full: return full(wide);
      case PatchType::Cross: return cross(wide);
    }
    return diff(wide);
  }
};

// Every vector within reach of the patch type (diff: 1-2 changed knobs; full/cross: all), for
// when random draws keep landing on seen or invalid vectors. Empty when the space is too large.
std::vector<Values> enumerate_reachable(const Program& parent, const std::vector<const Knob*>& knobs, PatchType type) {
  constexpr std::size_t kLimit = 50000;
  std::vector<Values> out;
  const Values base = parent.knob_values();
  if (type == PatchType::Diff) {
    for (std::size_t a = 0; a < knobs.size(); ++a) {
      for (const auto& va : knobs[a]->domain) {
        if (va == base.at(knobs[a]->name)) continue;
        Values one = base;
        one[knobs[a]->name] = va;
        out.push_back(one);
        for (std::size_t b = a + 1; b < knobs.size(); ++b) {
          for (const auto& vb : knobs[b]->domain) {
            if (vb == base.at(knobs[b]->name)) continue;
            Values two = one;
            two[knobs[b]->name] = vb;
            out.push_back(std::move(two));
            if (out.size() > kLimit) return {};
          }
        }
      }
    }
    return out;
  }
  std::size_t total = 1;
  for (const Knob* k : knobs) {
    total *= k->domain.size();
    if (total > kLimit) return {};
  }
  for (std::size_t code = 0; code < total; ++code) {
    Values v = base;
    std::size_t rest = code;
    for (const Knob* k : knobs) {
      v[k->name] = k->domain[rest % k->domain.size()];
      rest /= k->domain.size();
    }
    out.push_back(std::move(v));
  }
  return out;
}

// Every knob vector that satisfies the program's braid:require lines, when the product of the
// domains is small enough to enumerate. Rejection sampling of independent draws is uniform over
// these vectors, which over-weights whatever frees the most other knobs (gemm_allgather: the one
// engine that uses kCommCtas, kDirection and kReadyWait got most draws). With the set at hand the
// sampler instead decides knob by knob in declaration order, each uniformly among the values that
// still have a valid completion, and repairs a move that breaks a constraint by changing as few
// of the other knobs as possible.
struct ValidSpace {
  using Vectors = std::vector<std::vector<std::uint16_t>>;
  std::vector<const Knob*> knobs;        // mutable knobs, declaration order
  std::shared_ptr<const Vectors> valid;  // value index per knob, for every valid vector

  static constexpr std::size_t kLimit = 200000;

  // Cache key: the knob names, domains and constraints (equal for every program of a run).
  static std::string key_of(const Program& parent, const std::vector<const Knob*>& knobs) {
    std::string key;
    for (const Knob* k : knobs) {
      key += k->name + "=";
      for (const auto& d : k->domain) key += d + "|";
      key += ";";
    }
    for (const auto& c : parent.constraints()) key += c.expr + "\n";
    return key;
  }

  static std::shared_ptr<const Vectors> enumerate(const Program& parent, const std::vector<const Knob*>& knobs) {
    std::size_t total = 1;
    for (const Knob* k : knobs) {
      total *= k->domain.size();
      if (total > kLimit) return nullptr;
    }
    auto out = std::make_shared<Vectors>();
    Values v = parent.knob_values();
    std::vector<std::uint16_t> idx(knobs.size(), 0);
    for (std::size_t code = 0; code < total; ++code) {
      std::size_t rest = code;
      for (std::size_t i = 0; i < knobs.size(); ++i) {
        idx[i] = static_cast<std::uint16_t>(rest % knobs[i]->domain.size());
        rest /= knobs[i]->domain.size();
        v[knobs[i]->name] = knobs[i]->domain[idx[i]];
      }
      if (parent.constraints().empty() || !parent.violated_constraint(v)) out->push_back(idx);
    }
    return out;
  }

  Values values_of(const std::vector<std::uint16_t>& idx, Values base) const {
    for (std::size_t i = 0; i < knobs.size(); ++i) base[knobs[i]->name] = knobs[i]->domain[idx[i]];
    return base;
  }

  // Knob by knob, each uniformly among the values some valid vector extends.
  std::optional<Values> sequential(Draw& draw, const Values& base) const {
    std::vector<const std::vector<std::uint16_t>*> alive;
    for (const auto& v : *valid) alive.push_back(&v);
    if (alive.empty()) return std::nullopt;
    for (std::size_t i = 0; i < knobs.size(); ++i) {
      std::set<std::uint16_t> options;
      for (const auto* v : alive) options.insert((*v)[i]);
      auto it = options.begin();
      std::advance(it, static_cast<long>(draw.below(options.size())));
      const std::uint16_t pick = *it;
      std::vector<const std::vector<std::uint16_t>*> next;
      for (const auto* v : alive)
        if ((*v)[i] == pick) next.push_back(v);
      alive.swap(next);
    }
    return values_of(*alive.front(), base);
  }

  // The valid vectors that keep `fixed` knobs at their values in `want` and differ from `want`
  // in the fewest other knobs; one of them at random.
  std::optional<Values> repair(Draw& draw, const Values& want, const std::set<std::string>& fixed) const {
    std::vector<std::uint16_t> target(knobs.size());
    for (std::size_t i = 0; i < knobs.size(); ++i)
      target[i] = static_cast<std::uint16_t>(index_of(*knobs[i], want.at(knobs[i]->name)));
    std::size_t best = SIZE_MAX;
    std::vector<const std::vector<std::uint16_t>*> closest;
    for (const auto& v : *valid) {
      std::size_t distance = 0;
      bool keeps = true;
      for (std::size_t i = 0; i < knobs.size() && keeps; ++i) {
        if (v[i] == target[i]) continue;
        if (fixed.count(knobs[i]->name)) keeps = false;
        ++distance;
      }
      if (!keeps || distance > best) continue;
      if (distance < best) {
        best = distance;
        closest.clear();
      }
      closest.push_back(&v);
    }
    if (closest.empty()) return std::nullopt;
    return values_of(*closest[draw.below(closest.size())], want);
  }
};

// Why the knob mutator cannot vary `parent`; "" when it can.
std::string unusable_parent(const Program& parent, const MutationContext& ctx) {
  if (!parent.ok()) return "the parent program is invalid: " + parent.error()->message;
  if (parent.knobs().empty()) return "the knob mutator needs knobs: the program declares no braid:knob lines";
  if (!ctx.rng) return "the knob mutator needs a random number generator in its context";
  for (const auto& k : parent.knobs())
    if (k.domain.size() > 1) return "";
  return "the knob mutator needs knobs with more than one value; every braid:knob has a single value";
}

std::vector<const Knob*> mutable_knobs_of(const Program& parent) {
  std::vector<const Knob*> out;
  for (const auto& k : parent.knobs())
    if (k.domain.size() > 1) out.push_back(&k);
  return out;
}

// The knob values of the other parents that are valid in this one's domains.
std::vector<Values> cross_sources_of(const Program& parent, const MutationContext& ctx) {
  std::vector<Values> sources;
  for (const ProgramRecord* record : ctx.cross_parents) {
    if (!record) continue;
    Program other = Program::parse(record->code, record->id.empty() ? "<cross parent>" : record->id);
    if (!other.ok()) continue;
    Values usable;
    for (const auto& [name, value] : other.knob_values()) {
      const Knob* mine = parent.find_knob(name);
      if (mine && std::find(mine->domain.begin(), mine->domain.end(), value) != mine->domain.end())
        usable[name] = value;
    }
    sources.push_back(std::move(usable));
  }
  return sources;
}

bool sources_differ(const Program& parent, const std::vector<Values>& sources) {
  const Values own = parent.knob_values();
  return std::any_of(sources.begin(), sources.end(), [&](const Values& s) {
    return std::any_of(s.begin(), s.end(), [&](const auto& kv) { return own.at(kv.first) != kv.second; });
  });
}

// Whether a vector is new, valid and unseen; counts the rejections for the error when none is.
struct Acceptance {
  Acceptance(const Program& parent, const SeenKnobVector& seen_before)
      : parent(parent), seen_before(seen_before), parent_key(parent.knob_key()) {}

  const Program& parent;
  const SeenKnobVector& seen_before;
  const std::string parent_key;
  int unchanged = 0, violated = 0, seen = 0;
  std::string last_violation;

  bool operator()(const Values& v) {
    std::string key = knob_key_of(v);
    if (key == parent_key) {
      ++unchanged;
      return false;
    }
    if (auto bad = parent.violated_constraint(v)) {
      ++violated;
      last_violation = *bad;
      return false;
    }
    if (seen_before && seen_before(key)) {
      ++seen;
      return false;
    }
    return true;
  }

  std::string none_found(int tries, std::size_t enumerated) const {
    return "the knob mutator found no new knob vector after " + std::to_string(tries) + " random draws" +
           (enumerated ? " and " + std::to_string(enumerated) + " enumerated vectors" : std::string()) + " (" +
           std::to_string(violated) + " violated a braid:require" +
           (last_violation.empty() ? "" : ", e.g. " + last_violation) + "; " + std::to_string(seen) +
           " already seen; " + std::to_string(unchanged) + " equal to the parent)";
  }
};

// The first acceptable one of up to `max_tries` random draws.
std::optional<Values> draw_new_vector(Sampler& sampler, const ValidSpace* space, bool always_wide,
                                      Acceptance& acceptable, int max_tries) {
  for (int attempt = 0; attempt < max_tries; ++attempt) {
    // The second half of the tries widens the moves: Exploit's neighbours may all be seen.
    Values v = sampler.sample(always_wide || attempt >= max_tries / 2);
    // A move that breaks a braid:require keeps the knobs it chose and adjusts the fewest others.
    if (space && !sampler.moved.empty() && sampler.parent.violated_constraint(v))
      if (auto repaired = space->repair(sampler.draw, v, sampler.moved)) v = std::move(*repaired);
    if (acceptable(v)) return v;
  }
  return std::nullopt;
}

// One of the acceptable vectors within reach of the patch type, when the draws found none.
std::optional<Values> enumerate_new_vector(const Sampler& sampler, Acceptance& acceptable, std::size_t& enumerated) {
  std::vector<Values> reachable = enumerate_reachable(sampler.parent, sampler.mutable_knobs, sampler.ctx.patch_type);
  enumerated = reachable.size();
  std::vector<Values> valid;
  for (auto& v : reachable)
    if (acceptable(v)) valid.push_back(std::move(v));
  if (valid.empty()) return std::nullopt;
  return valid[sampler.draw.below(valid.size())];
}

// The patch from `parent` to the knob values `chosen`: the knob lines' SEARCH/REPLACE for a
// diff, the blocks' full text otherwise. Sets `error` when the program cannot be edited.
std::string patch_to(const Program& parent, PatchType type, const Values& chosen, std::string& error) {
  if (type == PatchType::Diff) {
    std::vector<std::pair<std::string, std::string>> edits;
    const std::string& text = parent.text();
    for (const auto& k : parent.knobs()) {
      const std::string& value = chosen.at(k.name);
      if (value == k.value) continue;
      auto [begin, end] = line_around(text, k.value_offset);
      std::string old_line = text.substr(begin, end - begin);
      std::string new_line = old_line;
      new_line.replace(k.value_offset - begin, k.value.size(), value);
      edits.emplace_back(std::move(old_line), std::move(new_line));
    }
    return make_diff(edits);
  }
  EditResult edited = with_knobs(parent, chosen);
  if (!edited.ok()) {
    error = "the knob mutator could not edit the program: " + edited.error;
    return {};
  }
  Program child = Program::parse(edited.text, parent.origin());
  if (!child.ok()) {
    error = "the knob mutator produced an invalid program: " + child.error()->message;
    return {};
  }
  std::vector<std::string> contents;
  for (std::size_t i = 0; i < child.blocks().size(); ++i) contents.emplace_back(child.block_text(i));
  return make_full(parent, contents);
}

}  // namespace

KnobMutator::KnobMutator(SeenKnobVector seen, int max_tries)
    : seen_(std::move(seen)), max_tries_(std::max(1, max_tries)) {}

Proposal KnobMutator::propose(const Program& parent, const MutationContext& ctx) {
  Proposal out;
  out.patch_type = ctx.patch_type;
  out.model = "knob";
  out.error = unusable_parent(parent, ctx);
  if (!out.error.empty()) return out;
  Draw draw(*ctx.rng);
  Sampler sampler{parent, ctx, draw, mutable_knobs_of(parent), {}, {}, {}};
  if (ctx.patch_type == PatchType::Cross) sampler.cross_sources = cross_sources_of(parent, ctx);
  // Parents that agree with this one everywhere cannot be mixed into anything new.
  const bool always_wide = ctx.patch_type == PatchType::Cross && !sources_differ(parent, sampler.cross_sources);

  std::optional<ValidSpace> space;
  {
    const std::string key = ValidSpace::key_of(parent, sampler.mutable_knobs);
    std::lock_guard lock(valid_cache_mutex_);
    auto it = valid_cache_.find(key);
    if (it == valid_cache_.end())
      it = valid_cache_.emplace(key, ValidSpace::enumerate(parent, sampler.mutable_knobs)).first;
    if (it->second && !it->second->empty()) space = ValidSpace{sampler.mutable_knobs, it->second};
  }
  if (space) sampler.structured_draw = [&](const Values& base) { return space->sequential(draw, base); };

  Acceptance acceptable(parent, seen_);
  std::optional<Values> chosen =
      draw_new_vector(sampler, space ? &*space : nullptr, always_wide, acceptable, max_tries_);
  std::size_t enumerated = 0;
  if (!chosen) chosen = enumerate_new_vector(sampler, acceptable, enumerated);
  if (!chosen) {
    out.error = acceptable.none_found(max_tries_, enumerated);
    return out;
  }
  out.patch = patch_to(parent, ctx.patch_type, *chosen, out.error);
  return out;
}

}  // namespace braid
