#pragma once
// The pickle virtual machine behind unpickle(), shared by the two files that
// implement it: pickle_reader.cc (the opcodes) and pickle_calls.cc (the
// allowlisted globals and the calls ckpt interprets: OrderedDict, tensor
// rebuilds, storages). Internal to the torch format.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/error.h"
#include "formats/torch/pickle_reader.h"

namespace ckpt::torch_detail {

using Kind = PickleValue::Kind;

inline constexpr size_t kArenaChunk = 1024;

// Opcodes, by the names pickletools gives them.
enum Op : uint8_t {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kFloat = 'F', kInt = 'I',
  kBinInt = 'J', kBinInt1 = 'K', kLong = 'L', kBinInt2 = 'M', kNone = 'N', kPersId = 'P',
  kBinPersId = 'Q', kReduce = 'R', kString = 'S', kBinString = 'T', kShortBinString = 'U',
  kUnicode = 'V', kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobalOp = 'c', kDict = 'd',
  kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h', kInst = 'i', kLongBinGet = 'j',
  kList = 'l', kEmptyList = ']', kObj = 'o', kPut = 'p', kBinPut = 'q', kLongBinPut = 'r',
  kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G',
  kBinBytes = 'B', kShortBinBytes = 'C',
  kProto = 0x80, kNewObj = 0x81, kExt1 = 0x82, kExt2 = 0x83, kExt4 = 0x84, kTuple1 = 0x85,
  kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a, kLong4 = 0x8b,
  kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d, kBinBytes8 = 0x8e, kEmptySet = 0x8f,
  kAddItems = 0x90, kFrozenSet = 0x91, kNewObjEx = 0x92, kStackGlobal = 0x93, kMemoize = 0x94,
  kFrame = 0x95, kByteArray8 = 0x96, kNextBuffer = 0x97, kReadonlyBuffer = 0x98,
};


class Machine {
 public:
  Machine(std::span<const std::byte> bytes, const UnpickleOptions& options)
      : data_(reinterpret_cast<const uint8_t*>(bytes.data())), size_(bytes.size()), options_(options) {
    none_ = make(Kind::kNone);
    true_ = make(Kind::kBool);
    true_->flag = true;
    false_ = make(Kind::kBool);
  }

  Pickle run() {
    while (true) {
      if (pos_ >= size_) fail("pickle ends without a STOP opcode");
      op_pos_ = pos_;
      const uint8_t op = data_[pos_++];
      if (op == kStop) break;
      step(op);
    }
    result_.root = pop();
    result_.end = pos_;
    return std::move(result_);
  }

 private:
  [[noreturn]] void fail(const std::string& message, ErrorCode code = ErrorCode::kCorrupt) const {
    throw Error(code, message, {.offset = options_.file_offset + op_pos_});
  }

  PickleValue* make(Kind kind) {
    if (result_.arena.empty() || result_.arena_used == kArenaChunk) {
      result_.arena.push_back(std::make_unique<PickleValue[]>(kArenaChunk));
      result_.arena_used = 0;
    }
    PickleValue& object = result_.arena.back()[result_.arena_used++];
    object.kind = kind;
    return &object;
  }
  PickleValue* make_int(int64_t value) {
    // Small non-negative ints (sizes, strides, offsets) are shared: objects
    // are never mutated once made.
    if (value >= 0 && value < kSmallInts) {
      PickleValue*& cached = small_ints_[static_cast<size_t>(value)];
      if (cached == nullptr) {
        cached = make(Kind::kInt);
        cached->integer = value;
      }
      return cached;
    }
    PickleValue* object = make(Kind::kInt);
    object->integer = value;
    return object;
  }
  PickleValue* make_text(Kind kind, std::string text) {
    PickleValue* object = make(kind);
    object->text = std::move(text);
    return object;
  }

  // Input.
  const uint8_t* take(uint64_t count) {
    if (count > size_ - pos_) {
      fail("pickle truncated: opcode needs " + std::to_string(count) + " bytes, " + std::to_string(size_ - pos_) +
           " remain");
    }
    const uint8_t* p = data_ + pos_;
    pos_ += count;
    return p;
  }
  uint64_t take_le(size_t count) {
    const uint8_t* p = take(count);
    uint64_t value = 0;
    for (size_t i = count; i-- > 0;) value = value << 8 | p[i];
    return value;
  }
  std::string_view take_line() {
    const void* newline = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (newline == nullptr) fail("pickle truncated: a text argument has no end of line");
    const auto* end = static_cast<const uint8_t*>(newline);
    std::string_view line(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(end - (data_ + pos_)));
    pos_ = static_cast<size_t>(end - data_) + 1;
    return line;
  }
  std::string take_string(uint64_t length) {
    const uint8_t* p = take(length);
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(length));
  }
  PickleValue* take_str(uint64_t length) {
    std::string text = take_string(length);
    if (!detail::valid_utf8(text, kPickleUtf8)) fail("string is not valid UTF-8");
    return make_text(Kind::kStr, std::move(text));
  }

