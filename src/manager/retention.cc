#include "ckpt/retention.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ckpt/error.h"

namespace ckpt {
namespace {

[[noreturn]] void invalid_policy(const std::string& message) { throw Error(ErrorCode::kInvalidArgument, message); }

std::string number_text(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e15) return std::to_string(static_cast<int64_t>(value));
  return std::to_string(value);
}

// The metric `name` of `entry` where it has a number (NaN counts as none).
std::optional<double> metric_of(const CheckpointEntry& entry, const std::string& name) {
  const auto found = entry.metrics.find(name);
  if (found == entry.metrics.end() || std::isnan(found->second)) return std::nullopt;
  return found->second;
}

using Kept = std::vector<std::vector<std::string>>;

void add(Kept& kept, size_t index, const std::string& name) {
  std::vector<std::string>& names = kept[index];
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

void apply(const KeepLast& policy, const std::vector<CheckpointEntry>& entries, Kept& kept, const std::string& name) {
  const size_t n = static_cast<size_t>(std::min<int64_t>(policy.n, static_cast<int64_t>(entries.size())));
  for (size_t i = entries.size() - n; i < entries.size(); ++i) add(kept, i, name);
}

void apply(const KeepBest& policy, const std::vector<CheckpointEntry>& entries, Kept& kept, const std::string& name) {
  std::vector<std::pair<double, size_t>> ranked;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (const std::optional<double> value = metric_of(entries[i], policy.metric)) {
      ranked.emplace_back(policy.mode == MetricMode::kMin ? *value : -*value, i);
    } else if (policy.keep_missing_metric) {
      add(kept, i, name);
    }
  }
  // Better value first; among equal values the newer checkpoint first.
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  for (size_t i = 0; i < ranked.size() && static_cast<int64_t>(i) < policy.n; ++i) add(kept, ranked[i].second, name);
}

void apply(const KeepEverySteps& policy, const std::vector<CheckpointEntry>& entries, Kept& kept,
           const std::string& name) {
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].step && *entries[i].step % policy.steps == 0) add(kept, i, name);
  }
}

void apply(const KeepEverySeconds& policy, const std::vector<CheckpointEntry>& entries, Kept& kept,
           const std::string& name) {
  std::optional<double> last;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!last || entries[i].time >= *last + policy.seconds) {
      add(kept, i, name);
      last = entries[i].time;
    }
  }
}

void apply(const KeepSteps& policy, const std::vector<CheckpointEntry>& entries, Kept& kept, const std::string& name) {
  const std::set<int64_t> steps(policy.steps.begin(), policy.steps.end());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].step && steps.count(*entries[i].step)) add(kept, i, name);
  }
}

void apply(const CustomPolicy& policy, const std::vector<CheckpointEntry>& entries, Kept& kept,
           const std::string& name) {
  const std::vector<int64_t> chosen = policy.keep ? policy.keep(entries) : policy.last_kept;
  const std::set<int64_t> steps(chosen.begin(), chosen.end());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].step && steps.count(*entries[i].step)) add(kept, i, name);
  }
}

// RETURNN's util/math.py next_power_of_two: the smallest power of two >= n.
int64_t next_power_of_two(int64_t n) {
  int64_t power = 1;
  while (power < n) power *= 2;
  return power;
}

// RETURNN's default keep pattern for a run whose last epoch is `last`.
std::set<int64_t> returnn_default_pattern(int64_t last) {
  int64_t every = 0;
  int64_t doubles_of = 0;
  if (last <= 10) {
    every = 4, doubles_of = 5;
  } else if (last <= 50) {
    every = 20, doubles_of = 5;
  } else if (last <= 100) {
    every = 40, doubles_of = 10;
  } else {
    every = 80 * next_power_of_two(1 + last / 240), doubles_of = 20;
  }
  std::set<int64_t> pattern;
  // Steps near INT64_MAX must not overflow: stop before the next would pass `last`.
  for (int64_t n = every; n <= last; n += every) {
    pattern.insert(n);
    if (n > last - every) break;
  }
  for (int64_t n = doubles_of; n <= last; n *= 2) {
    pattern.insert(n);
    if (n > last / 2) break;
  }
  return pattern;
}

