// The input is a JSON document of the manager's run directories: parsed as a
// step directory's checkpoint.json (parse_step_record) and as the run's
// ckpt_manager.json (parse_run_config), the records of
// src/manager/step_record.h and run_config.h. What parses is walked: the
// record is written back and parsed again (it must give the same record),
// and retention runs over a listing made of the record with the config's
// policies.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "ckpt/error.h"
#include "fuzz_support.h"
#include "manager/run_config.h"
#include "manager/step_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ckpt::fuzz::run_one(size, [&] {
    const std::string_view json(reinterpret_cast<const char*>(data), size);
    std::vector<ckpt::CheckpointEntry> entries;
    try {
      const ckpt::detail::StepRecord record = ckpt::detail::parse_step_record(json, "input/checkpoint.json");
      const ckpt::detail::StepRecord again =
          ckpt::detail::parse_step_record(ckpt::detail::step_record_json(record), "input/again.json");
      if (again.step != record.step || again.files.size() != record.files.size() || again.state != record.state ||
          again.metrics.size() != record.metrics.size()) {
        std::abort();  // the writer and the parser disagree
      }
      for (int64_t i = 0; i < 3; ++i) {
        ckpt::CheckpointEntry entry;
        entry.step = record.step / 3 * i + i;
        entry.epoch = record.epoch;
        entry.metrics = record.metrics;
        entry.time = record.time + static_cast<double>(i);
        entries.push_back(entry);
      }
    } catch (const ckpt::Error&) {
    }
    try {
      const ckpt::detail::RunConfig config = ckpt::detail::parse_run_config(json, "input/ckpt_manager.json");
      (void)ckpt::detail::run_config_json(config).size();
      ckpt::detail::fill_kept_by(entries, ckpt::detail::effective_policies(config));
    } catch (const ckpt::Error&) {
    }
  });
}
