#include "formats/torch/pickle_reader.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "ckpt/error.h"

namespace ckpt::torch_detail {
namespace {

using Kind = PyObject::Kind;

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

constexpr int kHighestProtocol = 5;
constexpr size_t kArenaChunk = 1024;

// Latin-1 code points of a UTF-8 string as bytes; false if one exceeds 255.
bool latin1_bytes(std::string_view utf8, std::string& out) {
  out.clear();
  out.reserve(utf8.size());
  const auto* s = reinterpret_cast<const unsigned char*>(utf8.data());
  for (size_t i = 0; i < utf8.size();) {
    if (s[i] < 0x80) {
      out.push_back(static_cast<char>(s[i++]));
    } else if ((s[i] & 0xE0) == 0xC0 && i + 1 < utf8.size()) {
      const uint32_t code = (s[i] & 0x1Fu) << 6 | (s[i + 1] & 0x3Fu);
      if (code > 0xFF) return false;
      out.push_back(static_cast<char>(code));
      i += 2;
    } else {
      return false;
    }
  }
  return true;
}

struct TypedStorageName {
  std::string_view name;
  DType dtype;
};
constexpr TypedStorageName kTypedStorages[] = {
    {"FloatStorage", DType::kFloat32},   {"DoubleStorage", DType::kFloat64},
    {"HalfStorage", DType::kFloat16},    {"BFloat16Storage", DType::kBFloat16},
    {"LongStorage", DType::kInt64},      {"IntStorage", DType::kInt32},
    {"ShortStorage", DType::kInt16},     {"CharStorage", DType::kInt8},
    {"ByteStorage", DType::kUInt8},      {"BoolStorage", DType::kBool},
    {"ComplexFloatStorage", DType::kComplex64}, {"ComplexDoubleStorage", DType::kComplex128},
};

struct DTypeAlias {
  std::string_view name;
  DType dtype;
};
constexpr DTypeAlias kDTypeAliases[] = {
    {"float", DType::kFloat32}, {"double", DType::kFloat64}, {"half", DType::kFloat16},
    {"long", DType::kInt64},    {"int", DType::kInt32},      {"short", DType::kInt16},
    {"cfloat", DType::kComplex64}, {"cdouble", DType::kComplex128},
};

// Globals that are torch's own but describe what ckpt does not read; they
// get a more useful message than "refused".
std::optional<std::string> unsupported_torch_global(std::string_view module, std::string_view name) {
  if (module == "torch._utils") {
    if (name == "_rebuild_qtensor") return "quantized tensors are not supported";
    if (name.starts_with("_rebuild_sparse")) return "sparse tensors are not supported";
    if (name == "_rebuild_nested_tensor") return "nested tensors are not supported";
    if (name == "_rebuild_meta_tensor_no_storage") return "meta tensors (no data) are not supported";
    if (name == "_rebuild_wrapper_subclass") return "tensor subclasses are not supported";
    if (name == "_rebuild_device_tensor_from_numpy") return "device tensors saved through numpy are not supported";
  }
  if ((module == "torch" || module == "torch.cuda") && name.starts_with("Q") && name.ends_with("Storage")) {
    return "quantized storages are not supported";
  }
  return std::nullopt;
}

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

