// `ckpt prune` (tools/ckpt/prune.cc) on run directories the manager wrote:
// what it prints and removes, --dry-run, the recorded policies, the writer
// lock, usage errors. The retention rules themselves: tests/manager.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "ckpt/manager.h"
#include "support/temp_dir.h"
#include "support/tool_run.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::run_tool;
using testing::TempDir;
using testing::ToolRun;

Tree tiny(int64_t step) {
  Tree tree = Tree::map();
  tree.set("w", Tensor::from_values<float>(DType::kFloat32, {2}, std::vector<float>{float(step), 1.0f}));
  return tree;
}

// A run of steps 1..4 with the losses 0.4, 0.1, 0.5, 0.3 and no policy.
fs::path make_run(const TempDir& dir, ManagerOptions options = {}) {
  const fs::path run = dir / "run";
  Manager manager(run, std::move(options));
  const double losses[] = {0.4, 0.1, 0.5, 0.3};
  for (int64_t step = 1; step <= 4; ++step) manager.save(step, tiny(step), {.metrics = {{"loss", losses[step - 1]}}});
  manager.close();
  return run;
}

std::string step_dir(const fs::path& run, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return (run / name).string();
}

TEST(PruneCliTest, RemovesWhatNoPolicyKeepsAndPrintsIt) {
  TempDir dir;
  const fs::path run = make_run(dir);
  ToolRun dry = run_tool(dir.path(), {"prune", run.string(), "--keep-last", "1", "--keep-best", "1", "--metric", "loss", "--dry-run"});
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(dry.out, "would remove " + step_dir(run, 1) + "\nwould remove " + step_dir(run, 3) + "\n");
  EXPECT_TRUE(fs::exists(step_dir(run, 1)));
  ToolRun real = run_tool(dir.path(), {"prune", run.string(), "--keep-last", "1", "--keep-best", "1", "--metric", "loss"});
  EXPECT_EQ(real.exit_code, 0) << real.err;
  EXPECT_EQ(real.out, "removed " + step_dir(run, 1) + "\nremoved " + step_dir(run, 3) + "\n");
  EXPECT_FALSE(fs::exists(step_dir(run, 1)));
  EXPECT_FALSE(fs::exists(step_dir(run, 3)));
  EXPECT_TRUE(fs::exists(step_dir(run, 2)));
  EXPECT_TRUE(fs::exists(step_dir(run, 4)));
  EXPECT_TRUE(load(fs::path(step_dir(run, 2)) / "state.safetensors") == tiny(2));
}

