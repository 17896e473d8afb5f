#include "io/file_hashes.h"

namespace ckpt::detail {
namespace {

thread_local FileHashes* t_current_hashes = nullptr;

}  // namespace

FileHashes::FileHashes() : previous_(t_current_hashes) { t_current_hashes = this; }

FileHashes::~FileHashes() { t_current_hashes = previous_; }

std::vector<HashedFile> FileHashes::files() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return files_;
}

FileHashes* FileHashes::current() { return t_current_hashes; }

void FileHashes::add(HashedFile file) {
  std::lock_guard<std::mutex> guard(mutex_);
  files_.push_back(std::move(file));
}

}  // namespace ckpt::detail
