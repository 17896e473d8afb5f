// _ckpt: the C++ core as a Python extension (pybind11): the bindings, error
// translation, the lazy handle and diff reports. Values cross the boundary
// in values.{h,cc}. The public API is the pure-Python package `ckpt`
// (python/ckpt/), which wraps these functions.
//
// Tensors cross the boundary without copies: a loaded tensor becomes a numpy
// array (or a torch tensor made from one) whose memory is the mapped file or
// ckpt's heap block, kept alive by a capsule holding the Buffer; an array or
// torch tensor being saved is lent to the core (its memory viewed, the Python
// object kept alive until the save is done). The GIL is released while files
// are read and written.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/cli.h"
#include "ckpt/diff.h"
#include "ckpt/document.h"
#include "ckpt/error.h"
#include "ckpt/memory.h"
#include "ckpt/checksum.h"
#include "distributed_bindings.h"
#include "manager_bindings.h"
#include "modules_bindings.h"
#include "restore_bindings.h"
#include "safetensors_bindings.h"
#include "url_bindings.h"
#include "values.h"
#include "weight_norm_bindings.h"

namespace py = pybind11;

namespace ckpt::python {
namespace {

// ---------------------------------------------------------------- errors

// The exception classes, defined in python/ckpt/_errors.py and handed over
// by the package at import (register_errors).
struct ErrorClasses {
  py::object corrupt;
  py::object unsupported;
  py::object mismatch;
  py::object remote;
};
ErrorClasses& error_classes() {
  static ErrorClasses* classes = new ErrorClasses();  // never destroyed: outlives the interpreter safely
  return *classes;
}

// Text of an error as a Python str that never fails to decode: a message
// quotes file text with escapes already, but a path or an entry may hold any
// bytes; those become "surrogateescape" characters as os.fsdecode makes them.
py::object error_text(const std::string& text, const char* errors = "surrogateescape") {
  PyObject* str = PyUnicode_DecodeUTF8(text.data(), static_cast<py::ssize_t>(text.size()), errors);
  if (str == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(str);
}

void raise_python(const Error& error) {
  const ErrorClasses& classes = error_classes();
  const py::object what = error_text(error.what(), "backslashreplace");
  PyObject* type = nullptr;
  switch (error.code()) {
    case ErrorCode::kNotFound: {
      py::object instance = py::reinterpret_steal<py::object>(PyObject_CallFunction(
          PyExc_FileNotFoundError, "iOO", ENOENT, what.ptr(), error_text(error.context().path.string()).ptr()));
      if (!instance) throw py::error_already_set();
      PyErr_SetObject(PyExc_FileNotFoundError, instance.ptr());
      return;
    }
    case ErrorCode::kCorrupt: type = classes.corrupt.ptr(); break;
    case ErrorCode::kUnsupported: type = classes.unsupported.ptr(); break;
    case ErrorCode::kMismatch: type = classes.mismatch.ptr(); break;
    case ErrorCode::kInvalidArgument: type = PyExc_ValueError; break;
    case ErrorCode::kIo: type = PyExc_OSError; break;
    case ErrorCode::kRemote: type = classes.remote ? classes.remote.ptr() : PyExc_OSError; break;
  }
  if (type == nullptr) type = PyExc_RuntimeError;  // before register_errors
  py::object instance = py::reinterpret_steal<py::object>(PyObject_CallFunctionObjArgs(type, what.ptr(), nullptr));
  if (!instance) throw py::error_already_set();
  // Structured context for callers that branch on it.
  const ErrorContext& context = error.context();
  PyObject_SetAttrString(instance.ptr(), "path",
                         context.path.empty() ? Py_None : error_text(context.path.string()).ptr());
  PyObject_SetAttrString(instance.ptr(), "entry", context.entry.empty() ? Py_None : error_text(context.entry).ptr());
  PyObject_SetAttrString(instance.ptr(), "offset",
                         context.offset ? py::int_(*context.offset).ptr() : Py_None);
  PyObject_SetAttrString(instance.ptr(), "reason", error_text(error.message(), "backslashreplace").ptr());
  PyErr_SetObject(type, instance.ptr());
}

// ---------------------------------------------------------------- handle

py::dict entry_info(const EntryInfo& entry, const std::string& checksum_kind) {
  py::dict info;
  info["dtype"] = std::string(dtype_name(entry.dtype));
  info["shape"] = py::tuple(py::cast(entry.shape));
  info["offset"] = entry.offset;
  info["nbytes"] = entry.nbytes;
  info["checksum"] = entry.checksum.empty() ? py::object(py::none()) : py::object(py::str(entry.checksum));
  info["checksum_kind"] = checksum_kind;
  return info;
}

size_t count_tensors(const Tree& tree) {
  if (tree.is_tensor()) return 1;
  size_t count = 0;
  for (const TreeEntry& entry : tree.entries()) count += count_tensors(entry.value);
  return count;
}

class Handle {
 public:
  // `path` names the file in errors.
  Handle(Contents contents, Framework framework, std::string path)
      : contents_(std::move(contents)), framework_(framework), path_(std::move(path)) {
    for (size_t i = 0; i < contents_.entries.size(); ++i) index_.emplace(contents_.entries[i].name, i);
    add_aliases();
  }

  // Entries in file order, then tied names stored once (aliases).
  std::vector<std::string> keys() const {
    check_open();
    std::vector<std::string> names;
    names.reserve(contents_.entries.size() + aliases_.size());
    for (const EntryInfo& entry : contents_.entries) names.push_back(entry.name);
    for (const std::string& alias : aliases_) names.push_back(alias);
    return names;
  }
  py::dict info(const std::string& name) const { return entry_info(entry(name), checksum_kind()); }
  // `writable`: a numpy array that may be written (the memory is private:
  // a copy-on-write mapping or heap); torch tensors always may be.
  // `copy`: in fresh memory of its own, read from the file itself (positioned
  // reads; a zstd chunk decoded again) where the tensor is still in it, so
  // that what a caller wrote into an earlier result does not show.
  py::object get(const std::string& name, bool writable, bool copy) const {
    entry(name);
    const Tensor& tensor = contents_.tree.at(name).tensor();
    if (tensor.buffer().deferred()) {  // fetched or gathered on first use (a lazy remote open: the network)
      py::gil_scoped_release unlocked;
      naming_file(path_, [&] { tensor.buffer().data(); });
    }
    if (!copy) return tensor_out(tensor, framework_, writable);
    Tensor fresh;
    {
      py::gil_scoped_release unlocked;
      fresh = tensor.copy();
    }
    return tensor_out(fresh, framework_, writable);
  }
  py::object value(const std::string& name) const {
    check_open();
    const Tree* found = contents_.tree.find_path(name);
    if (found == nullptr) throw py::key_error("no entry named '" + name + "'");
    return naming_file(path_, [&] { return value_out(*found, framework_); });
  }
  py::object tree() const {
    check_open();
    {
      py::gil_scoped_release unlocked;
      naming_file(path_, [&] { prefetch(contents_.tree); });  // a lazy remote open's tensors, coalesced
    }
    return naming_file(path_, [&] { return value_out(contents_.tree, framework_); });
  }
  py::dict metadata() const {
    check_open();
    return naming_file(path_, [&] { return metadata_out(contents_.metadata); });
  }
  std::string format() const {
    check_open();
    return contents_.format;
  }
  int format_version() const { return contents_.format_version; }
  std::string checksum_kind() const { return std::string(checksum_name(contents_.checksum)); }
  bool contains(const std::string& name) const {
    check_open();
    return index_.count(name) != 0;
  }
  size_t size() const {
    check_open();
    return contents_.entries.size() + aliases_.size();
  }
  // Names and values of the non-tensor leaves.
  py::dict values() const {
    check_open();
    py::dict out;
    for (const Tree::Leaf& leaf : contents_.tree.leaves()) {
      if (!leaf.value->is_tensor()) {
        out[py::str(leaf.name)] = naming_file(path_, [&] { return value_out(*leaf.value, framework_); });
      }
    }
    return out;
  }
  void close() {
    contents_ = Contents();
    index_.clear();
    aliases_.clear();
    closed_ = true;
  }
  bool closed() const { return closed_; }

 private:
  void check_open() const {
    if (closed_) throw py::value_error("the checkpoint handle is closed");
  }
  // Tensor leaves that no entry lists share the memory of one that does (a
  // tied weight stored once): they are keys too, with the stored one's info.
  void add_aliases() {
    if (count_tensors(contents_.tree) <= contents_.entries.size()) return;  // none left out
    std::unordered_map<const std::byte*, size_t> stored;
    for (size_t i = 0; i < contents_.entries.size(); ++i) {
      const Tree* leaf = contents_.tree.find_path(contents_.entries[i].name);
      if (leaf != nullptr && leaf->is_tensor() && leaf->tensor().buffer().address() != nullptr) {
        stored.emplace(leaf->tensor().buffer().address(), i);
      }
    }
    for (const Tree::Leaf& leaf : contents_.tree.tensor_leaves()) {
      if (index_.count(leaf.name) != 0) continue;
      const auto found = stored.find(leaf.value->tensor().buffer().address());
      if (found == stored.end()) continue;
      index_.emplace(leaf.name, found->second);
      aliases_.push_back(leaf.name);
    }
  }

  const EntryInfo& entry(const std::string& name) const {
    check_open();
    const auto found = index_.find(name);
    if (found == index_.end()) throw py::key_error("no tensor named '" + name + "'");
    return contents_.entries[found->second];
  }

  Contents contents_;
  Framework framework_;
  std::string path_;
  std::unordered_map<std::string, size_t> index_;
  std::vector<std::string> aliases_;
  bool closed_ = false;
};

// ckpt::open with the GIL released.
Contents open_contents(const std::string& path, const LoadOptions& options) {
  py::gil_scoped_release release;
  return ckpt::open(path, options);
}

}  // namespace
}  // namespace ckpt::python

PYBIND11_MODULE(_ckpt, m) {
  using namespace ckpt;
  using namespace ckpt::python;
  m.doc() = "ckpt's C++ core; use the `ckpt` package instead of this module.";
  init_values();

  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const Error& e) {
      raise_python(e);
    }
  });

  m.def("register_errors", [](py::object corrupt, py::object unsupported, py::object mismatch, py::object remote) {
    error_classes() = {std::move(corrupt), std::move(unsupported), std::move(mismatch), std::move(remote)};
  });

  // Keyword arguments after the state, as ckpt.save takes them (SaveOptions).
  m.def(
      "save",
      [](const std::string& path, py::handle state, const std::string& format, py::object metadata, bool extras,
         const std::string& checksum, bool fsync, unsigned threads, uint64_t max_shard_bytes) {
        Tree tree = value_in(state, "", 0);
        SaveOptions options{.format = format,
                            .extras = extras,
                            .checksum = checksum_from_name(checksum),
                            .metadata = metadata_in(metadata),
                            .fsync = fsync,
                            .threads = threads,
                            .max_shard_bytes = max_shard_bytes};
        {
          py::gil_scoped_release release;
          ckpt::save(path, tree, options);
        }
        // `tree` (and the arrays it borrows) is released here, with the GIL held.
      },
      py::arg("path"), py::arg("state"), py::kw_only(), py::arg("format") = "", py::arg("metadata") = py::none(),
      py::arg("extras") = true, py::arg("checksum") = "xxh3", py::arg("fsync") = true, py::arg("threads") = 0,
      py::arg("max_shard_bytes") = 0);

  m.def(
      "load",
      [](const std::string& path, const std::string& framework, bool lazy, bool verify, unsigned threads,
         const std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>& boxes) {
        const Framework fw = framework_from(framework);
        LoadOptions options{.verify = verify, .lazy = lazy, .threads = threads};
        for (const auto& [name, box] : boxes) options.boxes[name] = Box{.offsets = box.first, .sizes = box.second};
        const Contents contents = open_contents(path, options);
        return naming_file(path, [&] { return value_out(contents.tree, fw); });
      },
      py::arg("path"), py::kw_only(), py::arg("framework") = "numpy", py::arg("lazy") = true,
      py::arg("verify") = false, py::arg("threads") = 0,
      py::arg("boxes") = std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>>{});

  py::class_<Handle>(m, "Handle")
      .def("keys", &Handle::keys)
      .def("info", &Handle::info, py::arg("name"))
      .def("get", &Handle::get, py::arg("name"), py::arg("writable") = false, py::arg("copy") = false)
      .def("value", &Handle::value, py::arg("name"))
      .def("tree", &Handle::tree)
      .def("values", &Handle::values)
      .def("metadata", &Handle::metadata)
      .def("format", &Handle::format)
      .def("format_version", &Handle::format_version)
      .def("checksum_kind", &Handle::checksum_kind)
      .def("contains", &Handle::contains, py::arg("name"))
      .def("size", &Handle::size)
      .def("close", &Handle::close)
      .def("closed", &Handle::closed);

  m.def(
      "open",
      [](const std::string& path, const std::string& framework, bool verify, bool lazy, bool remote_lazy,
         const std::string& sha256, py::object offline, bool check_hash, py::object progress) {
        const Framework fw = framework_from(framework);
        return Handle(open_contents(path, {.verify = verify,
                                           .lazy = lazy,
                                           .fetch = fetch_options(sha256, offline, check_hash, progress),
                                           .remote_lazy = remote_lazy}),
                      fw, path);
      },
      py::arg("path"), py::kw_only(), py::arg("framework") = "numpy", py::arg("verify") = false,
      py::arg("lazy") = true, py::arg("remote_lazy") = false, py::arg("sha256") = "",
      py::arg("offline") = py::none(), py::arg("check_hash") = false, py::arg("progress") = py::none());

  // A safetensors file held in memory (bytes, bytearray, mmap: anything with
  // the buffer protocol) as a handle whose tensors view that memory, which
  // they keep referenced. `label` names it in errors.
  m.def(
      "open_safetensors_bytes",
      [](py::buffer data, const std::string& framework, const std::string& label) {
        const Framework fw = framework_from(framework);
        const py::buffer_info view = data.request();
        const auto* bytes = static_cast<const std::byte*>(view.ptr);
        const size_t size = static_cast<size_t>(view.size * view.itemsize);
        PyObject* owner = data.ptr();
        Py_INCREF(owner);
        Buffer buffer = Buffer::lend({bytes, size}, [owner] {
          py::gil_scoped_acquire gil;
          Py_DECREF(owner);
        });
        Contents contents;
        {
          py::gil_scoped_release release;
          contents = ckpt::open_bytes(buffer, label);
        }
        return Handle(std::move(contents), fw, label);
      },
      py::arg("data"), py::arg("framework") = "numpy", py::arg("label") = "<bytes>");

  // `array` (a numpy array or a torch tensor) as `framework`'s array over the
  // same memory, by values.cc's one table of dtypes: bfloat16 and the
  // float8s as ml_dtypes arrays in numpy, torch's own dtypes in torch. The
  // result may be written (the memory is the caller's own).
  m.def(
      "as_framework",
      [](py::handle array, const std::string& framework) {
        const Tree leaf = value_in(array, "", 0);
        if (!leaf.is_tensor()) throw py::type_error("as_framework takes an array or a tensor");
        return tensor_out(leaf.tensor(), framework_from(framework), /*writable_numpy=*/true);
      },
      py::arg("array"), py::arg("framework"));

  // What `ckpt inspect --json` prints (document.h contents_document); with
  // `verify`, after full validation (what `ckpt verify` checks).
  m.def(
      "describe",
      [](const std::string& path, bool verify) {
        const Contents contents = open_contents(path, {.verify = verify});
        return naming_file(path, [&] { return value_out(contents_document(path, contents), Framework::kNumpy); });
      },
      py::arg("path"), py::arg("verify") = false);

  m.def(
      "diff",
      [](const std::string& a, const std::string& b, double atol) {
        Tree document;
        {
          py::gil_scoped_release release;
          const Tree tree_a = ckpt::load(a);
          const Tree tree_b = ckpt::load(b);
          document = diff_document(ckpt::diff(tree_a, tree_b, {.atol = atol}), a, b, atol);
        }
        return value_out(document, Framework::kNumpy);
      },
      py::arg("a"), py::arg("b"), py::arg("atol") = 0.0);

  m.def("formats", [] { return value_out(formats_document().at("formats"), Framework::kNumpy); });

  m.def(
      "cli",
      [](const std::vector<std::string>& argv) {
        std::vector<char*> pointers;
        std::vector<std::string> copies = argv;
        for (std::string& arg : copies) pointers.push_back(arg.data());
        pointers.push_back(nullptr);
        py::gil_scoped_release release;
        return ckpt::cli_main(static_cast<int>(copies.size()), pointers.data());
      },
      py::arg("argv"));

  bind_restore(m);
  bind_safetensors(m);
  bind_manager(m);
  bind_url(m);
  bind_weight_norm(m);
  bind_modules(m);
  bind_distributed(m);

#ifdef CKPT_VERSION
  m.attr("__version__") = CKPT_VERSION;
#else
  m.attr("__version__") = "0.1.0";
#endif
}
