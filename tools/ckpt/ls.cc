// ckpt ls RUN_DIR [--json]: the checkpoints of a run directory (ckpt's own
// layout or a foreign one, ckpt/run_directory.h), oldest first.

#include <cmath>
#include <ctime>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "ckpt/document.h"
#include "ckpt/run_directory.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct LsArguments {
  std::string run_dir;
  bool json = false;
};

std::string number_text(const std::optional<int64_t>& value) { return value ? std::to_string(*value) : "-"; }

// "2026-12-02 04:53:00" in UTC.
std::string time_text(double seconds) {
  if (!std::isfinite(seconds) || seconds <= 0) return "-";
  const std::time_t whole = static_cast<std::time_t>(seconds);
  std::tm parts{};
  if (gmtime_r(&whole, &parts) == nullptr) return "-";
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &parts);
  return text;
}

std::string metrics_text(const std::map<std::string, double>& metrics) {
  if (metrics.empty()) return "-";
  std::ostringstream text;
  bool first = true;
  for (const auto& [name, value] : metrics) {
    text << (first ? "" : " ") << name << '=' << leaf_text(Tree(value));
    first = false;
  }
  return text.str();
}

std::string kept_by_text(const std::vector<std::string>& policies) {
  if (policies.empty()) return "-";
  std::string text;
  for (const std::string& policy : policies) text += (text.empty() ? "" : ",") + policy;
  return text;
}

void print_table(const RunListing& listing) {
  std::cout << "run dir: " << listing.run_dir.string() << " (layout " << listing.layout << ", "
            << count_text(listing.checkpoints.size(), "checkpoint") << ")\n";
  if (listing.checkpoints.empty()) return;
  Table table;
  table.add({"step", "epoch", "size", "time (UTC)", "kept by", "metrics", "path"});
  for (const CheckpointEntry& entry : listing.checkpoints) {
    table.add({number_text(entry.step), number_text(entry.epoch), size_text(entry.size), time_text(entry.time),
               kept_by_text(entry.kept_by), one_line(metrics_text(entry.metrics)), one_line(entry.path.string())});
  }
  table.print(std::cout);
}

}  // namespace

Command add_ls_command(CLI::App& app) {
  auto arguments = std::make_shared<LsArguments>();
  CLI::App* command = app.add_subcommand(
      "ls", "List the checkpoints of a run directory (ckpt's, RETURNN's, TensorFlow's, Flax's, Lightning's, "
            "Orbax's): step, epoch, metrics, size, time, the policies that keep each");
  command->add_option("run_dir", arguments->run_dir, "The run directory")->required();
  command->add_flag("--json", arguments->json, "Print one JSON object instead of a table");
  return {command,
          [arguments] {
            const RunListing listing = list_run_directory(arguments->run_dir);
            if (arguments->json) {
              std::cout << to_json(listing_document(listing)) << '\n';
            } else {
              print_table(listing);
            }
            return kExitOk;
          },
          "ckpt ls RUN_DIR [--json]"};
}

}  // namespace ckpt::tool
