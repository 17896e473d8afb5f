// The input is a TensorFlow bundle as records and files, packed as
// fuzz_support.h's unpack_directory packs a directory ("\n@@" NAME "\n"
// CONTENTS): a NAME starting with '@' is a file beside the index
// ("@data-00000-of-00001" → model.data-00000-of-00001), any other NAME is a
// record of the index (the empty name is the BundleHeaderProto, the others
// BundleEntryProtos). The index is built with valid checksums
// (build_index_table, records sorted, the first of equal keys kept), so the
// mutations reach the protos: dtypes, shapes, shard ids, offsets, sizes,
// slices, CRCs, num_shards, endianness, versions. Then walked as the tf
// format.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "formats/tf/index_table.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    std::vector<ckpt::tf_detail::IndexRecord> records;
    std::string files;  // re-packed for unpack_directory
    for (const auto& [name, value] : ckpt::fuzz::packed_files(text)) {
      if (records.size() >= 4096) break;
      if (name.starts_with('@')) {
        files.append("\n@@model.").append(name.substr(1)).append("\n").append(value);
      } else {
        records.emplace_back(std::string(name), std::string(value));
      }
    }
    std::stable_sort(records.begin(), records.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    records.erase(std::unique(records.begin(), records.end(),
                              [](const auto& a, const auto& b) { return a.first == b.first; }),
                  records.end());
    auto dir = ckpt::fuzz::unpack_directory(
        "bundle", {reinterpret_cast<const uint8_t*>(files.data()), files.size()});
    std::string index = ckpt::tf_detail::build_index_table(records);
    ckpt::fuzz::write_file("bundle/model.index", {reinterpret_cast<const uint8_t*>(index.data()), index.size()});
    ckpt::fuzz::walk_checkpoint(dir / "model", "tf", size);
  });
}
