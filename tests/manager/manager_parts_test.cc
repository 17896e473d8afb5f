// A state saved in parts (Manager::save with StateParts: per-module files):
// one commit holding every part, each part deduplicated on its own, loads
// that return the union, and the records and listings that name the parts.

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <span>

#include "ckpt/checkpoint.h"
#include "ckpt/error.h"
#include "ckpt/manager.h"
#include "manager/manager_support.h"
#include "manager/step_record.h"
#include "support/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using namespace ckpt::testing;

Tree tensor_map(std::initializer_list<std::pair<const char*, float>> values) {
  Tree tree = Tree::map();
  for (const auto& [name, value] : values) {
    const std::vector<float> data{value, value + 1, value + 2};
    tree.set(name, Tensor::from_values<float>(DType::kFloat32, {3}, data));
  }
  return tree;
}

std::vector<StatePart> model_parts(float head, float encoder) {
  return {{.name = "state", .state = tensor_map({{"head.w", head}})},
          {.name = "encoder", .state = tensor_map({{"encoder.w", encoder}, {"encoder.b", encoder * 2}})}};
}

Tree model_union(float head, float encoder) {
  return tensor_map({{"head.w", head}, {"encoder.w", encoder}, {"encoder.b", encoder * 2}});
}

TEST(ManagerPartsTest, OnlyTheChangedPartIsWritten) {
  TempDir dir;
  Manager manager(dir.path(), {.keep_last = 1});
  manager.save(1, model_parts(1, 10));
  const fs::path step1 = dir / "step-00000001";
  const ino_t encoder_inode = inode_of(step1 / "encoder.safetensors");
  const ino_t head_inode = inode_of(step1 / "state.safetensors");
  manager.save(2, model_parts(2, 10));  // the encoder is frozen, the head trained
  const fs::path step2 = dir / "step-00000002";
  EXPECT_EQ(inode_of(step2 / "encoder.safetensors"), encoder_inode) << "the unchanged part is linked";
  EXPECT_NE(inode_of(step2 / "state.safetensors"), head_inode) << "the changed part is written";
  manager.wait();
  EXPECT_FALSE(fs::exists(step1)) << "pruned: its encoder file lives on in step 2";
  EXPECT_TRUE(manager.load(2) == model_union(2, 10));

  // The record names both parts and every file, with the linked file's size.
  const detail::StepRecord record = detail::read_step_record(step2);
  EXPECT_EQ(record.state, "state.safetensors");
  ASSERT_EQ(record.parts.size(), 1u);
  EXPECT_EQ(record.parts[0].state, "encoder.safetensors");
  ASSERT_EQ(record.files.size(), 2u);
  EXPECT_EQ(record.files[0].path, "encoder.safetensors");
  EXPECT_EQ(record.files[0].size, fs::file_size(step2 / "encoder.safetensors"));
  EXPECT_EQ(record.files[1].path, "state.safetensors");

  // The listing gives every part's path, each a real file ckpt::load opens.
  const std::vector<CheckpointEntry> entries = manager.list();
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].path, step2 / "state.safetensors");
  EXPECT_EQ(entries[0].parts, (std::vector<fs::path>{step2 / "state.safetensors", step2 / "encoder.safetensors"}));
  EXPECT_TRUE(load(entries[0].parts[1]) == tensor_map({{"encoder.w", 10}, {"encoder.b", 20}}));
  EXPECT_TRUE(load_checkpoint(entries[0]) == model_union(2, 10));
  const Tree document = listing_document(list_run_directory(dir.path()));
  EXPECT_EQ(document.at("checkpoints").child(0).at("parts").size(), 2u);

  // Both parts changed: both written.
  manager.save(3, model_parts(3, 11));
  EXPECT_NE(inode_of(dir / "step-00000003" / "encoder.safetensors"), encoder_inode);
  EXPECT_TRUE(manager.load(3) == model_union(3, 11));
}

TEST(ManagerPartsTest, RestoreLatestRestoresTheUnion) {
  TempDir dir;
  {
    Manager manager(dir.path());
    manager.save(5, model_parts(5, 50));
    manager.close();
  }
  Manager reopened(dir.path());
  const std::optional<RestoreReport> report = reopened.restore_latest(model_union(0, 0));
  ASSERT_TRUE(report.has_value());
  EXPECT_TRUE(report->ok()) << report->summary();
  EXPECT_TRUE(report->tree == model_union(5, 50));
}

TEST(ManagerPartsTest, TensorFlowPrefixPartsKeepTheirOwnFiles) {
  TempDir dir;
  Manager manager(dir.path(), {.format = "tf"});
  manager.save(1, model_parts(1, 10));
  manager.save(2, model_parts(2, 10));
  const detail::StepRecord record = detail::read_step_record(dir / "step-00000002");
  std::set<std::string> encoder_files;
  for (const detail::RecordedFile& file : record.files) {
    if (file.path.starts_with("encoder.")) encoder_files.insert(file.path);
  }
  ASSERT_FALSE(encoder_files.empty());
  for (const std::string& file : encoder_files) {
    EXPECT_EQ(inode_of(dir / "step-00000002" / file), inode_of(dir / "step-00000001" / file)) << file;
  }
  EXPECT_NE(inode_of(dir / "step-00000002" / "state.index"), inode_of(dir / "step-00000001" / "state.index"));
  EXPECT_TRUE(manager.load(2) == model_union(2, 10));
}

TEST(ManagerPartsTest, BadPartsAreRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  Manager manager(dir.path());
  const auto refused = [&](std::vector<StatePart> parts, const std::string& why) {
    try {
      manager.save(1, parts);
      ADD_FAILURE() << why << ": saved";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kInvalidArgument) << why << ": " << error.what();
    }
    EXPECT_TRUE(manager.list().empty()) << why;
  };
  refused({}, "no part");
  refused({{.name = "", .state = Tree::map()}}, "an empty name");
  refused({{.name = "enc.oder", .state = Tree::map()}}, "a dot in the name");
  refused({{.name = "../x", .state = Tree::map()}}, "a path");
  refused({{.name = "a", .state = Tree::map()}, {.name = "a", .state = Tree::map()}}, "one name twice");
  refused({{.name = "a", .state = Tree::map()}, {.name = "b", .state = Tree(int64_t{1})}}, "a part that is no map");
}

TEST(ManagerPartsTest, PartsThatOverlapAreCorruptOnLoad) {
  TempDir dir;
  Manager manager(dir.path());
  // The manager writes what it is given; a leaf in two parts is found when
  // the union is taken, naming the entry.
  manager.save(1, std::vector<StatePart>{{.name = "state", .state = tensor_map({{"x", 1}})},
                                         {.name = "other", .state = tensor_map({{"x", 2}})}});
  try {
    manager.load(1);
    ADD_FAILURE() << "loaded";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
    EXPECT_EQ(error.context().entry, "x") << error.what();
  }
}

TEST(ManagerPartsTest, AsynchronousPartsAreSnapshotted) {
  TempDir dir;
  Manager manager(dir.path());
  std::vector<StatePart> parts = model_parts(1, 10);
  manager.save(1, parts, {.blocking = false});
  // The caller changes its tensors at once; the checkpoint holds the values
  // of the save call.
  for (StatePart& part : parts) {
    part.state.for_each_tensor([](Tensor& tensor) {
      const std::span<std::byte> bytes = tensor.mutable_bytes();
      std::fill(bytes.begin(), bytes.end(), std::byte{0xff});
    });
  }
  manager.wait();
  EXPECT_TRUE(manager.load(1) == model_union(1, 10));
}

}  // namespace
}  // namespace ckpt
