// The `checkpoint` state file beside TensorFlow bundles: what each
// SaveOptions::state_file policy does to it, and that TensorFlow reads the
// one ckpt creates.

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "support/files.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

Tensor floats(Shape shape, float start) {
  Tensor tensor = Tensor::empty(DType::kFloat32, std::move(shape));
  auto* values = reinterpret_cast<float*>(tensor.mutable_bytes().data());
  for (uint64_t i = 0; i < tensor.numel(); ++i) values[i] = start + static_cast<float>(i);
  return tensor;
}

Tree state_of(float start) {
  Tree tree = Tree::map();
  tree.set("v", floats({3}, start));
  return tree;
}

class TfStateFileTest : public ::testing::Test {
 protected:
  void save_tf(const std::string& name, const Tree& tree, StateFilePolicy policy) {
    save(dir_ / name, tree, {.format = "tf", .fsync = false, .state_file = policy});
  }
  std::string state() const { return testing::read_file(dir_ / "checkpoint"); }

  testing::TempDir dir_;
};

TEST_F(TfStateFileTest, DirectoryWithAStateFile) {
  Tree tree = Tree::map();
  tree.set("v", floats({3}, 5));
  save(dir_ / "ckpt-1", tree, {.format = "tf"});
  EXPECT_FALSE(fs::exists(dir_ / "checkpoint")) << "no state file is created unasked";
  testing::write_file(dir_ / "checkpoint",
                      "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n");
  EXPECT_EQ(detect(dir_.path()).id(), "tf");
  EXPECT_TRUE(load(dir_.path()) == tree);
  // A save beside an existing state file updates it.
  Tree newer = Tree::map();
  newer.set("v", floats({3}, 50));
  save(dir_ / "ckpt-2", newer, {.format = "tf"});
  const std::string state = testing::read_file(dir_ / "checkpoint");
  EXPECT_NE(state.find("model_checkpoint_path: \"ckpt-2\""), std::string::npos) << state;
  EXPECT_NE(state.find("all_model_checkpoint_paths: \"ckpt-1\""), std::string::npos) << state;
  EXPECT_TRUE(load(dir_.path()) == newer);
}

TEST_F(TfStateFileTest, IfPresentIsTheDefaultAndCreatesNone) {
  EXPECT_EQ(SaveOptions{}.state_file, StateFilePolicy::kIfPresent);
  save_tf("ckpt-1", state_of(1), StateFilePolicy::kIfPresent);
  EXPECT_EQ(dir_.list(), (std::vector<std::string>{"ckpt-1.data-00000-of-00001", "ckpt-1.index"}));
  testing::write_file(dir_ / "checkpoint", "model_checkpoint_path: \"ckpt-1\"\n");
  save_tf("ckpt-2", state_of(2), StateFilePolicy::kIfPresent);
  EXPECT_EQ(state(), "model_checkpoint_path: \"ckpt-2\"\nall_model_checkpoint_paths: \"ckpt-2\"\n");
}

TEST_F(TfStateFileTest, UpdateCreatesTheStateFileAsTensorFlowWritesIt) {
  save_tf("ckpt-1", state_of(1), StateFilePolicy::kUpdate);
  // What tf.train.Checkpoint.save writes after its first save.
  EXPECT_EQ(state(), "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n");
  EXPECT_TRUE(load(dir_.path()) == state_of(1)) << "the directory names the bundle";
  save_tf("ckpt-2", state_of(2), StateFilePolicy::kUpdate);
  EXPECT_EQ(state(),
            "model_checkpoint_path: \"ckpt-2\"\n"
            "all_model_checkpoint_paths: \"ckpt-1\"\n"
            "all_model_checkpoint_paths: \"ckpt-2\"\n");
  save_tf("ckpt-1", state_of(3), StateFilePolicy::kUpdate);  // saved again: moves to the end
  EXPECT_EQ(state(),
            "model_checkpoint_path: \"ckpt-1\"\n"
            "all_model_checkpoint_paths: \"ckpt-2\"\n"
            "all_model_checkpoint_paths: \"ckpt-1\"\n");
  EXPECT_TRUE(load(dir_.path()) == state_of(3));
}

