// The input is an Orbax metadata document: parsed as _METADATA
// (parse_tree_metadata, then build_tree with every leaf a None) and as
// _CHECKPOINT_METADATA (flatten_checkpoint_metadata, item_names), the JSON
// files of formats/orbax/metadata.h, without the directory around them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ckpt/error.h"
#include "ckpt/tree.h"
#include "formats/orbax/metadata.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    std::string_view json(reinterpret_cast<const char*>(data), size);
    ckpt::ErrorContext context{.path = "input/_METADATA"};
    try {
      auto leaves = ckpt::orbax_detail::parse_tree_metadata(json, context);
      ckpt::Tree tree = ckpt::orbax_detail::build_tree(
          leaves, [](const ckpt::orbax_detail::MetadataLeaf&) { return ckpt::Tree(); }, context);
      for (const ckpt::Tree::Leaf& leaf : tree.leaves()) (void)leaf.name.size();
    } catch (const ckpt::Error&) {
    }
    try {
      auto metadata = ckpt::orbax_detail::flatten_checkpoint_metadata(json, {.path = "input/_CHECKPOINT_METADATA"});
      (void)metadata.size();
      auto items = ckpt::orbax_detail::item_names(json);
      (void)items.size();
    } catch (const ckpt::Error&) {
    }
  });
}
