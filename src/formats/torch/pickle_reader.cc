#include "formats/torch/pickle_reader.h"

#include <bit>
#include <cstring>
#include <limits>

#include "formats/torch/pickle_machine.h"

namespace ckpt::torch_detail {
namespace {

constexpr int kHighestProtocol = 5;

}  // namespace

void Machine::step(uint8_t op) {
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
      PickleValue* object = make(Kind::kFloat);
      object->real = std::bit_cast<double>(bits);
      push(object);
      return;
    }
    case kFloat: {
      const std::string line(take_line());
      char* end = nullptr;
      const double value = std::strtod(line.c_str(), &end);
      if (line.empty() || end != line.c_str() + line.size()) fail("bad FLOAT argument");
      PickleValue* object = make(Kind::kFloat);
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
      const bool utf8 = detail::valid_utf8(text, kPickleUtf8);
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
      PickleValue* popped[3];
      for (size_t i = count; i-- > 0;) popped[i] = pop();
      PickleValue* tuple = make(Kind::kTuple);
      tuple->items.append(popped, popped + count);
      push(tuple);
      return;
    }
    case kTuple: {
      const size_t mark = take_mark();
      PickleValue* tuple = make(Kind::kTuple);
      move_above(mark, tuple->items);
      push(tuple);
      return;
    }
    case kEmptyList: push(make(Kind::kList)); return;
    case kList: {
      const size_t mark = take_mark();
      PickleValue* list = make(Kind::kList);
      move_above(mark, list->items);
      push(list);
      return;
    }
    case kAppend: {
      PickleValue* value = pop();
      PickleValue* list = top();
      if (list->kind != Kind::kList) fail("APPEND to a non-list");
      list->items.push_back(value);
      return;
    }
    case kAppends: {
      const size_t mark = take_mark();
      PickleValue* list = below(mark);
      if (list->kind != Kind::kList) fail("APPENDS to a non-list");
      move_above(mark, list->items);
      return;
    }
    case kEmptyDict: push(make(Kind::kDict)); return;
    case kDict: {
      const size_t mark = take_mark();
      if ((stack_.size() - mark) % 2 != 0) fail("DICT with an odd number of items");
      PickleValue* dict = make(Kind::kDict);
      move_above(mark, dict->items);
      push(dict);
      return;
    }
    case kSetItem: {
      PickleValue* value = pop();
      PickleValue* key = pop();
      PickleValue* dict = top();
      if (dict->kind != Kind::kDict) fail("SETITEM on a non-dict");
      dict->items.push_back(key);
      dict->items.push_back(value);
      return;
    }
    case kSetItems: {
      const size_t mark = take_mark();
      if ((stack_.size() - mark) % 2 != 0) fail("SETITEMS with an odd number of items");
      PickleValue* dict = below(mark);
      if (dict->kind != Kind::kDict) fail("SETITEMS on a non-dict");
      move_above(mark, dict->items);
      return;
    }
    case kEmptySet: push(make(Kind::kSet)); return;
    case kAddItems: {
      const size_t mark = take_mark();
      PickleValue* set = below(mark);
      if (set->kind != Kind::kSet) fail("ADDITEMS on a non-set");
      move_above(mark, set->items);
      return;
    }
    case kFrozenSet: {
      const size_t mark = take_mark();
      PickleValue* set = make(Kind::kSet);
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
      PickleValue* name = pop();
      PickleValue* module = pop();
      if (name->kind != Kind::kStr || module->kind != Kind::kStr) fail("STACK_GLOBAL needs two strings");
      push(make_global(module->text, name->text));
      return;
    }
    case kReduce: {
      PickleValue* args = pop();
      PickleValue* callable = pop();
      push(call(callable, args));
      return;
    }
    case kNewObj: {
      PickleValue* args = pop();
      PickleValue* cls = pop();
      push(call(cls, args));
      return;
    }
    case kNewObjEx: {
      PickleValue* kwargs = pop();
      PickleValue* args = pop();
      PickleValue* cls = pop();
      if (kwargs->kind != Kind::kDict || !kwargs->items.empty()) fail("NEWOBJ_EX with keyword arguments");
      push(call(cls, args));
      return;
    }
    case kInst: {
      const std::string module(take_line());
      const std::string name(take_line());
      PickleValue* cls = make_global(module, name);
      const size_t mark = take_mark();
      PickleValue* args = make(Kind::kTuple);
      move_above(mark, args->items);
      push(call(cls, args));
      return;
    }
    case kObj: {
      std::vector<PickleValue*> items = pop_mark();
      if (items.empty()) fail("OBJ without a class");
      PickleValue* args = make(Kind::kTuple);
      args->items.assign(items.begin() + 1, items.end());
      push(call(items.front(), args));
      return;
    }
    case kBuild: {
      PickleValue* state = pop();
      PickleValue* target = top();
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
      fail("unknown pickle opcode 0x" + detail::hex_digits(op, 2));
    }
  }
}

Pickle unpickle(std::span<const std::byte> bytes, const UnpickleOptions& options) {
  Machine machine(bytes, options);
  return machine.run();
}

}  // namespace ckpt::torch_detail
