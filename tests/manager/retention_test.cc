// Retention policies as pure functions over listings (ckpt/retention.h),
// against tables computed by hand from each policy's rules (docs/manager.md).

#include "ckpt/retention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "ckpt/error.h"
#include "manager/run_config.h"
#include "manager/run_files.h"

namespace ckpt {
namespace {

// Checkpoints of steps first..last (epoch = step), with `metric` values where given.
std::vector<CheckpointEntry> steps(int64_t first, int64_t last) {
  std::vector<CheckpointEntry> entries;
  for (int64_t step = first; step <= last; ++step) {
    CheckpointEntry entry;
    entry.step = step;
    entry.time = 1000.0 + static_cast<double>(step);
    entries.push_back(entry);
  }
  return entries;
}

void set_metric(std::vector<CheckpointEntry>& entries, const std::string& name, const std::map<int64_t, double>& values) {
  for (CheckpointEntry& entry : entries) {
    const auto found = values.find(*entry.step);
    if (found != values.end()) entry.metrics[name] = found->second;
  }
}

// The steps some policy keeps.
std::set<int64_t> kept_steps(const std::vector<CheckpointEntry>& entries, const std::vector<RetentionPolicy>& policies) {
  const auto kept = retention_kept_by(entries, policies);
  std::set<int64_t> result;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!kept[i].empty()) result.insert(*entries[i].step);
  }
  return result;
}

std::set<int64_t> range(int64_t first, int64_t last) {
  std::set<int64_t> result;
  for (int64_t i = first; i <= last; ++i) result.insert(i);
  return result;
}

TEST(RetentionTest, KeepLastKeepsTheNewest) {
  EXPECT_EQ(kept_steps(steps(1, 6), {KeepLast{.n = 2}}), (std::set<int64_t>{5, 6}));
  EXPECT_EQ(kept_steps(steps(1, 2), {KeepLast{.n = 5}}), (std::set<int64_t>{1, 2}));
  EXPECT_EQ(kept_steps(steps(1, 3), {KeepLast{.n = 0}}), (std::set<int64_t>{}));
}

TEST(RetentionTest, KeepBestTiesGoToTheNewerStep) {
  auto entries = steps(1, 5);
  set_metric(entries, "loss", {{1, 0.5}, {2, 0.3}, {3, 0.3}, {4, 0.4}, {5, 0.3}});
  EXPECT_EQ(kept_steps(entries, {KeepBest{.n = 2, .metric = "loss"}}), (std::set<int64_t>{3, 5}));
  EXPECT_EQ(kept_steps(entries, {KeepBest{.n = 1, .metric = "loss", .mode = MetricMode::kMax}}),
            (std::set<int64_t>{1}));
}

