#pragma once
// What the safetensors tests share: file bytes, tensors with patterned
// bytes, the save options of plain and ckpt files, and a nested state.

#include <bit>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace ckpt::safetensors_test {

// Name → stored checksum of every entry that has one.
inline std::map<std::string, std::string> checksums_of(const Contents& contents) {
  std::map<std::string, std::string> sums;
  for (const EntryInfo& entry : contents.entries) {
    if (!entry.checksum.empty()) sums.emplace(entry.name, entry.checksum);
  }
  return sums;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float value : values) out.append(reinterpret_cast<const char*>(&value), 4);
  return out;
}

template <class T>
Tensor tensor_of(DType dtype, Shape shape, std::vector<T> values) {
  return Tensor::from_values<T>(dtype, std::move(shape), std::span<const T>(values));
}

// A tensor of `dtype` and `shape` whose bytes are a pattern derived from `seed`.
inline Tensor patterned(DType dtype, Shape shape, int seed = 1) {
  Tensor tensor = Tensor::empty(dtype, std::move(shape));
  auto bytes = tensor.mutable_bytes();
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(static_cast<uint8_t>(i * 31 + seed * 7 + 3));
  return tensor;
}

inline const SaveOptions kPlain{.extras = false, .fsync = false};
inline const SaveOptions kWithExtras{.fsync = false};

// A training state with every kind of leaf: nested maps and lists, integer
// keys (one equal to a string key as text), non-tensor leaves and tensors.
inline Tree nested_state() {
  Tree layer = Tree::map();
  layer.set("weight", patterned(DType::kFloat32, {3, 2}));
  layer.set("bias", patterned(DType::kBFloat16, {3}, 2));
  Tree layers = Tree::list();
  layers.push_back(layer);
  layers.push_back(Tree::map());
  Tree model = Tree::map();
  model.set("layers", layers);
  Tree slot = Tree::map();
  slot.set("exp_avg", patterned(DType::kFloat32, {3, 2}, 3));
  slot.set("step", patterned(DType::kInt64, {}, 4));
  Tree per_param = Tree::map();
  per_param.set(int64_t{0}, slot);
  per_param.set(int64_t{-1}, Tree::list());
  Tree group = Tree::map();
  group.set("lr", 1e-3);
  group.set("betas", Tree::list());
  group.set("nan", std::bit_cast<double>(0x7ff8000000000123ull));
  group.set("amsgrad", false);
  group.set("name", "adam \"β\"");
  group.set("blob", Tree(Bytes{std::string("\0\x01\xff", 3)}));
  group.set("none", Tree());
  Tree optimizer = Tree::map();
  optimizer.set("state", per_param);
  optimizer.set("param_groups", Tree::list()).push_back(group);
  Tree root = Tree::map();
  root.set("model", model);
  root.set("optimizer", optimizer);
  root.set("epoch", int64_t{12});
  root.set("1", patterned(DType::kUInt8, {5}, 5));
  root.set(int64_t{1}, patterned(DType::kUInt8, {5}, 6));
  return root;
}

}  // namespace ckpt::safetensors_test
