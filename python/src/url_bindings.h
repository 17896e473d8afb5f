#pragma once
// Checkpoints named by URL in the extension module (ckpt/url.h): fetch,
// the cache's listing and removal, and the FetchOptions that ckpt.load and
// ckpt.open take as keywords. The Python API over them is in
// python/ckpt/__init__.py (fetch, cache_list, ...).

#include <pybind11/pybind11.h>

#include <string>

#include "ckpt/url.h"

namespace ckpt::python {

namespace py = pybind11;

// FetchOptions from the Python keywords: `offline` None (the environment's
// CKPT_OFFLINE) or a bool, `progress` None (auto), True or False.
FetchOptions fetch_options(const std::string& sha256, const py::object& offline, bool check_hash,
                           const py::object& progress);

// Adds fetch, cache_dir, cache_list, cache_remove and cache_clear to `m`.
void bind_url(py::module_& m);

}  // namespace ckpt::python