TEST(PruneCliTest, ModeMaxAndEverySteps) {
  TempDir dir;
  const fs::path run = make_run(dir);
  ToolRun result = run_tool(dir.path(), {"prune", run.string(), "--keep-best", "1", "--metric", "loss", "--mode", "max",
                                         "--keep-every-steps", "2"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out, "removed " + step_dir(run, 1) + "\n");  // 3 is the max, 2 and 4 every 2 steps
}

TEST(PruneCliTest, WithoutFlagsTheRecordedPoliciesApply) {
  TempDir dir;
  // The run was written without a policy: nothing recorded, nothing removed.
  const fs::path run = make_run(dir);
  ToolRun none = run_tool(dir.path(), {"prune", run.string()});
  EXPECT_EQ(none.exit_code, 0) << none.err;
  EXPECT_EQ(none.out, "");
  // A manager that records keep_last 3 (and prunes after its own commits).
  { Manager manager(run, {.keep_last = 3}); }
  ToolRun recorded = run_tool(dir.path(), {"prune", run.string()});
  EXPECT_EQ(recorded.exit_code, 0) << recorded.err;
  EXPECT_EQ(recorded.out, "removed " + step_dir(run, 1) + "\n");
}

TEST(PruneCliTest, RefusedWhileAManagerWrites) {
  TempDir dir;
  const fs::path run = make_run(dir);
  Manager writer(run);
  ToolRun result = run_tool(dir.path(), {"prune", run.string(), "--keep-last", "1"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("another writer"), std::string::npos) << result.err;
  EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  EXPECT_TRUE(fs::exists(step_dir(run, 1)));
}

TEST(PruneCliTest, UsageErrors) {
  TempDir dir;
  const fs::path run = make_run(dir);
  for (const std::vector<std::string>& arguments :
       {std::vector<std::string>{"prune", run.string(), "--metric", "loss"},
        std::vector<std::string>{"prune", run.string(), "--keep-best", "1"},
        std::vector<std::string>{"prune", run.string(), "--keep-last", "-1"},
        std::vector<std::string>{"prune", run.string(), "--keep-best", "1", "--metric", "loss", "--mode", "up"},
        std::vector<std::string>{"prune", (dir / "missing").string(), "--keep-last", "1"},
        std::vector<std::string>{"prune"}}) {
    ToolRun result = run_tool(dir.path(), arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments.back() << ": " << result.err;
    EXPECT_EQ(result.out, "") << arguments.back();
  }
  for (int64_t step = 1; step <= 4; ++step) EXPECT_TRUE(fs::exists(step_dir(run, step)));
}

// A RETURNN run directory (epoch.NNN.pt, each with its epoch.NNN.opt.pt):
// refused without --foreign, nothing removed; with it, each pruned epoch's
// model and optimizer files go, named one per line, and unknown files stay.
TEST(PruneCliTest, AForeignRunNeedsForeignAndLosesEachCheckpointsFiles) {
  TempDir dir;
  const fs::path run = dir / "returnn";
  fs::create_directories(run);
  for (int64_t epoch = 1; epoch <= 4; ++epoch) {
    char name[32];
    std::snprintf(name, sizeof name, "epoch.%03lld", static_cast<long long>(epoch));
    save(run / (std::string(name) + ".pt"), tiny(epoch), {.format = "torch"});
    save(run / (std::string(name) + ".opt.pt"), tiny(-epoch), {.format = "torch"});
  }
  { std::ofstream(run / "notes.txt") << "mine\n"; }
  ToolRun refused = run_tool(dir.path(), {"prune", run.string(), "--keep-last", "2"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--foreign"), std::string::npos) << refused.err;
  EXPECT_EQ(refused.out, "");
  EXPECT_EQ(std::distance(fs::directory_iterator(run), fs::directory_iterator()), 9);

  ToolRun pruned = run_tool(dir.path(), {"prune", run.string(), "--keep-last", "2", "--foreign"});
  EXPECT_EQ(pruned.exit_code, 0) << pruned.err;
  for (const char* gone : {"epoch.001.pt", "epoch.001.opt.pt", "epoch.002.pt", "epoch.002.opt.pt"}) {
    EXPECT_FALSE(fs::exists(run / gone)) << gone;
    EXPECT_NE(pruned.out.find("removed " + (run / gone).string() + "\n"), std::string::npos) << pruned.out;
  }
  EXPECT_EQ(std::count(pruned.out.begin(), pruned.out.end(), '\n'), 4) << pruned.out;
  for (const char* kept : {"epoch.003.pt", "epoch.003.opt.pt", "epoch.004.pt", "epoch.004.opt.pt", "notes.txt"}) {
    EXPECT_TRUE(fs::exists(run / kept)) << kept;
  }
  EXPECT_TRUE(load(run / "epoch.004.pt") == tiny(4));
}

// A manager writes only its own layout: it refuses to open another tool's
// run directory for writing (and leaves it as it was).
TEST(PruneCliTest, AManagerRefusesToWriteIntoAForeignRun) {
  TempDir dir;
  const fs::path run = dir / "lightning";
  fs::create_directories(run);
  save(run / "epoch=0-step=100.ckpt", tiny(1), {.format = "torch"});
  try {
    Manager manager(run, {.keep_last = 1});
    ADD_FAILURE() << "a manager opened a lightning run for writing";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << error.what();
    EXPECT_NE(std::string(error.what()).find("lightning"), std::string::npos) << error.what();
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(run), fs::directory_iterator()), 1);
}

}  // namespace
}  // namespace ckpt
