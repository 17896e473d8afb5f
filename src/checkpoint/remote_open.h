#pragma once
// Lazy opens of checkpoints named by URL (LoadOptions::remote_lazy): the
// file's head is fetched into the cache's sparse file and read there; each
// tensor becomes a deferred buffer that fetches its byte range (and checks
// it) when first used.

#include <string>

#include "ckpt/format.h"

namespace ckpt::detail {

// Opens `url` as open() does, lazily over the network where the format
// allows (safetensors); otherwise downloads it whole first.
Contents open_remote(const std::string& url, const LoadOptions& options);

// Fetches, in one pass per remote file with neighbouring ranges coalesced,
// the bytes of every deferred tensor in `tensors` that a lazy remote open
// made. Others are left alone. Throws as RemoteFile::ensure.
void prefetch_remote(const std::vector<const Tensor*>& tensors);

}  // namespace ckpt::detail