void apply(const ReturnnPolicy& policy, const std::vector<CheckpointEntry>& entries, Kept& kept) {
  // RETURNN works on epochs: each distinct epoch number, with its scores.
  std::map<int64_t, std::vector<size_t>> by_epoch;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::optional<int64_t> epoch = entries[i].epoch ? entries[i].epoch : entries[i].step;
    if (epoch) {
      by_epoch[*epoch].push_back(i);
    } else {
      add(kept, i, "returnn(no epoch)");  // cannot be judged
    }
  }
  if (by_epoch.empty()) return;
  std::set<int64_t> keep;
  std::map<int64_t, std::string> reason;
  const auto keep_epoch = [&](int64_t epoch, const std::string& why) {
    if (!by_epoch.count(epoch)) return;
    for (size_t i : by_epoch[epoch]) add(kept, i, why);
    keep.insert(epoch);
  };
  const int64_t count = static_cast<int64_t>(by_epoch.size());
  if (std::max(policy.keep_last_n, policy.keep_best_n) >= count) {
    const std::string why =
        "returnn(fewer than " + std::to_string(static_cast<uint64_t>(std::max(policy.keep_last_n, policy.keep_best_n)) + 1) + ")";
    for (const auto& [epoch, indices] : by_epoch) keep_epoch(epoch, why);
    return;
  }
  const int64_t last = by_epoch.rbegin()->first;
  const std::set<int64_t> pattern =
      policy.keep ? std::set<int64_t>(policy.keep->begin(), policy.keep->end()) : returnn_default_pattern(last);
  for (int64_t epoch : pattern) keep_epoch(epoch, "returnn(keep)");
  {
    const std::string why = "returnn(last " + std::to_string(policy.keep_last_n) + ")";
    int64_t taken = 0;
    for (auto it = by_epoch.rbegin(); it != by_epoch.rend() && taken < policy.keep_last_n; ++it, ++taken) {
      keep_epoch(it->first, why);
    }
  }
  // An epoch's score for a key: RETURNN keeps one score dict per epoch; where
  // several checkpoints share an epoch, the newest one's metrics count.
  const auto score = [&](int64_t epoch, const std::string& key) { return metric_of(entries[by_epoch[epoch].back()], key); };
  std::set<std::string> keys;
  for (const auto& [epoch, indices] : by_epoch) {
    for (const auto& [key, value] : entries[indices.back()].metrics) {
      if (!std::isnan(value)) keys.insert(key);
    }
  }
  for (const std::string& key : keys) {
    double lowest = INFINITY;
    double worst = -INFINITY;
    for (const auto& [epoch, indices] : by_epoch) {
      if (const std::optional<double> value = score(epoch, key)) {
        lowest = std::min(lowest, *value);
        worst = std::max(worst, *value);
      }
    }
    if (lowest == worst) continue;  // one value throughout: RETURNN ignores the key
    std::vector<std::pair<double, int64_t>> ranked;
    for (const auto& [epoch, indices] : by_epoch) ranked.emplace_back(score(epoch, key).value_or(worst), epoch);
    std::sort(ranked.begin(), ranked.end());  // (score, epoch): ties go to the older epoch, as RETURNN's sorted()
    const std::string why = "returnn(best " + std::to_string(policy.keep_best_n) + " " + key + ")";
    for (size_t i = 0; i < ranked.size() && static_cast<int64_t>(i) < policy.keep_best_n; ++i) {
      keep_epoch(ranked[i].second, why);
    }
  }
  if (policy.dry_run) {
    for (const auto& [epoch, indices] : by_epoch) {
      if (!keep.count(epoch)) keep_epoch(epoch, "returnn(dry run)");
    }
  }
}

}  // namespace

std::string_view metric_mode_name(MetricMode mode) { return mode == MetricMode::kMin ? "min" : "max"; }

MetricMode metric_mode_from_name(std::string_view name) {
  if (name == "min") return MetricMode::kMin;
  if (name == "max") return MetricMode::kMax;
  throw Error(ErrorCode::kInvalidArgument, "metric mode must be min or max, not '" + std::string(name) + "'");
}

std::string policy_name(const RetentionPolicy& policy) {
  struct Namer {
    std::string operator()(const KeepLast& p) const { return "keep_last(" + std::to_string(p.n) + ")"; }
    std::string operator()(const KeepBest& p) const {
      return "keep_best(" + std::to_string(p.n) + ", " + p.metric + ", " + std::string(metric_mode_name(p.mode)) + ")";
    }
    std::string operator()(const KeepEverySteps& p) const {
      return "keep_every_steps(" + std::to_string(p.steps) + ")";
    }
    std::string operator()(const KeepEverySeconds& p) const {
      return "keep_every_seconds(" + number_text(p.seconds) + ")";
    }
    std::string operator()(const KeepSteps&) const { return "keep_steps"; }
    std::string operator()(const ReturnnPolicy&) const { return "returnn"; }
    std::string operator()(const CustomPolicy&) const { return "custom"; }
  };
  return std::visit(Namer{}, policy);
}

void validate_policy(const RetentionPolicy& policy) {
  struct Validator {
    void operator()(const KeepLast& p) const {
      if (p.n < 0) invalid_policy("keep_last must be >= 0, not " + std::to_string(p.n));
    }
    void operator()(const KeepBest& p) const {
      if (p.n < 0) invalid_policy("keep_best must be >= 0, not " + std::to_string(p.n));
      if (p.metric.empty()) invalid_policy("keep_best needs the metric to rank by");
    }
    void operator()(const KeepEverySteps& p) const {
      if (p.steps <= 0) invalid_policy("keep_every_steps must be > 0, not " + std::to_string(p.steps));
    }
    void operator()(const KeepEverySeconds& p) const {
      if (!(p.seconds > 0) || !std::isfinite(p.seconds)) invalid_policy("keep_every_seconds must be > 0");
    }
    void operator()(const KeepSteps&) const {}
    void operator()(const ReturnnPolicy& p) const {
      if (p.keep_last_n < 1) invalid_policy("RETURNN's keep_last_n must be >= 1, not " + std::to_string(p.keep_last_n));
      if (p.keep_best_n < 0) invalid_policy("RETURNN's keep_best_n must be >= 0, not " + std::to_string(p.keep_best_n));
    }
    void operator()(const CustomPolicy&) const {}
  };
  std::visit(Validator{}, policy);
}

std::vector<std::vector<std::string>> retention_kept_by(const std::vector<CheckpointEntry>& checkpoints,
                                                        const std::vector<RetentionPolicy>& policies) {
  for (const RetentionPolicy& policy : policies) validate_policy(policy);
  Kept kept(checkpoints.size());
  if (checkpoints.empty()) return kept;
  for (const RetentionPolicy& policy : policies) {
    const std::string name = policy_name(policy);
    std::visit(
        [&](const auto& p) {
          using P = std::decay_t<decltype(p)>;
          if constexpr (std::is_same_v<P, ReturnnPolicy>) {
            apply(p, checkpoints, kept);
          } else {
            apply(p, checkpoints, kept, name);
          }
        },
        policy);
  }
  return kept;
}

}  // namespace ckpt
