// ckpt fetch URL and ckpt cache ls|rm|clear: the local cache of checkpoints
// named by URL (ckpt/url.h). Every reading command takes a URL where it
// takes a path; these two look after the cache itself.

#include <iostream>
#include <memory>
#include <string>

#include "ckpt/document.h"
#include "ckpt/url.h"
#include "commands.h"
#include "output.h"

namespace ckpt::tool {
namespace {

struct FetchArguments {
  std::string url;
  std::string sha256;
  bool offline = false;
  bool check_hash = false;
};

struct CacheArguments {
  bool json = false;
  std::string url;  // rm
};

void print_entries(const std::vector<CacheEntry>& entries) {
  std::cout << "cache: " << cache_directory().string() << " (" << entries.size() << (entries.size() == 1 ? " entry" : " entries") << ")\n";
  if (entries.empty()) return;
  Table table;
  table.add({"size", "held", "sha256", "url", "path"});
  for (const CacheEntry& entry : entries) {
    table.add({size_text(entry.size), entry.complete ? "complete" : size_text(entry.present),
               entry.sha256.empty() ? "-" : entry.sha256.substr(0, 16), one_line(entry.url),
               one_line(entry.path.string())});
  }
  table.print(std::cout);
}

void print_count(bool json, const char* what, size_t count) {
  if (json) {
    std::cout << "{\"" << what << "\":" << count << "}\n";
  } else {
    std::cout << what << " " << count << (count == 1 ? " entry" : " entries") << "\n";
  }
}

}  // namespace

Command add_fetch_command(CLI::App& app) {
  auto arguments = std::make_shared<FetchArguments>();
  CLI::App* command = app.add_subcommand(
      "fetch", "Download a checkpoint named by URL into the local cache (once; verified by SHA-256) and print its path");
  command->add_option("url", arguments->url, "An http(s) URL (a #sha256=<hex> fragment is checked)")->required();
  command->add_option("--sha256", arguments->sha256, "The file's expected SHA-256 (64 hex digits)");
  command->add_flag("--offline", arguments->offline, "Use only the cache (as CKPT_OFFLINE=1)");
  command->add_flag("--check-hash", arguments->check_hash,
                    "torch.hub's check_hash: a name <stem>-<hex>.<ext> must be the start of the SHA-256");
  return {command,
          [arguments] {
            FetchOptions options{.sha256 = arguments->sha256, .check_hash_prefix = arguments->check_hash};
            if (arguments->offline) options.offline = true;
            std::cout << fetch(arguments->url, options).string() << '\n';
            return kExitOk;
          },
          "ckpt fetch URL [--sha256 HEX] [--offline] [--check-hash]"};
}

Command add_cache_command(CLI::App& app) {
  auto arguments = std::make_shared<CacheArguments>();
  CLI::App* command = app.add_subcommand(
      "cache", "The local cache of checkpoints named by URL ($CKPT_CACHE, else $XDG_CACHE_HOME/ckpt, else "
               "~/.cache/ckpt): ls, rm URL, clear");
  command->require_subcommand(1);
  CLI::App* ls = command->add_subcommand("ls", "List the cached entries: size, how much is held, sha256, URL, path");
  ls->add_flag("--json", arguments->json, "Print one JSON object instead of a table");
  CLI::App* rm = command->add_subcommand("rm", "Remove the entries of a URL");
  rm->add_option("url", arguments->url, "The URL")->required();
  rm->add_flag("--json", arguments->json, "Print {\"removed\": N}");
  CLI::App* clear = command->add_subcommand("clear", "Remove every entry");
  clear->add_flag("--json", arguments->json, "Print {\"removed\": N}");
  return {command,
          [arguments, ls, rm, clear] {
            if (ls->parsed()) {
              const std::vector<CacheEntry> entries = cache_entries();
              if (arguments->json) {
                std::cout << to_json(cache_document(cache_directory(), entries)) << '\n';
              } else {
                print_entries(entries);
              }
            } else if (rm->parsed()) {
              print_count(arguments->json, "removed", cache_remove(arguments->url));
            } else if (clear->parsed()) {
              print_count(arguments->json, "removed", cache_clear());
            }
            return kExitOk;
          },
          "ckpt cache ls [--json] | ckpt cache rm URL [--json] | ckpt cache clear [--json]"};
}

}  // namespace ckpt::tool
