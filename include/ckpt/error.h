#pragma once
// ckpt::Error: the one exception type that every ckpt function throws.

#include <cstdint>
#include <exception>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace ckpt {

// What went wrong, coarse enough for callers to branch on. The CLI maps these
// to exit codes, the Python package to exception classes.
enum class ErrorCode {
  kNotFound,         // a file, directory or entry does not exist
  kInvalidArgument,  // the caller asked for something impossible
  kCorrupt,          // the bytes of a file fail validation
  kMismatch,         // two things that must agree do not (dtype, shape, names)
  kUnsupported,      // valid, but not something ckpt can read or write
  kIo,               // the operating system refused (permissions, disk full)
  kRemote,           // a URL could not be fetched (HTTP status, DNS, TLS, timeout, offline)
};

// Returns the lower-case name of `code` ("not found", "corrupt", ...).
std::string_view error_code_name(ErrorCode code);

// Where an error happened. Every field is optional; formats fill in what
// they know: the file, the entry (tensor name, zip member, tree path) and the
// byte offset in the file.
struct ErrorContext {
  std::filesystem::path path;
  std::string entry;
  std::optional<uint64_t> offset;
};

class Error : public std::exception {
 public:
  Error(ErrorCode code, std::string message, ErrorContext context = {});

  ErrorCode code() const noexcept { return code_; }
  // The bare description, without path, entry or offset.
  const std::string& message() const noexcept { return message_; }
  const ErrorContext& context() const noexcept { return context_; }

  // "PATH: entry 'NAME': MESSAGE (at byte N)", the parts that are known.
  const char* what() const noexcept override { return what_.c_str(); }

  // Fill in the path / entry when an inner layer did not know them; fields
  // that are already set are kept. Returns *this so that it can be rethrown.
  Error& with_path(const std::filesystem::path& path);
  Error& with_entry(std::string_view entry);

 private:
  void render();

  ErrorCode code_;
  std::string message_;
  ErrorContext context_;
  std::string what_;
};

// Runs `body` and returns what it returns; a ckpt::Error escaping it gets
// `path` as its file where it names none yet (Error::with_path), so that
// every error says which file it is about.
template <class Body>
decltype(auto) naming_file(const std::filesystem::path& path, Body&& body) {
  try {
    return std::forward<Body>(body)();
  } catch (Error& error) {
    error.with_path(path);
    throw;
  }
}

}  // namespace ckpt