TEST_F(TfStateFileTest, UpdateKeepsTimestampsWhereTheFileHasThem) {
  // As CheckpointManager writes it: one timestamp per path.
  testing::write_file(dir_ / "checkpoint",
                      "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n"
                      "all_model_checkpoint_timestamps: 1700000000.5\nlast_preserved_timestamp: 1699999999.25\n");
  save_tf("ckpt-1", state_of(1), StateFilePolicy::kLeave);
  save_tf("ckpt-2", state_of(2), StateFilePolicy::kUpdate);
  const std::string text = state();
  EXPECT_EQ(text.find("model_checkpoint_path: \"ckpt-2\"\n"), 0u) << text;
  EXPECT_NE(text.find("all_model_checkpoint_timestamps: 1700000000.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("last_preserved_timestamp: 1699999999.25\n"), std::string::npos) << text;
  size_t timestamps = 0;
  for (size_t at = text.find("all_model_checkpoint_timestamps"); at != std::string::npos;
       at = text.find("all_model_checkpoint_timestamps", at + 1)) {
    ++timestamps;
  }
  EXPECT_EQ(timestamps, 2u) << "one per path: " << text;
}

TEST_F(TfStateFileTest, LeaveNeverTouchesTheStateFile) {
  save_tf("ckpt-1", state_of(1), StateFilePolicy::kLeave);
  EXPECT_FALSE(fs::exists(dir_ / "checkpoint")) << "none is created";
  const std::string before = "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"ckpt-1\"\n";
  testing::write_file(dir_ / "checkpoint", before);
  save_tf("best", state_of(2), StateFilePolicy::kLeave);
  EXPECT_EQ(state(), before) << "byte-identical";
  EXPECT_TRUE(load(dir_.path()) == state_of(1)) << "the latest is still ckpt-1";
  EXPECT_TRUE(load(dir_ / "best") == state_of(2));
  // kLeave does not even read it: a state file that does not parse is no
  // error then, while the other policies refuse to rewrite it.
  const std::string garbage = "this is not a CheckpointState {{{";
  testing::write_file(dir_ / "checkpoint", garbage);
  save_tf("ckpt-3", state_of(3), StateFilePolicy::kLeave);
  EXPECT_EQ(state(), garbage);
  for (const StateFilePolicy policy : {StateFilePolicy::kIfPresent, StateFilePolicy::kUpdate}) {
    try {
      save_tf("ckpt-4", state_of(4), policy);
      ADD_FAILURE() << "a state file that does not parse was rewritten";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
    }
    EXPECT_EQ(state(), garbage);
  }
}

TEST_F(TfStateFileTest, AStateFileThatDoesNotParseLogsNothing) {
  // protobuf's text parser logs its complaints (and warnings about unknown
  // fields) on stderr unless they are collected: ckpt's error carries them.
  testing::write_file(dir_ / "checkpoint", "unknown_field: 1\nmodel_checkpoint_path: {{{\n");
  ::testing::internal::CaptureStderr();
  try {
    save_tf("ckpt-1", state_of(1), StateFilePolicy::kIfPresent);  // reads it to update it
    ADD_FAILURE() << "a state file that does not parse was read";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();
    EXPECT_NE(error.message().find("line 2"), std::string::npos) << error.what();
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// The peer: TensorFlow from the project's .venv finds the bundle that the
// state file ckpt created names, and restores it.
constexpr std::string_view kLatestCheckpointPeer = R"(
import sys
try:
    import numpy as np
    import tensorflow as tf
except ImportError:
    sys.exit(77)
directory = sys.argv[1]
latest = tf.train.latest_checkpoint(directory)
state = tf.train.get_checkpoint_state(directory)
paths = [p.rsplit("/", 1)[-1] for p in state.all_model_checkpoint_paths]
value = tf.train.load_checkpoint(latest).get_tensor("v")
print(latest.rsplit("/", 1)[-1], ",".join(paths), np.asarray(value).tolist())
)";

TEST_F(TfStateFileTest, TensorFlowFindsTheLatestCheckpointInTheStateFileCkptCreated) {
  const fs::path python = fs::path(CKPT_SOURCE_DIR) / ".venv" / "bin" / "python";
  if (!fs::exists(python)) GTEST_SKIP() << "no " << python;
  fs::create_directory(dir_ / "run");
  save(dir_ / "run" / "ckpt-1", state_of(1), {.format = "tf", .state_file = StateFilePolicy::kUpdate});
  save(dir_ / "run" / "ckpt-2", state_of(7), {.format = "tf", .state_file = StateFilePolicy::kUpdate});
  save(dir_ / "run" / "best", state_of(0), {.format = "tf", .state_file = StateFilePolicy::kLeave});
  testing::write_file(dir_ / "peer.py", kLatestCheckpointPeer);
  const std::string command = python.string() + " " + (dir_ / "peer.py").string() + " " + (dir_ / "run").string() +
                              " > " + (dir_ / "peer.out").string() + " 2> " + (dir_ / "peer.err").string();
  const int status = std::system(command.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "tensorflow cannot be imported by " << python;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << testing::read_file(dir_ / "peer.err");
  EXPECT_EQ(testing::read_file(dir_ / "peer.out"), "ckpt-2 ckpt-1,ckpt-2 [7.0, 8.0, 9.0]\n");
}

}  // namespace
}  // namespace ckpt
