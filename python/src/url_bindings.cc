#include "url_bindings.h"

#include "ckpt/document.h"
#include "values.h"

namespace ckpt::python {

FetchOptions fetch_options(const std::string& sha256, const py::object& offline, bool check_hash,
                           const py::object& progress) {
  FetchOptions options{.sha256 = sha256, .check_hash_prefix = check_hash};
  if (!offline.is_none()) options.offline = offline.cast<bool>();
  if (!progress.is_none()) options.progress = progress.cast<bool>() ? Progress::kAlways : Progress::kNever;
  return options;
}

void bind_url(py::module_& m) {
  m.def(
      "fetch",
      [](const std::string& url, const std::string& sha256, py::object offline, bool check_hash, py::object progress) {
        const FetchOptions options = fetch_options(sha256, offline, check_hash, progress);
        py::gil_scoped_release release;
        return fetch(url, options).string();
      },
      py::arg("url"), py::kw_only(), py::arg("sha256") = "", py::arg("offline") = py::none(),
      py::arg("check_hash") = false, py::arg("progress") = py::none());
  m.def("is_url", [](const std::string& text) { return is_url(text); }, py::arg("text"));
  m.def("cache_dir", [] { return cache_directory().string(); });
  m.def("cache_list", [] {
    std::vector<CacheEntry> entries;
    std::filesystem::path dir;
    {
      py::gil_scoped_release release;
      dir = cache_directory();
      entries = cache_entries();
    }
    return value_out(cache_document(dir, entries), Framework::kNumpy);
  });
  m.def(
      "cache_remove",
      [](const std::string& url) {
        py::gil_scoped_release release;
        return cache_remove(url);
      },
      py::arg("url"));
  m.def("cache_clear", [] {
    py::gil_scoped_release release;
    return cache_clear();
  });
}

}  // namespace ckpt::python
