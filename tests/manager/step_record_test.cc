// checkpoint.json (manager/step_record.h) and ckpt_manager.json
// (manager/run_config.h): round trips, and malformed records one defect at a
// time, each refused with kCorrupt.

#include "manager/step_record.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ckpt/error.h"
#include "manager/run_config.h"

namespace ckpt {
namespace {

using detail::StepRecord;

constexpr const char* kGood =
    R"({"ckpt_version":1,"step":1200,"epoch":3,"time":1700000000.5,"metrics":{"dev_loss":0.25,"bad":"nan"},)"
    R"("format":"safetensors","state":"state.safetensors","state_digest":"0123456789abcdef",)"
    R"("files":[{"path":"state.safetensors","size":96,"xxh3":"00112233445566ff"}]})";

TEST(StepRecordTest, ParsesAWellFormedRecord) {
  const StepRecord record = detail::parse_step_record(kGood, "checkpoint.json");
  EXPECT_EQ(record.step, 1200);
  EXPECT_EQ(record.epoch, 3);
  EXPECT_DOUBLE_EQ(record.time, 1700000000.5);
  EXPECT_DOUBLE_EQ(record.metrics.at("dev_loss"), 0.25);
  EXPECT_TRUE(std::isnan(record.metrics.at("bad")));
  EXPECT_EQ(record.format, "safetensors");
  EXPECT_EQ(record.state, "state.safetensors");
  ASSERT_EQ(record.files.size(), 1u);
  EXPECT_EQ(record.files[0].size, 96u);
  EXPECT_EQ(record.files[0].xxh3, "00112233445566ff");
}

TEST(StepRecordTest, RoundTrips) {
  StepRecord record{.step = 7,
                    .epoch = std::nullopt,
                    .metrics = {{"a", -1.5}, {"inf", INFINITY}},
                    .time = 12.25,
                    .format = "tf",
                    .state = "state",
                    .state_digest = "ffffffffffffffff",
                    .files = {{"state.index", 10, "0000000000000001"}, {"sub/dir/x", 0, "0000000000000002"}}};
  const StepRecord back = detail::parse_step_record(detail::step_record_json(record), "x");
  EXPECT_EQ(back.step, 7);
  EXPECT_FALSE(back.epoch);
  EXPECT_EQ(back.metrics.at("a"), -1.5);
  EXPECT_EQ(back.metrics.at("inf"), INFINITY);
  EXPECT_EQ(back.time, 12.25);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[1].path, "sub/dir/x");
}

// Each replaces one part of kGood.
struct Defect {
  const char* name;
  const char* from;
  const char* to;
};

TEST(StepRecordTest, MalformedOneDefectAtATime) {
  const std::vector<Defect> defects = {
      {"not json", "{\"ckpt_version\"", "{ckpt_version"},
      {"not an object", R"({"ckpt_version":1,)", R"([{"ckpt_version":1,)"},
      {"future version", R"("ckpt_version":1)", R"("ckpt_version":2)"},
      {"version zero", R"("ckpt_version":1)", R"("ckpt_version":0)"},
      {"version missing", R"("ckpt_version":1,)", ""},
      {"negative step", R"("step":1200)", R"("step":-1)"},
      {"step a string", R"("step":1200)", R"("step":"1200")"},
      {"step fractional", R"("step":1200)", R"("step":1200.5)"},
      {"epoch a string", R"("epoch":3)", R"("epoch":"3")"},
      {"time missing", R"("time":1700000000.5,)", ""},
      {"time a string", R"("time":1700000000.5)", R"("time":"now")"},
      {"metrics an array", R"("metrics":{"dev_loss":0.25,"bad":"nan"})", R"("metrics":[0.25])"},
      {"metric a word", R"("bad":"nan")", R"("bad":"low")"},
      {"metric twice", R"("bad":"nan")", R"("dev_loss":1)"},
      {"format missing", R"("format":"safetensors",)", ""},
      {"state absolute", R"("state":"state.safetensors")", R"("state":"/etc/passwd")"},
      {"state parent", R"("state":"state.safetensors")", R"("state":"..")"},
      {"state nested", R"("state":"state.safetensors")", R"("state":"a/b")"},
      {"state empty", R"("state":"state.safetensors")", R"("state":"")"},
      {"digest short", R"("state_digest":"0123456789abcdef")", R"("state_digest":"0123")"},
      {"files missing", R"(,"files":[{"path":"state.safetensors","size":96,"xxh3":"00112233445566ff"}])", ""},
      {"file not object", R"({"path":"state.safetensors","size":96,"xxh3":"00112233445566ff"})", "1"},
      {"file path escapes", R"("path":"state.safetensors")", R"("path":"../other/state")"},
      {"file path dot", R"("path":"state.safetensors")", R"("path":"./state")"},
      {"file path empty part", R"("path":"state.safetensors")", R"("path":"a//b")"},
      {"file is the record", R"("path":"state.safetensors")", R"("path":"checkpoint.json")"},
      {"size negative", R"("size":96)", R"("size":-96)"},
      {"size missing", R"("size":96,)", ""},
      {"xxh3 upper case", R"("xxh3":"00112233445566ff")", R"("xxh3":"00112233445566FF")"},
      {"xxh3 short", R"("xxh3":"00112233445566ff")", R"("xxh3":"0011")"},
      {"file twice", R"({"path":"state.safetensors","size":96,"xxh3":"00112233445566ff"})",
       R"({"path":"state.safetensors","size":96,"xxh3":"00112233445566ff"},{"path":"state.safetensors","size":1,"xxh3":"00112233445566ff"})"},
      {"truncated", R"("xxh3":"00112233445566ff"}]})", R"("xxh3":"00112233445566ff"}])"},
  };
  for (const Defect& defect : defects) {
    std::string text = kGood;
    const size_t at = text.find(defect.from);
    ASSERT_NE(at, std::string::npos) << defect.name;
    text.replace(at, std::string(defect.from).size(), defect.to);
    try {
      detail::parse_step_record(text, "run/step-00001200/checkpoint.json");
      ADD_FAILURE() << defect.name << ": accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << defect.name << ": " << error.what();
      EXPECT_NE(std::string(error.what()).find("checkpoint.json"), std::string::npos) << defect.name;
    }
  }
}

TEST(StepRecordTest, StepDirectoryNames) {
  EXPECT_EQ(detail::step_directory_name(1200), "step-00001200");
  EXPECT_EQ(detail::step_directory_name(0), "step-00000000");
  EXPECT_EQ(detail::step_directory_name(123456789), "step-123456789");
  EXPECT_EQ(detail::parse_step_directory_name("step-00001200"), 1200);
  EXPECT_EQ(detail::parse_step_directory_name("step-123456789"), 123456789);
  EXPECT_EQ(detail::parse_step_directory_name("step-9223372036854775807"), INT64_MAX);
  for (const char* name : {"step-1200", "step-012345678", "step-0000120a", "step-", "Step-00001200",
                           "step-00001200.bak", "step-99999999999999999999", "x-00001200"}) {
    EXPECT_FALSE(detail::parse_step_directory_name(name)) << name;
  }
}

TEST(RunConfigTest, RoundTripsEveryPolicy) {
  detail::RunConfig config;
  config.format = "tf";
  config.keep_forever = {3, 9};
  config.policies = {KeepLast{.n = 3},
                     KeepBest{.n = 2, .metric = "acc", .mode = MetricMode::kMax, .keep_missing_metric = false},
                     KeepEverySteps{.steps = 100},
                     KeepEverySeconds{.seconds = 1.5},
                     KeepSteps{.steps = {1, 2}},
                     ReturnnPolicy{.keep_last_n = 1, .keep_best_n = 3, .keep = std::vector<int64_t>{5}, .dry_run = true},
                     CustomPolicy{.keep = {}, .last_kept = {4}}};
  const detail::RunConfig back = detail::parse_run_config(detail::run_config_json(config), "x");
  EXPECT_EQ(back.format, "tf");
  EXPECT_EQ(back.keep_forever, (std::vector<int64_t>{3, 9}));
  ASSERT_EQ(back.policies.size(), config.policies.size());
  for (size_t i = 0; i < config.policies.size(); ++i) {
    EXPECT_EQ(policy_name(back.policies[i]), policy_name(config.policies[i]));
  }
  const auto& best = std::get<KeepBest>(back.policies[1]);
  EXPECT_EQ(best.mode, MetricMode::kMax);
  EXPECT_FALSE(best.keep_missing_metric);
  const auto& returnn = std::get<ReturnnPolicy>(back.policies[5]);
  EXPECT_EQ(returnn.keep, (std::vector<int64_t>{5}));
  EXPECT_TRUE(returnn.dry_run);
  EXPECT_EQ(std::get<CustomPolicy>(back.policies[6]).last_kept, (std::vector<int64_t>{4}));
}

// `good` with each (from -> to) replacement made, one at a time: every one
// is refused as kCorrupt.
void expect_each_defect_corrupt(const std::string& good,
                                const std::vector<std::pair<std::string, std::string>>& defects) {
  for (const auto& [from, to] : defects) {
    std::string text = good;
    ASSERT_NE(text.find(from), std::string::npos) << from << " in " << text;
    text.replace(text.find(from), from.size(), to);
    try {
      detail::parse_run_config(text, "run/ckpt_manager.json");
      ADD_FAILURE() << text << ": accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << text;
    }
  }
}

TEST(RunConfigTest, RoundTripsTheReturnnLayout) {
  detail::RunConfig config;
  config.format = "torch";
  config.layout = "returnn";
  config.committed_epochs = {{3, 300}, {4, 410}};
  const std::string json = detail::run_config_json(config);
  const detail::RunConfig back = detail::parse_run_config(json, "x");
  EXPECT_EQ(back.layout, "returnn");
  EXPECT_EQ(back.committed_epochs, config.committed_epochs);
  // The ckpt layout's config stays as it was before layouts (no new keys).
  detail::RunConfig plain;
  plain.format = "safetensors";
  EXPECT_EQ(detail::run_config_json(plain).find("layout"), std::string::npos);
  EXPECT_EQ(detail::parse_run_config(detail::run_config_json(plain), "x").layout, "ckpt");

  const std::vector<std::pair<std::string, std::string>> defects = {
      {R"("layout":"returnn")", R"("layout":"flax")"},
      {R"("layout":"returnn")", R"("layout":7)"},
      {R"("committed_epochs":[[3,300],[4,410]])", R"("committed_epochs":[[3,300],[3,410]])"},
      {R"("committed_epochs":[[3,300],[4,410]])", R"("committed_epochs":[[3]])"},
      {R"(,"committed_epochs":[[3,300],[4,410]])", ""},
  };
  expect_each_defect_corrupt(json, defects);
}

TEST(RunConfigTest, MalformedConfigsAreCorrupt) {
  const std::string good = R"({"ckpt_version":1,"format":"safetensors","keep_forever":[],"policies":[{"kind":"keep_last","n":2}]})";
  EXPECT_NO_THROW(detail::parse_run_config(good, "x"));
  const std::vector<std::pair<std::string, std::string>> defects = {
      {R"("ckpt_version":1)", R"("ckpt_version":7)"},
      {R"("format":"safetensors",)", ""},
      {R"("keep_forever":[])", R"("keep_forever":["a"])"},
      {R"("kind":"keep_last")", R"("kind":"keep_most")"},
      {R"("n":2)", R"("n":-2)"},
      {R"("n":2)", R"("m":2)"},
      {R"([{"kind")", R"([1,{"kind")"},
  };
  expect_each_defect_corrupt(good, defects);
}

}  // namespace
}  // namespace ckpt
