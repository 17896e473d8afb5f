#pragma once
// The envelope of ckpt's own JSON documents inside other formats' files
// (safetensors' `ckpt` metadata entry, npz's archive comment): named fields,
// each at most once, and a "version" that a reader refuses when newer.

#include <simdjson.h>

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "ckpt/error.h"

namespace ckpt::detail {

// Reports a malformed document; throws (Error{kCorrupt} with the caller's
// path and entry).
using BadDocument = std::function<void(const std::string& message)>;

struct JsonField {
  std::string_view name;
  std::optional<simdjson::dom::element>* value;
};

// Puts each field of `fields` whose name is listed into its slot. Fields of
// other names are ignored (later minor additions); a listed name appearing
// twice calls `bad`.
void read_fields(simdjson::dom::object fields, std::initializer_list<JsonField> slots, const BadDocument& bad);

// The document's "version": calls `bad` unless it is a positive integer;
// throws Error{kUnsupported} with `context` ("written by a newer ckpt (WHAT
// version N, this reader knows up to KNOWN)") if it is larger than `known`.
int64_t read_version(const std::optional<simdjson::dom::element>& version, int64_t known, std::string_view what,
                     const ErrorContext& context, const BadDocument& bad);

}  // namespace ckpt::detail