  PyObject* make(Kind kind) {
    if (result_.arena.empty() || result_.arena_used == kArenaChunk) {
      result_.arena.push_back(std::make_unique<PyObject[]>(kArenaChunk));
      result_.arena_used = 0;
    }
    PyObject& object = result_.arena.back()[result_.arena_used++];
    object.kind = kind;
    return &object;
  }
  PyObject* make_int(int64_t value) {
    // Small non-negative ints (sizes, strides, offsets) are shared: objects
    // are never mutated once made.
    if (value >= 0 && value < kSmallInts) {
      PyObject*& cached = small_ints_[static_cast<size_t>(value)];
      if (cached == nullptr) {
        cached = make(Kind::kInt);
        cached->integer = value;
      }
      return cached;
    }
    PyObject* object = make(Kind::kInt);
    object->integer = value;
    return object;
  }
  PyObject* make_text(Kind kind, std::string text) {
    PyObject* object = make(kind);
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
  PyObject* take_str(uint64_t length) {
    std::string text = take_string(length);
    if (!valid_utf8(text)) fail("string is not valid UTF-8");
    return make_text(Kind::kStr, std::move(text));
  }

  // Stack.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(PyObject* object) { stack_.push_back(object); }
  PyObject* pop() {
    if (stack_.size() <= floor()) fail("pickle stack underflow");
    PyObject* object = stack_.back();
    stack_.pop_back();
    return object;
  }
  PyObject* top() {
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
  PyObject* below(size_t mark) {
    if (mark <= floor()) fail("pickle stack underflow");
    return stack_[mark - 1];
  }
  // Moves the objects above `mark` to the end of `into`.
  void move_above(size_t mark, ItemList& into) {
    into.append(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
  }
  // The objects above the last mark, which is removed.
  std::vector<PyObject*> pop_mark() {
    if (marks_.empty()) fail("pickle has no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PyObject*> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  // Memo.
  void put(uint64_t index, PyObject* object) {
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
  PyObject* get(uint64_t index) {
    if (index < memo_.size() && memo_[index] != nullptr) return memo_[index];
    if (auto found = sparse_memo_.find(index); found != sparse_memo_.end()) return found->second;
    fail("memo key " + std::to_string(index) + " was never stored");
  }
  uint64_t parse_decimal(std::string_view text, const char* what) {
    uint64_t value = 0;
    if (text.empty()) fail(std::string("empty ") + what);
    for (char c : text) {
      if (c < '0' || c > '9' || value > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
        fail(std::string("bad ") + what + " '" + std::string(text.substr(0, 32)) + "'");
      }
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    return value;
  }

  PyObject* make_long(const uint8_t* p, uint64_t length) {
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

  PyObject* make_global(std::string_view module, std::string_view name) {
    std::optional<GlobalInfo> info = resolve_global(module, name);
    const std::string full = std::string(module) + "." + std::string(name);
    if (!info) {
      if (std::optional<std::string> why = unsupported_torch_global(module, name)) {
        fail(*why + " ('" + full + "')", ErrorCode::kUnsupported);
      }
      fail("refused global '" + full +
               "': ckpt reads tensors and plain values only and never imports or calls code from a checkpoint",
           ErrorCode::kUnsupported);
    }
    PyObject* object = make_text(Kind::kGlobal, full);
    object->global = info->global;
    object->dtype = info->dtype;
    return object;
  }

  void step(uint8_t op) {
    switch (op) {
      case kProto: {
        const uint8_t protocol = *take(1);
        if (protocol > kHighestProtocol) {
          fail("pickle protocol " + std::to_string(protocol) + " is newer than 5", ErrorCode::kUnsupported);
        }
        return;
      }
      case kFrame: {
        const uint64_t length = take_le(8);
        if (length > size_ - pos_) fail("pickle frame of " + std::to_string(length) + " bytes runs past the end");
        return;
      }
      case kMark: marks_.push_back(stack_.size()); return;
      case kPop:
        if (stack_.size() > floor()) {
          stack_.pop_back();
        } else {
          pop_mark();
        }
        return;
      case kPopMark: pop_mark(); return;
      case kDup: push(top()); return;

      // Numbers.
      case kNone: push(none_); return;
      case kNewTrue: push(true_); return;
      case kNewFalse: push(false_); return;
      case kBinInt: push(make_int(static_cast<int32_t>(static_cast<uint32_t>(take_le(4))))); return;
      case kBinInt1: push(make_int(static_cast<int64_t>(take_le(1)))); return;
      case kBinInt2: push(make_int(static_cast<int64_t>(take_le(2)))); return;
      case kLong1: {
        const uint64_t length = take_le(1);
        push(make_long(take(length), length));
        return;
      }
      case kLong4: {
        const uint64_t length = take_le(4);
        if (length & 0x80000000u) fail("LONG4 with a negative length");
        push(make_long(take(length), length));
        return;
      }
      case kInt: {
        std::string_view line = take_line();
        if (line == "00") {
          push(false_);
        } else if (line == "01") {
          push(true_);
        } else {
          push(make_int(parse_signed(line, "INT argument")));
        }
        return;
      }
      case kLong: {
        std::string_view line = take_line();
        if (line.ends_with('L')) line.remove_suffix(1);
        push(make_int(parse_signed(line, "LONG argument")));
        return;
      }
      case kBinFloat: {
        const uint8_t* p = take(8);
        uint64_t bits = 0;
        for (size_t i = 0; i < 8; ++i) bits = bits << 8 | p[i];  // big-endian
        PyObject* object = make(Kind::kFloat);
        object->real = std::bit_cast<double>(bits);
        push(object);
        return;
      }
      case kFloat: {
        const std::string line(take_line());
        char* end = nullptr;
        const double value = std::strtod(line.c_str(), &end);
        if (line.empty() || end != line.c_str() + line.size()) fail("bad FLOAT argument");
        PyObject* object = make(Kind::kFloat);
        object->real = value;
        push(object);
        return;
      }

      // Strings and bytes.
      case kBinUnicode: push(take_str(take_le(4))); return;
      case kShortBinUnicode: push(take_str(take_le(1))); return;
      case kBinUnicode8: push(take_str(take_le(8))); return;
      case kBinString:
      case kShortBinString: {
        // A Python 2 str: text when it is UTF-8 (torch.load's default
        // encoding), bytes otherwise.
        const uint64_t length = op == kBinString ? take_le(4) : take_le(1);
        if (op == kBinString && (length & 0x80000000u)) fail("BINSTRING with a negative length");
        std::string text = take_string(length);
        const bool utf8 = valid_utf8(text);
        push(make_text(utf8 ? Kind::kStr : Kind::kBytes, std::move(text)));
        return;
      }
      case kBinBytes: push(make_text(Kind::kBytes, take_string(take_le(4)))); return;
      case kShortBinBytes: push(make_text(Kind::kBytes, take_string(take_le(1)))); return;
      case kBinBytes8:
      case kByteArray8: push(make_text(Kind::kBytes, take_string(take_le(8)))); return;
      case kString:
      case kUnicode: fail("protocol 0 text strings are not supported", ErrorCode::kUnsupported);

      // Containers.
      case kEmptyTuple: push(make(Kind::kTuple)); return;
      case kTuple1:
      case kTuple2:
      case kTuple3: {
        const size_t count = op - kTuple1 + 1;
        PyObject* popped[3];
        for (size_t i = count; i-- > 0;) popped[i] = pop();
        PyObject* tuple = make(Kind::kTuple);
        tuple->items.append(popped, popped + count);
        push(tuple);
        return;
      }
      case kTuple: {
        const size_t mark = take_mark();
        PyObject* tuple = make(Kind::kTuple);
        move_above(mark, tuple->items);
        push(tuple);
        return;
      }
      case kEmptyList: push(make(Kind::kList)); return;
      case kList: {
        const size_t mark = take_mark();
        PyObject* list = make(Kind::kList);
        move_above(mark, list->items);
        push(list);
        return;
      }
      case kAppend: {
        PyObject* value = pop();
        PyObject* list = top();
        if (list->kind != Kind::kList) fail("APPEND to a non-list");
        list->items.push_back(value);
        return;
      }
      case kAppends: {
        const size_t mark = take_mark();
        PyObject* list = below(mark);
        if (list->kind != Kind::kList) fail("APPENDS to a non-list");
        move_above(mark, list->items);
        return;
      }
      case kEmptyDict: push(make(Kind::kDict)); return;
      case kDict: {
        const size_t mark = take_mark();
        if ((stack_.size() - mark) % 2 != 0) fail("DICT with an odd number of items");
        PyObject* dict = make(Kind::kDict);
        move_above(mark, dict->items);
        push(dict);
        return;
      }
      case kSetItem: {
        PyObject* value = pop();
        PyObject* key = pop();
        PyObject* dict = top();
        if (dict->kind != Kind::kDict) fail("SETITEM on a non-dict");
        dict->items.push_back(key);
        dict->items.push_back(value);
        return;
      }
      case kSetItems: {
        const size_t mark = take_mark();
        if ((stack_.size() - mark) % 2 != 0) fail("SETITEMS with an odd number of items");
        PyObject* dict = below(mark);
        if (dict->kind != Kind::kDict) fail("SETITEMS on a non-dict");
        move_above(mark, dict->items);
        return;
      }
      case kEmptySet: push(make(Kind::kSet)); return;
      case kAddItems: {
        const size_t mark = take_mark();
        PyObject* set = below(mark);
        if (set->kind != Kind::kSet) fail("ADDITEMS on a non-set");
        move_above(mark, set->items);
        return;
      }
      case kFrozenSet: {
        const size_t mark = take_mark();
        PyObject* set = make(Kind::kSet);
        move_above(mark, set->items);
        push(set);
        return;
      }

      // Memo.
      case kBinPut: put(take_le(1), top()); return;
      case kLongBinPut: put(take_le(4), top()); return;
      case kPut: put(parse_decimal(take_line(), "PUT index"), top()); return;
      case kMemoize: put(memo_count_, top()); return;
      case kBinGet: push(get(take_le(1))); return;
      case kLongBinGet: push(get(take_le(4))); return;
      case kGet: push(get(parse_decimal(take_line(), "GET index"))); return;

      // Globals and calls.
      case kGlobalOp: {
        const std::string module(take_line());
        const std::string name(take_line());
        push(make_global(module, name));
        return;
      }
      case kStackGlobal: {
        PyObject* name = pop();
        PyObject* module = pop();
        if (name->kind != Kind::kStr || module->kind != Kind::kStr) fail("STACK_GLOBAL needs two strings");
        push(make_global(module->text, name->text));
        return;
      }
      case kReduce: {
        PyObject* args = pop();
        PyObject* callable = pop();
        push(call(callable, args));
        return;
      }
      case kNewObj: {
        PyObject* args = pop();
        PyObject* cls = pop();
        push(call(cls, args));
        return;
      }
      case kNewObjEx: {
        PyObject* kwargs = pop();
        PyObject* args = pop();
        PyObject* cls = pop();
        if (kwargs->kind != Kind::kDict || !kwargs->items.empty()) fail("NEWOBJ_EX with keyword arguments");
        push(call(cls, args));
        return;
      }
      case kInst: {
        const std::string module(take_line());
        const std::string name(take_line());
        PyObject* cls = make_global(module, name);
        const size_t mark = take_mark();
        PyObject* args = make(Kind::kTuple);
        move_above(mark, args->items);
        push(call(cls, args));
        return;
      }
      case kObj: {
        std::vector<PyObject*> items = pop_mark();
        if (items.empty()) fail("OBJ without a class");
        PyObject* args = make(Kind::kTuple);
        args->items.assign(items.begin() + 1, items.end());
        push(call(items.front(), args));
        return;
      }
      case kBuild: {
        PyObject* state = pop();
        PyObject* target = top();
        build(target, state);
        return;
      }
      case kBinPersId: push(persistent_load(pop())); return;
      case kPersId: fail("text persistent ids are not supported", ErrorCode::kUnsupported);

      case kExt1:
      case kExt2:
      case kExt4: fail("the pickle extension registry (EXT opcodes) is not supported", ErrorCode::kUnsupported);
      case kNextBuffer:
      case kReadonlyBuffer: fail("out-of-band buffers (pickle protocol 5) are not supported", ErrorCode::kUnsupported);
      default: {
        static constexpr char kHex[] = "0123456789abcdef";
        fail(std::string("unknown pickle opcode 0x") + kHex[op >> 4] + kHex[op & 15]);
      }
    }
  }

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
  const ItemList& arguments(PyObject* args, const char* what, size_t min, size_t max) {
    if (args->kind != Kind::kTuple) fail(std::string(what) + ": arguments are not a tuple");
    if (args->items.size() < min || args->items.size() > max) {
      fail(std::string(what) + ": " + std::to_string(args->items.size()) + " arguments");
    }
    return args->items;
  }
  int64_t int_argument(PyObject* object, const char* what) {
    if (object->kind == Kind::kInt) return object->integer;
    if (object->kind == Kind::kBool) return object->flag ? 1 : 0;
    fail(std::string(what) + " must be an integer");
  }
  std::vector<int64_t> int_tuple(PyObject* object, const char* what) {
    if (object->kind != Kind::kTuple && object->kind != Kind::kList) fail(std::string(what) + " must be a tuple");
    std::vector<int64_t> values;
    values.reserve(object->items.size());
    for (PyObject* item : object->items) values.push_back(int_argument(item, what));
    return values;
  }

  PyObject* call(PyObject* callable, PyObject* args) {
    if (callable->kind != Kind::kGlobal) fail("call of a value that is not a global");
    switch (callable->global) {
      case Global::kOrderedDict: {
        const auto& items = arguments(args, callable->text.c_str(), 0, 1);
        PyObject* dict = make(Kind::kDict);
        dict->flag = callable->text == "collections.OrderedDict";
        if (!items.empty()) {  // OrderedDict([(k, v), ...]) or Counter({...})
          PyObject* source = items[0];
          if (source->kind == Kind::kDict) {
            charge_copy(source->items.size());
            dict->items = source->items;
          } else if (source->kind == Kind::kList || source->kind == Kind::kTuple) {
            for (PyObject* pair : source->items) {
              if (pair->kind != Kind::kTuple || pair->items.size() != 2) fail("OrderedDict item is not a pair");
              dict->items.push_back(pair->items[0]);
              dict->items.push_back(pair->items[1]);
            }
          } else {
            fail("OrderedDict from a value that is not a dict or a list of pairs");
          }
        }
        return dict;
      }
      case Global::kSet: {
        const auto& items = arguments(args, "set", 0, 1);
        PyObject* set = make(Kind::kSet);
        if (!items.empty()) {
          if (items[0]->kind != Kind::kList && items[0]->kind != Kind::kTuple && items[0]->kind != Kind::kSet) {
            fail("set from a value that is not a list");
          }
          charge_copy(items[0]->items.size());
          set->items = items[0]->items;
        }
        return set;
      }
      case Global::kByteArray:
      case Global::kCodecsEncode: {
        const auto& items = arguments(args, callable->text.c_str(), callable->global == Global::kByteArray ? 0 : 1, 2);
        if (items.empty()) return make(Kind::kBytes);
        if (items[0]->kind == Kind::kBytes) return items[0];
        if (items[0]->kind != Kind::kStr) fail(callable->text + " of a value that is not a string");
        std::string encoding = "utf-8";
        if (items.size() == 2) {
          if (items[1]->kind != Kind::kStr) fail(callable->text + ": encoding is not a string");
          encoding = items[1]->text;
        }
        if (encoding == "latin1" || encoding == "latin-1" || encoding == "iso-8859-1") {
          std::string bytes;
          if (!latin1_bytes(items[0]->text, bytes)) fail(callable->text + ": text is not Latin-1");
          return make_text(Kind::kBytes, std::move(bytes));
        }
        if (encoding == "utf-8" || encoding == "utf8") return make_text(Kind::kBytes, items[0]->text);
        fail(callable->text + ": encoding '" + encoding + "' is not supported", ErrorCode::kUnsupported);
      }
      case Global::kSize: {
        const auto& items = arguments(args, "torch.Size", 0, 1);
        PyObject* tuple = make(Kind::kTuple);
        if (!items.empty()) {
          int_tuple(items[0], "torch.Size");
          charge_copy(items[0]->items.size());
          tuple->items = items[0]->items;
        }
        return tuple;
      }
      case Global::kDevice: {
        const auto& items = arguments(args, "torch.device", 1, 2);
        if (items[0]->kind != Kind::kStr) fail("torch.device: type is not a string");
        std::string name = items[0]->text;
        if (items.size() == 2 && items[1]->kind != Kind::kNone) {
          name += ":" + std::to_string(int_argument(items[1], "torch.device index"));
        }
        return make_text(Kind::kStr, std::move(name));
      }
      case Global::kLayout: {
        const auto& items = arguments(args, "torch.serialization._get_layout", 1, 1);
        if (items[0]->kind != Kind::kStr) fail("_get_layout: name is not a string");
        if (items[0]->text != "torch.strided") {
          fail("tensor layout '" + items[0]->text + "' is not supported", ErrorCode::kUnsupported);
        }
        return items[0];
      }
      case Global::kRebuildTensor:
      case Global::kRebuildTensorV2:
      case Global::kRebuildTensorV3: return rebuild_tensor(callable->global, args);
      case Global::kRebuildParameter: {
        const auto& items = arguments(args, "_rebuild_parameter", 3, 4);
        PyObject* tensor = items[0];
        if (tensor->kind != Kind::kTensor) fail("_rebuild_parameter of a value that is not a tensor");
        result_.tensors[static_cast<size_t>(tensor->integer)].parameter = true;
        return tensor;
      }
      case Global::kRebuildFromType: {
        // _rebuild_from_type_v2(func, new_type, args, state): a tensor or
        // Parameter whose Python type is recorded; only plain types pass.
        const auto& items = arguments(args, "_rebuild_from_type_v2", 4, 4);
        if (items[1]->kind != Kind::kGlobal || items[1]->global != Global::kTensorType) {
          fail("_rebuild_from_type_v2: type is not torch.Tensor or torch.nn.Parameter", ErrorCode::kUnsupported);
        }
        // torch nests this call once; anything deeper is an attack on the stack.
        if (items[0]->kind != Kind::kGlobal || items[0]->global == Global::kRebuildFromType) {
          fail("_rebuild_from_type_v2 must call a tensor rebuild function");
        }
        PyObject* tensor = call(items[0], items[2]);
        if (tensor->kind != Kind::kTensor) fail("_rebuild_from_type_v2 did not rebuild a tensor");
        if (items[1]->text.ends_with("Parameter")) result_.tensors[static_cast<size_t>(tensor->integer)].parameter = true;
        return tensor;
      }
      case Global::kTensorType:
      case Global::kStorageType:
      case Global::kDType: fail("call of '" + callable->text + "' is not supported", ErrorCode::kUnsupported);
    }
    fail("call of '" + callable->text + "'");
  }

  PyObject* rebuild_tensor(Global which, PyObject* args) {
    const char* what = which == Global::kRebuildTensor     ? "_rebuild_tensor"
                       : which == Global::kRebuildTensorV2 ? "_rebuild_tensor_v2"
                                                           : "_rebuild_tensor_v3";
    const size_t min = which == Global::kRebuildTensor ? 4 : which == Global::kRebuildTensorV2 ? 6 : 7;
    const auto& items = arguments(args, what, min, min + 1);
    PyObject* storage = items[0];
    if (storage->kind != Kind::kStorage) fail(std::string(what) + ": first argument is not a storage");
    TensorRef tensor;
    tensor.storage = static_cast<uint32_t>(storage->integer);
    const StorageRef& ref = result_.storages[tensor.storage];
    if (which == Global::kRebuildTensorV3) {
      PyObject* dtype = items[6];
      if (dtype->kind != Kind::kGlobal || dtype->global != Global::kDType) fail("_rebuild_tensor_v3: bad dtype");
      tensor.dtype = *dtype->dtype;
    } else if (ref.dtype) {
      tensor.dtype = *ref.dtype;
    } else {
      fail(std::string(what) + " of an untyped storage has no dtype");
    }
    if (ref.dtype && *ref.dtype != tensor.dtype) {
      fail(std::string(what) + ": dtype " + std::string(dtype_name(tensor.dtype)) + " differs from its storage's " +
           std::string(dtype_name(*ref.dtype)));
    }
    const int64_t offset = int_argument(items[1], "storage offset");
    if (offset < 0) fail("negative storage offset");
    tensor.offset = static_cast<uint64_t>(offset) + storage->view_offset;
    tensor.shape = int_tuple(items[2], "tensor size");
    tensor.strides = int_tuple(items[3], "tensor stride");
    if (tensor.shape.size() != tensor.strides.size()) fail("tensor size and stride have different lengths");
    for (size_t i = 0; i < tensor.shape.size(); ++i) {
      if (tensor.shape[i] < 0 || tensor.strides[i] < 0) fail("negative tensor size or stride");
    }
    // The optional metadata dict (torch._utils.get_tensor_metadata): the
    // conj and neg bits of lazy views.
    const size_t metadata_at = which == Global::kRebuildTensorV2 ? 6 : 7;
    if (which != Global::kRebuildTensor && items.size() > metadata_at) {
      const PyObject* metadata = items[metadata_at];
      if (metadata->kind == Kind::kDict) {
        for (size_t i = 0; i + 1 < metadata->items.size(); i += 2) {
          const PyObject* key = metadata->items[i];
          const PyObject* value = metadata->items[i + 1];
          const bool on = value->kind == Kind::kBool && value->flag;
          if (key->kind == Kind::kStr && key->text == "conj") {
            tensor.conj = on;
          } else if (key->kind == Kind::kStr && key->text == "neg") {
            tensor.neg = on;
          } else {
            fail("tensor metadata '" + (key->kind == Kind::kStr ? key->text : std::string("?")) +
                     "' is not supported",
                 ErrorCode::kUnsupported);
          }
        }
      } else if (metadata->kind != Kind::kNone) {
        fail(std::string(what) + ": metadata is not a dict");
      }
    }
    PyObject* object = make(Kind::kTensor);
    object->integer = static_cast<int64_t>(result_.tensors.size());
    result_.tensors.push_back(std::move(tensor));
    return object;
  }

  void build(PyObject* target, PyObject* state) {
    // OrderedDict state dicts carry `_metadata` (module versions) as instance
    // state; it is accepted and not kept. Nothing else has state.
    if (target->kind == Kind::kDict && (state->kind == Kind::kDict || state->kind == Kind::kNone)) return;
    if (target->kind == Kind::kTensor && state->kind == Kind::kNone) return;
    fail("BUILD (object state) is only accepted on dicts", ErrorCode::kUnsupported);
  }

  PyObject* persistent_load(PyObject* pid) {
    const size_t fields = options_.legacy ? 6 : 5;
    if (pid->kind != Kind::kTuple || pid->items.size() != fields || pid->items[0]->kind != Kind::kStr ||
        pid->items[0]->text != "storage") {
      fail("persistent id is not a " + std::to_string(fields) + "-tuple ('storage', ...)");
    }
    const auto& items = pid->items;
    PyObject* type = items[1];
    if (type->kind != Kind::kGlobal || type->global != Global::kStorageType) {
      fail("persistent id names no storage class");
    }
    if (items[2]->kind != Kind::kStr) fail("storage key is not a string");
    if (items[3]->kind != Kind::kStr) fail("storage location is not a string");
    const int64_t numel = int_argument(items[4], "storage size");
    if (numel < 0) fail("negative storage size");

    const std::string& key = items[2]->text;
    uint32_t index = 0;
    if (auto found = result_.storage_index.find(key); found != result_.storage_index.end()) {
      index = found->second;
      if (result_.storages[index].dtype != type->dtype) fail("storage '" + key + "' is used with two types");
    } else {
      index = static_cast<uint32_t>(result_.storages.size());
      result_.storages.push_back({.key = key, .dtype = type->dtype, .numel = static_cast<uint64_t>(numel),
                                  .location = items[3]->text});
      result_.storage_index.emplace(key, index);
    }
    PyObject* storage = make(Kind::kStorage);
    storage->integer = index;
    if (options_.legacy && items[5]->kind != Kind::kNone) {
      // (view_key, offset, size): a view of the root storage `key`.
      PyObject* view = items[5];
      if (view->kind != Kind::kTuple || view->items.size() != 3) fail("legacy storage view is not a 3-tuple");
      const int64_t view_offset = int_argument(view->items[1], "storage view offset");
      const int64_t view_size = int_argument(view->items[2], "storage view size");
      if (view_offset < 0 || view_size < 0 || static_cast<uint64_t>(view_offset) + static_cast<uint64_t>(view_size) >
                                                  static_cast<uint64_t>(numel)) {
        fail("legacy storage view lies outside its storage");
      }
      storage->view_offset = static_cast<uint64_t>(view_offset);
    }
    return storage;
  }

  const uint8_t* data_;
  size_t size_;
  UnpickleOptions options_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  Pickle result_;
  std::vector<PyObject*> stack_;
  std::vector<size_t> marks_;
  std::vector<PyObject*> memo_;
  std::unordered_map<uint64_t, PyObject*> sparse_memo_;
  uint64_t memo_count_ = 0;
  static constexpr int64_t kSmallInts = 256;
  static constexpr size_t kCopySlack = size_t{1} << 16;
  size_t copied_ = 0;
  PyObject* small_ints_[kSmallInts] = {};
  PyObject* none_;
  PyObject* true_;
  PyObject* false_;
};

}  // namespace

bool valid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    if ((c & 0xE0) == 0xC0) {
      length = 2, code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3, code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4, code = c & 0x07;
    } else {
      return false;
    }
    if (n - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      code = code << 6 | (s[i + k] & 0x3F);
    }
    // Overlong forms and values past U+10FFFF are invalid; surrogates are
    // allowed, as Python pickles them with "surrogatepass".
    if ((length == 2 && code < 0x80) || (length == 3 && code < 0x800) || (length == 4 && code < 0x10000) ||
        code > 0x10FFFF) {
      return false;
    }
    i += length;
  }
  return true;
}

std::optional<GlobalInfo> resolve_global(std::string_view module, std::string_view name) {
  if (module == "collections" && (name == "OrderedDict" || name == "Counter")) return GlobalInfo{Global::kOrderedDict};
  if (module == "builtins" || module == "__builtin__") {
    if (name == "set" || name == "frozenset") return GlobalInfo{Global::kSet};
    // bytes(): protocol 2's empty bytes; bytearray(...): a bytearray.
    if (name == "bytearray" || name == "bytes") return GlobalInfo{Global::kByteArray};
    return std::nullopt;
  }
  if (module == "_codecs" && name == "encode") return GlobalInfo{Global::kCodecsEncode};
  if (module == "torch._utils") {
    if (name == "_rebuild_tensor") return GlobalInfo{Global::kRebuildTensor};
    if (name == "_rebuild_tensor_v2") return GlobalInfo{Global::kRebuildTensorV2};
    if (name == "_rebuild_tensor_v3") return GlobalInfo{Global::kRebuildTensorV3};
    if (name == "_rebuild_parameter" || name == "_rebuild_parameter_with_state") {
      return GlobalInfo{Global::kRebuildParameter};
    }
    return std::nullopt;
  }
  if (module == "torch._tensor" && name == "_rebuild_from_type_v2") return GlobalInfo{Global::kRebuildFromType};
  if (module == "torch.serialization" && name == "_get_layout") return GlobalInfo{Global::kLayout};
  if ((module == "torch.nn.parameter" || module == "torch.nn") && name == "Parameter") {
    return GlobalInfo{Global::kTensorType};
  }
  if (module == "torch.storage" && (name == "UntypedStorage" || name == "_UntypedStorage")) {
    return GlobalInfo{Global::kStorageType};
  }
  if (module == "torch" || module == "torch.cuda") {
    for (const TypedStorageName& storage : kTypedStorages) {
      if (name == storage.name) return GlobalInfo{Global::kStorageType, storage.dtype};
    }
    if (name == "UntypedStorage") return GlobalInfo{Global::kStorageType};
  }
  if (module == "torch") {
    if (name == "Size") return GlobalInfo{Global::kSize};
    if (name == "device") return GlobalInfo{Global::kDevice};
    if (name == "Tensor") return GlobalInfo{Global::kTensorType};
    for (const DTypeInfo& info : all_dtypes()) {
      if (name == info.torch) return GlobalInfo{Global::kDType, info.dtype};
    }
    for (const DTypeAlias& alias : kDTypeAliases) {
      if (name == alias.name) return GlobalInfo{Global::kDType, alias.dtype};
    }
  }
  return std::nullopt;
}

Pickle unpickle(std::span<const std::byte> bytes, const UnpickleOptions& options) {
  Machine machine(bytes, options);
  return machine.run();
}

}  // namespace ckpt::torch_detail