  // Stack.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(PickleValue* object) { stack_.push_back(object); }
  PickleValue* pop() {
    if (stack_.size() <= floor()) fail("pickle stack underflow");
    PickleValue* object = stack_.back();
    stack_.pop_back();
    return object;
  }
  PickleValue* top() {
    if (stack_.size() <= floor()) fail("pickle stack underflow");
    return stack_.back();
  }
  // Removes the last mark; returns where its objects start on the stack.
  size_t take_mark() {
    if (marks_.empty()) fail("pickle has no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    return mark;
  }
  // The object just below a mark that was taken (the container that
  // APPENDS / SETITEMS fill).
  PickleValue* below(size_t mark) {
    if (mark <= floor()) fail("pickle stack underflow");
    return stack_[mark - 1];
  }
  // Moves the objects above `mark` to the end of `into`.
  void move_above(size_t mark, ItemList& into) {
    into.append(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
  }
  // The objects above the last mark, which is removed.
  std::vector<PickleValue*> pop_mark() {
    if (marks_.empty()) fail("pickle has no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue*> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  // Memo.
  void put(uint64_t index, PickleValue* object) {
    object->memoized = true;
    // Indices beyond the pickle's size cannot come from a sequential writer;
    // they go to a map so that a huge index cannot force a huge vector.
    if (index < size_) {
      if (index >= memo_.size()) memo_.resize(std::max<size_t>(index + 1, memo_.size() * 2), nullptr);
      if (memo_[index] == nullptr) ++memo_count_;
      memo_[index] = object;
    } else {
      if (sparse_memo_.insert_or_assign(index, object).second) ++memo_count_;
    }
  }
  PickleValue* get(uint64_t index) {
    if (index < memo_.size() && memo_[index] != nullptr) return memo_[index];
    if (auto found = sparse_memo_.find(index); found != sparse_memo_.end()) return found->second;
    fail("memo key " + std::to_string(index) + " was never stored");
  }
  uint64_t parse_decimal(std::string_view text, const char* what) {
    uint64_t value = 0;
    if (text.empty()) fail(std::string("empty ") + what);
    for (char c : text) {
      if (c < '0' || c > '9' || value > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
        fail(std::string("bad ") + what + " " + detail::quoted(text, {.max_bytes = 32}));
      }
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    return value;
  }

  PickleValue* make_long(const uint8_t* p, uint64_t length) {
    if (length == 0) return make_int(0);
    if (length <= 8) {
      uint64_t value = 0;
      for (size_t i = length; i-- > 0;) value = value << 8 | p[i];
      if (length < 8 && (p[length - 1] & 0x80)) value |= ~uint64_t{0} << (8 * length);  // sign-extend
      return make_int(static_cast<int64_t>(value));
    }
    // Wider encodings may still hold a 64-bit value (redundant sign bytes).
    const uint8_t sign = (p[length - 1] & 0x80) ? 0xFF : 0x00;
    bool fits = (p[7] & 0x80) == (sign & 0x80);
    for (uint64_t i = 8; i < length && fits; ++i) fits = p[i] == sign;
    if (fits) {
      uint64_t value = 0;
      for (size_t i = 8; i-- > 0;) value = value << 8 | p[i];
      return make_int(static_cast<int64_t>(value));
    }
    return make_text(Kind::kBigInt, std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(length)));
  }

  PickleValue* make_global(std::string_view module, std::string_view name);

  void step(uint8_t op);

  int64_t parse_signed(std::string_view text, const char* what) {
    const bool negative = !text.empty() && text.front() == '-';
    if (negative || (!text.empty() && text.front() == '+')) text.remove_prefix(1);
    const uint64_t magnitude = parse_decimal(text, what);
    if (magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0)) {
      fail(std::string(what) + " does not fit 64 bits", ErrorCode::kUnsupported);
    }
    return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
  }

  // Calls that copy a container's items (OrderedDict(d), set(l),
  // torch.Size(t)) may copy, in all, as many items as the pickle has bytes
  // (plus a constant): repeating such a call on one big container would
  // otherwise use memory that grows with the square of the file's size.
  void charge_copy(size_t items) {
    copied_ += items;
    if (copied_ > size_ + kCopySlack) fail("pickle copies containers more often than its size allows");
  }

  // Arguments of an interpreted call.
  const ItemList& arguments(PickleValue* args, const char* what, size_t min, size_t max) {
    if (args->kind != Kind::kTuple) fail(std::string(what) + ": arguments are not a tuple");
    if (args->items.size() < min || args->items.size() > max) {
      fail(std::string(what) + ": " + std::to_string(args->items.size()) + " arguments");
    }
    return args->items;
  }
  int64_t int_argument(PickleValue* object, const char* what) {
    if (object->kind == Kind::kInt) return object->integer;
    if (object->kind == Kind::kBool) return object->flag ? 1 : 0;
    fail(std::string(what) + " must be an integer");
  }
  std::vector<int64_t> int_tuple(PickleValue* object, const char* what) {
    if (object->kind != Kind::kTuple && object->kind != Kind::kList) fail(std::string(what) + " must be a tuple");
    std::vector<int64_t> values;
    values.reserve(object->items.size());
    for (PickleValue* item : object->items) values.push_back(int_argument(item, what));
    return values;
  }

  PickleValue* call(PickleValue* callable, PickleValue* args);

  PickleValue* rebuild_tensor(Global which, PickleValue* args);

  void build(PickleValue* target, PickleValue* state);

  PickleValue* persistent_load(PickleValue* pid);

  const uint8_t* data_;
  size_t size_;
  UnpickleOptions options_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  Pickle result_;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;
  std::vector<PickleValue*> memo_;
  std::unordered_map<uint64_t, PickleValue*> sparse_memo_;
  uint64_t memo_count_ = 0;
  static constexpr int64_t kSmallInts = 256;
  static constexpr size_t kCopySlack = size_t{1} << 16;
  size_t copied_ = 0;
  PickleValue* small_ints_[kSmallInts] = {};
  PickleValue* none_;
  PickleValue* true_;
  PickleValue* false_;
};

}  // namespace ckpt::torch_detail
