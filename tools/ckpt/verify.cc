// ckpt verify PATH: full validation of a checkpoint, every stored checksum
// included (ckpt::verify reads every byte).

#include <iostream>
#include <memory>
#include <string>

#include "ckpt/checkpoint.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct VerifyArguments {
  std::string path;
};

int run_verify(const VerifyArguments& arguments) {
  const Contents contents = verify(arguments.path);
  uint64_t total = 0;
  for (const EntryInfo& entry : contents.entries) total += entry.nbytes;
  std::cout << "OK " << arguments.path << " (" << count_text(contents.entries.size(), "tensor")
            << ", " << count_text(total, "byte") << ", checksums: ";
  if (contents.checksum == ChecksumKind::kNone) {
    std::cout << "none stored";
  } else {
    std::cout << checksum_name(contents.checksum) << " verified";
  }
  std::cout << ")\n";
  return kExitOk;
}

}  // namespace

Command add_verify_command(CLI::App& app) {
  auto arguments = std::make_shared<VerifyArguments>();
  CLI::App* command = app.add_subcommand(
      "verify", "Validate a checkpoint completely, checking every stored checksum");
  command->add_option("path", arguments->path, "The checkpoint file")->required();
  return {command, [arguments] { return run_verify(*arguments); }, "ckpt verify PATH"};
}

}  // namespace ckpt::tool