TEST(RetentionTest, BestAndLatestTogether) {
  auto entries = steps(1, 4);
  set_metric(entries, "loss", {{1, 0.1}, {2, 0.5}, {3, 0.4}, {4, 0.3}});
  const std::vector<RetentionPolicy> policies = {KeepLast{.n = 1}, KeepBest{.n = 1, .metric = "loss"}};
  const auto kept = retention_kept_by(entries, policies);
  EXPECT_EQ(kept[0], (std::vector<std::string>{"keep_best(1, loss, min)"}));
  EXPECT_TRUE(kept[1].empty());
  EXPECT_TRUE(kept[2].empty());
  EXPECT_EQ(kept[3], (std::vector<std::string>{"keep_last(1)"}));
  // fill_kept_by adds the newest-is-kept rule; entries_to_remove lets go of the rest.
  detail::fill_kept_by(entries, policies);
  EXPECT_EQ(entries[3].kept_by, (std::vector<std::string>{"keep_last(1)", "newest"}));
  EXPECT_EQ(detail::entries_to_remove(entries, true), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(detail::entries_to_remove(entries, true, 2), (std::vector<size_t>{2}));  // step 2 restored from
}

TEST(RetentionTest, MissingMetricKeptOrNotAsConfigured) {
  auto entries = steps(1, 4);
  set_metric(entries, "loss", {{1, 0.2}, {3, 0.1}, {4, NAN}});  // 2 lacks it, 4's is NaN
  EXPECT_EQ(kept_steps(entries, {KeepBest{.n = 1, .metric = "loss", .keep_missing_metric = true}}),
            (std::set<int64_t>{2, 3, 4}));
  EXPECT_EQ(kept_steps(entries, {KeepBest{.n = 1, .metric = "loss", .keep_missing_metric = false}}),
            (std::set<int64_t>{3}));
  EXPECT_EQ(kept_steps(entries, {KeepBest{.n = 5, .metric = "loss", .keep_missing_metric = false}}),
            (std::set<int64_t>{1, 3}));
}

TEST(RetentionTest, EveryStepsSecondsAndForever) {
  EXPECT_EQ(kept_steps(steps(1, 10), {KeepEverySteps{.steps = 4}}), (std::set<int64_t>{4, 8}));
  auto entries = steps(1, 6);
  const double times[] = {0, 10, 25, 31, 40, 61};
  for (size_t i = 0; i < entries.size(); ++i) entries[i].time = times[i];
  // Kept: 0 (first), 25 (>= 0 + 20), 61 (>= 25 + 20; 31 and 40 are too soon).
  EXPECT_EQ(kept_steps(entries, {KeepEverySeconds{.seconds = 20}}), (std::set<int64_t>{1, 3, 6}));
  EXPECT_EQ(kept_steps(steps(1, 5), {KeepSteps{.steps = {2, 4, 99}}}), (std::set<int64_t>{2, 4}));
}

TEST(RetentionTest, AnyPolicyKeeps) {
  auto entries = steps(1, 8);
  const std::vector<RetentionPolicy> policies = {KeepLast{.n = 1}, KeepEverySteps{.steps = 3}, KeepSteps{.steps = {1}}};
  EXPECT_EQ(kept_steps(entries, policies), (std::set<int64_t>{1, 3, 6, 8}));
}

TEST(RetentionTest, CustomPolicyGetsTheEntriesWithMetrics) {
  auto entries = steps(1, 4);
  set_metric(entries, "acc", {{1, 0.9}, {2, 0.1}, {3, 0.95}, {4, 0.2}});
  const CustomPolicy policy{.keep = [](const std::vector<CheckpointEntry>& list) {
    std::vector<int64_t> keep;
    for (const CheckpointEntry& entry : list) {
      if (entry.metrics.at("acc") > 0.5) keep.push_back(*entry.step);
    }
    return keep;
  }};
  EXPECT_EQ(kept_steps(entries, {policy}), (std::set<int64_t>{1, 3}));
  // Without its function, the recorded decision stands.
  EXPECT_EQ(kept_steps(entries, {CustomPolicy{.keep = {}, .last_kept = {2}}}), (std::set<int64_t>{2}));
}

TEST(RetentionTest, NoPolicyRemovesNothing) {
  auto entries = steps(1, 5);
  detail::fill_kept_by(entries, {});
  for (const CheckpointEntry& entry : entries) EXPECT_TRUE(entry.kept_by.empty());
  EXPECT_TRUE(detail::entries_to_remove(entries, false).empty());
}

TEST(RetentionTest, InvalidPoliciesAreRefused) {
  const std::vector<RetentionPolicy> bad = {KeepLast{.n = -1},          KeepBest{.n = 1, .metric = ""},
                                            KeepEverySteps{.steps = 0}, KeepEverySeconds{.seconds = 0},
                                            ReturnnPolicy{.keep_last_n = 0}, ReturnnPolicy{.keep_best_n = -1}};
  for (const RetentionPolicy& policy : bad) {
    try {
      retention_kept_by(steps(1, 3), {policy});
      ADD_FAILURE() << policy_name(policy) << " was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << policy_name(policy);
    }
  }
}

// RETURNN's cleanup_old_models. Tables by hand from its rules (retention.h).

TEST(ReturnnPolicyTest, FewerThanKeepCountsKeepsAll) {
  // max(keep_last_n = 2, keep_best_n = 4) = 4 >= 4 epochs: nothing cleaned up yet.
  auto entries = steps(1, 4);
  set_metric(entries, "dev_score", {{1, 4}, {2, 3}, {3, 2}, {4, 1}});
  EXPECT_EQ(kept_steps(entries, {ReturnnPolicy{}}), range(1, 4));
  EXPECT_EQ(retention_kept_by(entries, {ReturnnPolicy{}})[0], (std::vector<std::string>{"returnn(fewer than 5)"}));
}

TEST(ReturnnPolicyTest, DefaultsOnTwelveEpochsTwoScoreKeys) {
  auto entries = steps(1, 12);
  set_metric(entries, "dev_score",
             {{1, 5.0}, {2, 4.0}, {3, 3.0}, {4, 2.5}, {5, 2.6}, {6, 2.4}, {7, 2.45}, {8, 2.7}, {9, 2.8}, {10, 2.9},
              {11, 3.1}, {12, 3.2}});
  // Only dev_score: pattern for last epoch 12 (<= 50: every 20, doubles of 5) = {5, 10};
  // last 2 = {11, 12}; best 4 = 6 (2.4), 7 (2.45), 4 (2.5), 5 (2.6).
  EXPECT_EQ(kept_steps(entries, {ReturnnPolicy{}}), (std::set<int64_t>{4, 5, 6, 7, 10, 11, 12}));
  // A second key, ranked on its own: 9 (0.1), then the 0.3 ties by the older epoch: 3, 4, 5.
  set_metric(entries, "dev_error",
             {{1, 0.5}, {2, 0.4}, {3, 0.3}, {4, 0.3}, {5, 0.3}, {6, 0.3}, {7, 0.3}, {8, 0.3}, {9, 0.1}, {10, 0.3},
              {11, 0.3}, {12, 0.3}});
  EXPECT_EQ(kept_steps(entries, {ReturnnPolicy{}}), (std::set<int64_t>{3, 4, 5, 6, 7, 9, 10, 11, 12}));
  const auto kept = retention_kept_by(entries, {ReturnnPolicy{}});
  EXPECT_EQ(kept[8], (std::vector<std::string>{"returnn(best 4 dev_error)"}));
  EXPECT_EQ(kept[4], (std::vector<std::string>{"returnn(keep)", "returnn(best 4 dev_error)", "returnn(best 4 dev_score)"}));
  EXPECT_EQ(kept[11], (std::vector<std::string>{"returnn(last 2)"}));
}

TEST(ReturnnPolicyTest, MissingScoreCountsAsWorst) {
  auto entries = steps(1, 6);
  set_metric(entries, "dev_score", {{2, 0.9}, {3, 0.5}, {4, 0.7}, {5, 0.6}, {6, 0.8}});  // epoch 1 lacks it
  // Pattern (<= 10: every 4, doubles of 5) = {4, 5}; last 1 = {6}; best 2: 3 (0.5), 5 (0.6);
  // epoch 1 counts as 0.9, the worst: not kept.
  EXPECT_EQ(kept_steps(entries, {ReturnnPolicy{.keep_last_n = 1, .keep_best_n = 2}}), (std::set<int64_t>{3, 4, 5, 6}));
}

TEST(ReturnnPolicyTest, KeyWithOneValueThroughoutIsIgnored) {
  auto entries = steps(1, 6);
  set_metric(entries, "a", {{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}});
  set_metric(entries, "b", {{1, 0.5}, {2, 0.1}, {3, 0.5}, {4, 0.5}, {5, 0.5}, {6, 0.5}});
  // Were "a" ranked, its tie would keep epoch 1.
  EXPECT_EQ(kept_steps(entries, {ReturnnPolicy{.keep_last_n = 1, .keep_best_n = 1}}), (std::set<int64_t>{2, 4, 5, 6}));
}

TEST(ReturnnPolicyTest, DefaultPatternByLastEpoch) {
  const ReturnnPolicy policy{.keep_last_n = 2, .keep_best_n = 0};
  // 100: every 40 = {40, 80}, doubles of 10 = {10, 20, 40, 80}.
  EXPECT_EQ(kept_steps(steps(1, 100), {policy}), (std::set<int64_t>{10, 20, 40, 80, 99, 100}));
  // 250: every 80 * next_power_of_two(1 + 250 / 240 = 2) = 160, doubles of 20.
  EXPECT_EQ(kept_steps(steps(1, 250), {policy}), (std::set<int64_t>{20, 40, 80, 160, 249, 250}));
  // 500: every 80 * next_power_of_two(3) = 320 (RETURNN before next_power_of_two: 240, 480).
  EXPECT_EQ(kept_steps(steps(1, 500), {policy}), (std::set<int64_t>{20, 40, 80, 160, 320, 499, 500}));
  // An explicit keep replaces the pattern.
  EXPECT_EQ(kept_steps(steps(1, 20), {ReturnnPolicy{.keep_last_n = 1, .keep_best_n = 0, .keep = std::vector<int64_t>{3}}}),
            (std::set<int64_t>{3, 20}));
}

TEST(ReturnnPolicyTest, HugeEpochsDoNotOverflow) {
  std::vector<CheckpointEntry> entries = steps(1, 4);
  entries.back().step = INT64_MAX;
  // Last epoch E = INT64_MAX: every 80 * next_power_of_two(1 + E / 240) = 80 * 2^56; doubles of 20 up to E.
  const auto kept = kept_steps(entries, {ReturnnPolicy{.keep_last_n = 1, .keep_best_n = 0, .keep = std::nullopt}});
  EXPECT_EQ(kept, (std::set<int64_t>{INT64_MAX}));
  EXPECT_EQ(retention_kept_by(entries, {ReturnnPolicy{.keep_last_n = 1, .keep_best_n = INT64_MAX}})[0],
            (std::vector<std::string>{"returnn(fewer than 9223372036854775808)"}));
}

TEST(ReturnnPolicyTest, EpochsRatherThanSteps) {
  auto entries = steps(1, 6);
  for (CheckpointEntry& entry : entries) entry.epoch = *entry.step, entry.step = *entry.step * 1000;
  EXPECT_EQ(kept_steps(entries, {ReturnnPolicy{.keep_last_n = 1, .keep_best_n = 0}}),
            (std::set<int64_t>{4000, 5000, 6000}));
}

TEST(ReturnnPolicyTest, DryRunKeepsEverything) {
  auto entries = steps(1, 12);
  const auto kept = retention_kept_by(entries, {ReturnnPolicy{.dry_run = true}});
  EXPECT_EQ(kept[0], (std::vector<std::string>{"returnn(dry run)"}));
  for (const auto& names : kept) EXPECT_FALSE(names.empty());
}

}  // namespace
}  // namespace ckpt
