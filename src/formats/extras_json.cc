// read_fields and read_version (extras_json.h).

#include "formats/extras_json.h"

namespace ckpt::detail {

void read_fields(simdjson::dom::object fields, std::initializer_list<JsonField> slots, const BadDocument& bad) {
  for (const simdjson::dom::key_value_pair field : fields) {
    for (const JsonField& slot : slots) {
      if (field.key != slot.name) continue;
      if (*slot.value) bad("duplicate field \"" + std::string(field.key) + "\"");
      *slot.value = field.value;
      break;
    }
  }
}

int64_t read_version(const std::optional<simdjson::dom::element>& version, int64_t known, std::string_view what,
                     const ErrorContext& context, const BadDocument& bad) {
  int64_t number = 0;
  if (!version || version->type() != simdjson::dom::element_type::INT64 || version->get_int64().get(number) ||
      number < 1) {
    bad("\"version\" is missing or not a positive integer");
  }
  if (number > known) {
    throw Error(ErrorCode::kUnsupported,
                "written by a newer ckpt (" + std::string(what) + " version " + std::to_string(number) +
                    ", this reader knows up to " + std::to_string(known) + ")",
                context);
  }
  return number;
}

}  // namespace ckpt::detail
