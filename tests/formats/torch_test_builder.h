#pragma once
// Hand-built torch.save files for the torch tests: pickles written opcode by
// opcode from the pickle protocol (CPython Lib/pickletools.py), zips by
// zip_test_builder.h, legacy files as torch/serialization.py's
// _legacy_save lays them out. Nothing here uses ckpt's PickleWriter or
// ZipWriter, so that the reader is checked against an independent encoder.

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "formats/zip_test_builder.h"

namespace ckpt::testing {

// A pickle as opcode bytes. Every method appends one opcode (and its
// argument) and returns *this.
class Pkl {
 public:
  Pkl() = default;
  explicit Pkl(int protocol) { proto(protocol); }

  Pkl& raw(std::string_view bytes) { out_ += bytes; return *this; }
  Pkl& op(uint8_t code) { out_.push_back(static_cast<char>(code)); return *this; }
  Pkl& proto(int version) { return op(0x80).op(static_cast<uint8_t>(version)); }
  Pkl& stop() { return op('.'); }

  Pkl& none() { return op('N'); }
  Pkl& boolean(bool value) { return op(value ? 0x88 : 0x89); }
  // BININT1 / BININT (signed 32-bit) / LONG1 with 8 bytes, as the value needs.
  Pkl& integer(int64_t value) {
    if (value >= 0 && value < 256) return op('K').op(static_cast<uint8_t>(value));
    if (value >= INT32_MIN && value <= INT32_MAX) {
      op('J');
      add_u32(out_, static_cast<uint32_t>(static_cast<int32_t>(value)));
      return *this;
    }
    op(0x8a).op(8);
    add_u64(out_, static_cast<uint64_t>(value));
    return *this;
  }
  // LONG1 with exactly these little-endian two's complement bytes.
  Pkl& long1(std::initializer_list<uint8_t> bytes) {
    op(0x8a).op(static_cast<uint8_t>(bytes.size()));
    for (uint8_t b : bytes) op(b);
    return *this;
  }
  // BINFLOAT: 8 bytes, big-endian IEEE 754, given as the bit pattern.
  Pkl& binfloat_bits(uint64_t bits) {
    op('G');
    for (int shift = 56; shift >= 0; shift -= 8) op(static_cast<uint8_t>(bits >> shift));
    return *this;
  }
  // BINUNICODE: 4-byte length, UTF-8 bytes.
  Pkl& str(std::string_view utf8) {
    op('X');
    add_u32(out_, static_cast<uint32_t>(utf8.size()));
    out_ += utf8;
    return *this;
  }
  Pkl& short_bytes(std::string_view data) {
    op('C').op(static_cast<uint8_t>(data.size()));
    out_ += data;
    return *this;
  }
  // GLOBAL: "module\nname\n".
  Pkl& global(std::string_view module, std::string_view name) {
    op('c');
    out_ += module;
    out_ += '\n';
    out_ += name;
    out_ += '\n';
    return *this;
  }
  // STACK_GLOBAL over two strs.
  Pkl& stack_global(std::string_view module, std::string_view name) { return str(module).str(name).op(0x93); }

  Pkl& mark() { return op('('); }
  Pkl& tuple() { return op('t'); }
  Pkl& tuple1() { return op(0x85); }
  Pkl& tuple2() { return op(0x86); }
  Pkl& tuple3() { return op(0x87); }
  Pkl& empty_tuple() { return op(')'); }
  Pkl& empty_list() { return op(']'); }
  Pkl& append() { return op('a'); }
  Pkl& appends() { return op('e'); }
  Pkl& empty_dict() { return op('}'); }
  Pkl& setitem() { return op('s'); }
  Pkl& setitems() { return op('u'); }
  Pkl& reduce() { return op('R'); }
  Pkl& build() { return op('b'); }
  Pkl& binpersid() { return op('Q'); }
  Pkl& pop() { return op('0'); }
  Pkl& binput(uint8_t index) { return op('q').op(index); }
  Pkl& binget(uint8_t index) { return op('h').op(index); }
  Pkl& long_binput(uint32_t index) { op('r'); add_u32(out_, index); return *this; }
  Pkl& long_binget(uint32_t index) { op('j'); add_u32(out_, index); return *this; }

  // MARK ints TUPLE (any length, the empty tuple included).
  Pkl& int_tuple(const std::vector<int64_t>& values) {
    mark();
    for (int64_t v : values) integer(v);
    return tuple();
  }

  const std::string& bytes() const { return out_; }
  size_t size() const { return out_.size(); }
  operator std::string() const { return out_; }  // NOLINT: used as bytes

 private:
  std::string out_;
};

// One tensor in a hand-built pickle: _rebuild_tensor_v2(storage, offset,
// size, stride, False, OrderedDict()) over the persistent id
// ('storage', torch.<storage_class>, key, 'cpu', numel).
struct TensorSpec {
  std::string storage_class = "FloatStorage";
  std::string key = "0";
  int64_t numel = 4;
  int64_t offset = 0;
  std::vector<int64_t> shape = {4};
  std::vector<int64_t> stride = {1};
  bool legacy = false;  // a sixth persistent id field (None): legacy files
};

// Appends the persistent-id load of `spec`'s storage.
inline Pkl& storage_pid(Pkl& p, const TensorSpec& spec) {
  p.mark().str("storage").global("torch", spec.storage_class).str(spec.key).str("cpu").integer(spec.numel);
  if (spec.legacy) p.none();
  return p.tuple().binpersid();
}

// Appends the value of one tensor (pushes it on the stack).
inline Pkl& tensor_value(Pkl& p, const TensorSpec& spec) {
  p.global("torch._utils", "_rebuild_tensor_v2").mark();
  storage_pid(p, spec);
  p.integer(spec.offset).int_tuple(spec.shape).int_tuple(spec.stride).boolean(false);
  p.global("collections", "OrderedDict").empty_tuple().reduce();
  return p.tuple().reduce();
}

// The pickle of a state dict {name: tensor, ...} (protocol 2), as torch.save
// writes an OrderedDict: GLOBAL OrderedDict, REDUCE, then SETITEMS.
inline std::string state_dict_pickle(const std::vector<std::pair<std::string, TensorSpec>>& tensors) {
  Pkl p(2);
  p.global("collections", "OrderedDict").empty_tuple().reduce().mark();
  for (const auto& [name, spec] : tensors) {
    p.str(name);
    tensor_value(p, spec);
  }
  return p.setitems().stop();
}

// A pickle whose value is just `body` (protocol 2 header, STOP appended).
inline std::string pickle_of(const Pkl& body) { return Pkl(2).raw(body.bytes()).stop(); }

// Little-endian float32 bytes.
inline std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    add_u32(out, bits);
  }
  return out;
}

// A torch zip: archive/data.pkl, archive/byteorder, archive/data/<key> for
// each (key, bytes), archive/version, in torch's order.
inline TestZip torch_zip(std::string_view pickle, const std::vector<std::pair<std::string, std::string>>& storages,
                         std::string_view byteorder = "little") {
  std::vector<TestZipEntry> entries;
  entries.push_back({.name = "archive/data.pkl", .data = std::string(pickle)});
  if (!byteorder.empty()) entries.push_back({.name = "archive/byteorder", .data = std::string(byteorder)});
  for (const auto& [key, bytes] : storages) entries.push_back({.name = "archive/data/" + key, .data = bytes});
  entries.push_back({.name = "archive/version", .data = "3\n"});
  return build_test_zip(entries);
}

// The legacy magic number 0x1950a86a20f9469cfc6c as its own pickle.
inline std::string legacy_magic_pickle() {
  return Pkl(2).long1({0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}).stop();
}

// The three pickles that open a legacy file: magic, protocol version, sys_info.
inline std::string legacy_head(int64_t protocol_version = 1001) {
  std::string out = legacy_magic_pickle();
  out += Pkl(2).integer(protocol_version).stop();
  out += Pkl(2).empty_dict().mark().str("protocol_version").integer(1001).str("little_endian").boolean(true)
             .str("type_sizes").empty_dict().setitems().stop();
  return out;
}

// The pickled list of storage keys.
inline std::string legacy_keys(const std::vector<std::string>& keys) {
  Pkl list(2);
  list.empty_list().mark();
  for (const std::string& key : keys) list.str(key);
  return list.appends().stop();
}

// A legacy file: the head, `object`, the pickled list `keys`, then each raw
// storage as (8-byte little-endian element count, bytes).
inline std::string legacy_file(const std::string& object, const std::vector<std::string>& keys,
                               const std::vector<std::pair<uint64_t, std::string>>& storages,
                               int64_t protocol_version = 1001) {
  std::string out = legacy_head(protocol_version) + object + legacy_keys(keys);
  for (const auto& [count, bytes] : storages) {
    add_u64(out, count);
    out += bytes;
  }
  return out;
}

}  // namespace ckpt::testing
