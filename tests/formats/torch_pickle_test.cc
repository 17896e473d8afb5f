// The restricted unpickler (torch_detail::unpickle) on pickles written opcode
// by opcode (torch_test_builder.h) or by CPython's pickle (hex below, with
// the expression that made them): values it must read, and malformed or
// malicious pickles one defect at a time, each a ckpt::Error of the expected
// code whose message names the problem and whose offset is the opcode's.
// File-level defects are in torch_malformed_test.cc.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <malloc.h>
#include <set>

#include "ckpt/error.h"
#include "formats/torch/pickle_reader.h"
#include "formats/torch/reader.h"
#include "formats/torch_test_builder.h"

namespace ckpt {
namespace {

using testing::Pkl;
using torch_detail::Pickle;
using torch_detail::PickleValue;
using Kind = PickleValue::Kind;

std::span<const std::byte> span_of(std::string_view bytes) { return std::as_bytes(std::span(bytes)); }

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

Pickle run(const std::string& bytes) { return torch_detail::unpickle(span_of(bytes)); }

// The tree of a pickle that holds no tensors.
Tree tree_of(const std::string& bytes) {
  const Pickle pickle = run(bytes);
  return torch_detail::pickle_to_tree(pickle, bytes.size(), [](uint32_t) -> Tensor {
    ADD_FAILURE() << "no tensor expected";
    return Tensor();
  });
}

// The error of unpickling `bytes`; any other exception fails the test.
Error error_of(const std::string& bytes, const torch_detail::UnpickleOptions& options = {}) {
  try {
    torch_detail::unpickle(span_of(bytes), options);
  } catch (const Error& error) {
    return error;
  }
  ADD_FAILURE() << "the pickle was accepted";
  return Error(ErrorCode::kIo, "accepted");
}

// Expects `code`, a message containing `fragment` and, when given, the
// offset of the opcode at fault.
void expect_error(const std::string& bytes, ErrorCode code, std::string_view fragment,
                  std::optional<uint64_t> offset = std::nullopt) {
  const Error error = error_of(bytes);
  EXPECT_EQ(error.code(), code) << error.what();
  EXPECT_NE(error.message().find(fragment), std::string::npos) << "wanted '" << fragment << "': " << error.what();
  if (offset) {
    EXPECT_EQ(error.context().offset, offset) << error.what();
  }
}
void expect_corrupt(const std::string& bytes, std::string_view fragment, std::optional<uint64_t> offset = {}) {
  expect_error(bytes, ErrorCode::kCorrupt, fragment, offset);
}
void expect_unsupported(const std::string& bytes, std::string_view fragment, std::optional<uint64_t> offset = {}) {
  expect_error(bytes, ErrorCode::kUnsupported, fragment, offset);
}

// ---------------------------------------------------------------- values

int64_t int_of(const std::string& bytes) {
  const Pickle pickle = run(bytes);
  EXPECT_EQ(pickle.root->kind, Kind::kInt);
  return pickle.root->integer;
}

TEST(TorchPickleTest, Long1AndLong4) {
  using testing::pickle_of;
  EXPECT_EQ(int_of(pickle_of(Pkl().long1({}))), 0);
  EXPECT_EQ(int_of(pickle_of(Pkl().long1({0xff}))), -1);
  EXPECT_EQ(int_of(pickle_of(Pkl().long1({0x00, 0x80}))), -32768);
  EXPECT_EQ(int_of(pickle_of(Pkl().long1({0x00, 0x80, 0x00}))), 32768);
  EXPECT_EQ(int_of(pickle_of(Pkl().long1({0, 0, 0, 0, 0, 0, 0, 0x80}))), std::numeric_limits<int64_t>::min());
  // Nine bytes whose ninth is only a sign byte still fit 64 bits.
  EXPECT_EQ(int_of(pickle_of(Pkl().long1({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x00}))),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(int_of(pickle_of(Pkl().long1({0, 0, 0, 0, 0, 0, 0, 0x80, 0xff}))), std::numeric_limits<int64_t>::min());
  // 2^63 and 2^64 do not: kept as their bytes.
  for (const std::string& wide : {std::string("\0\0\0\0\0\0\0\x80\0", 9), std::string("\0\0\0\0\0\0\0\0\x01", 9)}) {
    Pkl p;
    p.op(0x8a).op(9).raw(wide);
    const Pickle pickle = run(pickle_of(p));
    EXPECT_EQ(pickle.root->kind, Kind::kBigInt);
    EXPECT_EQ(pickle.root->text, wide);
  }
  // LONG4 0x1234.
  EXPECT_EQ(int_of(pickle_of(Pkl().op(0x8b).raw(std::string("\x02\0\0\0\x34\x12", 6)))), 0x1234);
}

TEST(TorchPickleTest, OtherIntegers) {
  using testing::pickle_of;
  EXPECT_EQ(int_of(pickle_of(Pkl().raw("J\xff\xff\xff\xff"))), -1);
  EXPECT_EQ(int_of(pickle_of(Pkl().raw("M\xff\xff"))), 65535);
  EXPECT_EQ(int_of(pickle_of(Pkl().raw("K\xff"))), 255);
  EXPECT_EQ(int_of(pickle_of(Pkl().raw("I-42\n"))), -42);
  EXPECT_EQ(int_of(pickle_of(Pkl().raw("L-9223372036854775808L\n"))), std::numeric_limits<int64_t>::min());
  const Pickle boolean = run(pickle_of(Pkl().raw("I01\n")));  // protocol 0's True
  EXPECT_EQ(boolean.root->kind, Kind::kBool);
  EXPECT_TRUE(boolean.root->flag);
  expect_unsupported(pickle_of(Pkl().raw("I9223372036854775808\n")), "does not fit 64 bits", 2);
  expect_corrupt(pickle_of(Pkl().raw("I4x\n")), "bad INT argument", 2);
}

double float_of(uint64_t bits) {
  const Pickle pickle = run(testing::pickle_of(Pkl().binfloat_bits(bits)));
  EXPECT_EQ(pickle.root->kind, Kind::kFloat);
  return pickle.root->real;
}

TEST(TorchPickleTest, BinFloatIsBigEndian) {
  EXPECT_EQ(float_of(0x3FF8000000000000), 1.5);
  EXPECT_EQ(float_of(0xC000000000000000), -2.0);
  EXPECT_EQ(float_of(0x7FF0000000000000), std::numeric_limits<double>::infinity());
  EXPECT_EQ(float_of(0x0000000000000001), std::numeric_limits<double>::denorm_min());
  EXPECT_TRUE(std::signbit(float_of(0x8000000000000000)));
  const Pickle text = run(testing::pickle_of(Pkl().raw("F0.25\n")));
  EXPECT_EQ(text.root->real, 0.25);
}

TEST(TorchPickleTest, NestedDictsWithIntegerKeys) {
  // {1: {2: "x"}, -3: [1.5, None, True], "s": b"\0\xff"}
  Pkl p(2);
  p.empty_dict().mark().integer(1).empty_dict().integer(2).str("x").setitem();
  p.integer(-3).empty_list().mark().binfloat_bits(0x3FF8000000000000).none().boolean(true).appends();
  p.str("s").short_bytes(std::string("\0\xff", 2)).setitems();
  const Tree tree = tree_of(p.stop());
  ASSERT_TRUE(tree.is_map());
  ASSERT_EQ(tree.size(), 3u);
  const Tree* one = tree.find(Key{int64_t{1}});
  ASSERT_NE(one, nullptr);
  ASSERT_NE(one->find(Key{int64_t{2}}), nullptr);
  EXPECT_EQ(one->find(Key{int64_t{2}})->string(), "x");
  const Tree* minus_three = tree.find(Key{int64_t{-3}});
  ASSERT_NE(minus_three, nullptr);
  ASSERT_EQ(minus_three->size(), 3u);
  EXPECT_EQ((*minus_three)[0].real(), 1.5);
  EXPECT_TRUE((*minus_three)[1].is_none());
  EXPECT_TRUE((*minus_three)[2].boolean());
  EXPECT_EQ(tree.find(Key{std::string("s")})->bytes().data, std::string("\0\xff", 2));
}

TEST(TorchPickleTest, CodecsEncodeIsHowProtocol2StoresBytes) {
  // _codecs.encode("\u00ffA", "latin1") == b"\xffA"
  const Pickle pickle =
      run(Pkl(2).global("_codecs", "encode").str("\xc3\xbf" "A").str("latin1").tuple2().reduce().stop());
  EXPECT_EQ(pickle.root->kind, Kind::kBytes);
  EXPECT_EQ(pickle.root->text, "\xff" "A");
  // U+20AC is not Latin-1.
  expect_corrupt(Pkl(2).global("_codecs", "encode").str("\xe2\x82\xac").str("latin1").tuple2().reduce().stop(),
                 "not Latin-1");
}

TEST(TorchPickleTest, EmptyBytesAsProtocol2WritesThem) {
  // pickle.dumps(b"", protocol=2) (and so torch.save of a dict holding b"")
  // is GLOBAL '__builtin__ bytes', EMPTY_TUPLE, REDUCE: bytes() is b"".
  const Pickle pickle = run(from_hex("8002635f5f6275696c74696e5f5f0a62797465730a7100295271012e"));
  EXPECT_EQ(pickle.root->kind, Kind::kBytes);
  EXPECT_EQ(pickle.root->text, "");
}

// pickle.dumps(obj, protocol) for obj = {1: {2: 'x'}, -3: [1.5, None, True],
// 's': b'\x00\xff', 'big': 2**63-1, 'neg': -2**63, 'e': b'', 'sh': (shared, shared),
// 'od': collections.OrderedDict([('a', 1.0)]), 'f': frozenset(),
// 'u': '\u00e9\u20ac'} with shared = [1, 2] (CPython 3; protocol 4 frames and
// memoizes with MEMOIZE, short strings with SHORT_BINUNICODE and SHORT_BINBYTES).
constexpr std::string_view kCPythonProtocol4 =
    "800495ac000000000000007d94284b017d944b028c017894734afdffffff5d9428473ff80000000000004e88658c017394430200ff948c"
    "03626967948a08ffffffffffffff7f8c036e6567948a0800000000000000808c0165944300948c027368945d94284b014b0265680b8694"
    "8c026f64948c0b636f6c6c656374696f6e73948c0b4f726465726564446963749493942952948c016194473ff0000000000000738c0166"
    "942891948c0175948c05c3a9e282ac94752e";

TEST(TorchPickleTest, WhatCPythonWritesWithProtocol4) {
  const std::string bytes = from_hex(kCPythonProtocol4);
  const Tree tree = tree_of(bytes);
  EXPECT_EQ(tree.at("1.2").string(), "x");
  EXPECT_EQ(tree.find(Key{int64_t{-3}})->size(), 3u);
  EXPECT_EQ(tree.at("s").bytes().data, std::string("\0\xff", 2));
  EXPECT_EQ(tree.at("big").integer(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(tree.at("neg").integer(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(tree.at("e").bytes().data, "");  // SHORT_BINBYTES of length 0
  EXPECT_EQ(tree.at("sh").size(), 2u);
  EXPECT_EQ(tree.at("sh.1.1").integer(), 2);
  EXPECT_EQ(tree.at("od.a").real(), 1.0);
  EXPECT_EQ(tree.at("f").size(), 0u);
  EXPECT_EQ(tree.at("u").string(), "\xc3\xa9\xe2\x82\xac");
  // Both items of the tuple are the one memoized list.
  const Pickle pickle = run(bytes);
  const PickleValue* sh = nullptr;
  for (size_t i = 0; i + 1 < pickle.root->items.size(); i += 2) {
    if (pickle.root->items[i]->text == "sh") sh = pickle.root->items[i + 1];
  }
  ASSERT_NE(sh, nullptr);
  EXPECT_EQ(sh->items[0], sh->items[1]);
  EXPECT_EQ(pickle.end, bytes.size());
}

TEST(TorchPickleTest, SparseMemoIndexAllocatesNothingLarge) {
  // LONG_BINPUT 0xFFFFFFFF then LONG_BINGET of it: one map entry, not a
  // vector of 2^32 slots.
  const Pickle pickle = run(Pkl(2).str("v").long_binput(0xFFFFFFFF).pop().long_binget(0xFFFFFFFF).stop());
  EXPECT_EQ(pickle.root->text, "v");
  Pkl many(2);
  many.str("v");
  for (uint32_t i = 0; i < 1000; ++i) many.long_binput(0xFFFFFFFF - i * 4099);
  EXPECT_EQ(run(many.long_binget(0xFFFFFFFF - 999 * 4099).stop()).root->text, "v");
  expect_corrupt(Pkl(2).str("v").long_binput(0xFFFFFFFF).long_binget(0xFFFFFFFE).stop(),
                 "memo key 4294967294 was never stored", 13);
}

// ---------------------------------------------------------------- malformed

// Every opcode pickletools knows; any other byte must be refused by value.
const std::set<uint8_t> kKnownOpcodes = [] {
  std::set<uint8_t> known;
  for (char c : std::string_view("(.012FIJKLMNPQRSTUVXabcd}eghijl]opqrst)uGBC")) known.insert(static_cast<uint8_t>(c));
  for (int op = 0x80; op <= 0x98; ++op) known.insert(static_cast<uint8_t>(op));
  return known;
}();

TEST(TorchPickleTest, UnknownOpcodes) {
  static constexpr char kHex[] = "0123456789abcdef";
  int unknown = 0;
  for (int op = 0; op < 256; ++op) {
    if (kKnownOpcodes.contains(static_cast<uint8_t>(op))) continue;
    ++unknown;
    const std::string name = std::string("unknown pickle opcode 0x") + kHex[op >> 4] + kHex[op & 15];
    expect_corrupt(Pkl(2).op(static_cast<uint8_t>(op)).stop(), name, 2);
  }
  EXPECT_EQ(unknown, 256 - 68);
}

TEST(TorchPickleTest, EveryTwoByteProgramEndsCleanly) {
  // Every opcode after PROTO 2, followed by each of a few telling bytes
  // (argument bytes and lengths at their extremes, newline, other opcodes),
  // with and without STOP: a value or a ckpt::Error, never another
  // exception or a crash (run it under ASan).
  const std::string kSecond = std::string("\0\x01\x7f\x80\xff.\n(N)]}KXq", 15);
  for (int a = 0; a < 256; ++a) {
    for (char b : kSecond) {
      for (bool stop : {false, true}) {
        std::string bytes = {'\x80', '\x02', static_cast<char>(a), b};
        if (stop) bytes += '.';
        try {
          torch_detail::unpickle(span_of(bytes));
        } catch (const Error&) {
        }
      }
    }
  }
}

TEST(TorchPickleTest, TruncatedAtEveryLength) {
  const std::string whole = testing::state_dict_pickle({{"w", {}}, {"v", {.key = "1", .shape = {2, 2}, .stride = {2, 1}}}});
  ASSERT_NO_THROW(run(whole));
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    const Error error = error_of(whole.substr(0, cut));
    EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << "cut at " << cut << ": " << error.what();
  }
  expect_corrupt("", "without a STOP opcode", 0);
  expect_corrupt(Pkl(2).none(), "without a STOP opcode");
}

TEST(TorchPickleTest, StackUnderflow) {
  expect_corrupt(Pkl(2).stop(), "stack underflow", 2);
  expect_corrupt(Pkl(2).none().tuple2().stop(), "stack underflow", 3);
  expect_corrupt(Pkl(2).global("collections", "OrderedDict").reduce().stop(), "stack underflow");
  expect_corrupt(Pkl(2).str("k").none().setitem().stop(), "stack underflow");
  // A MARK hides what is below it.
  expect_corrupt(Pkl(2).none().mark().stop(), "stack underflow");
  expect_corrupt(Pkl(2).empty_list().mark().append().stop(), "stack underflow");
}

TEST(TorchPickleTest, MarkMissing) {
  for (char op : {'t', 'l', 'd', '1', 'e', 'u', 'o'}) {
    expect_corrupt(Pkl(2).empty_list().empty_dict().op(static_cast<uint8_t>(op)).stop(), "no MARK", 4);
  }
  expect_corrupt(Pkl(2).op(0x8f).op(0x90).stop(), "no MARK", 3);  // ADDITEMS
}

TEST(TorchPickleTest, MemoGetOfAKeyNeverPut) {
  expect_corrupt(Pkl(2).binget(7).stop(), "memo key 7 was never stored", 2);
  expect_corrupt(Pkl(2).none().binput(0).binget(1).stop(), "memo key 1 was never stored", 5);
  expect_corrupt(Pkl(2).long_binget(0x10000).stop(), "memo key 65536 was never stored", 2);
  expect_corrupt(Pkl(2).raw("g5\n").stop(), "memo key 5 was never stored", 2);
  expect_corrupt(Pkl(2).raw("g-1\n").stop(), "bad GET index", 2);
  expect_corrupt(Pkl(2).op(0x94).stop(), "stack underflow", 2);  // MEMOIZE of nothing
}

TEST(TorchPickleTest, HugeDeclaredLengths) {
  // Lengths far beyond the input: an error naming the shortfall, no allocation.
  const auto header = [](uint8_t op, int width, uint64_t length) {
    Pkl p(4);
    p.op(op);
    std::string bytes = p;
    for (int i = 0; i < width; ++i) bytes.push_back(static_cast<char>(length >> (8 * i)));
    return bytes + "abc.";
  };
  for (uint64_t length : {uint64_t{1} << 63, ~uint64_t{0}, uint64_t{1} << 32}) {
    expect_corrupt(header(0x8d, 8, length), "pickle truncated", 2);  // BINUNICODE8
    expect_corrupt(header(0x8e, 8, length), "pickle truncated", 2);  // BINBYTES8
    expect_corrupt(header(0x96, 8, length), "pickle truncated", 2);  // BYTEARRAY8
    expect_corrupt(header(0x95, 8, length), "runs past the end", 2);  // FRAME
  }
  expect_corrupt(header('X', 4, 0xFFFFFFFF), "pickle truncated", 2);  // BINUNICODE
  expect_corrupt(header('B', 4, 0xFFFFFFFF), "pickle truncated", 2);  // BINBYTES
  expect_corrupt(header('T', 4, 0x7FFFFFFF), "pickle truncated", 2);  // BINSTRING
  expect_corrupt(header('T', 4, 0x80000000), "negative length", 2);
  expect_corrupt(header(0x8b, 4, 0x7FFFFFFF), "pickle truncated", 2);  // LONG4
  expect_corrupt(header(0x8b, 4, 0xFFFFFFFF), "negative length", 2);
  expect_corrupt(header(0x8c, 1, 200), "pickle truncated", 2);  // SHORT_BINUNICODE
}

TEST(TorchPickleTest, TextArgumentWithoutEndOfLine) {
  expect_corrupt(Pkl(2).raw("cos"), "no end of line", 2);
  expect_corrupt(Pkl(2).raw("cos\nsystem"), "no end of line", 2);
  expect_corrupt(Pkl(2).raw("I12"), "no end of line", 2);
}

TEST(TorchPickleTest, InvalidUtf8) {
  expect_corrupt(Pkl(2).str("\xff").stop(), "not valid UTF-8", 2);
  expect_corrupt(Pkl(2).str("\xc0\x80").stop(), "not valid UTF-8", 2);  // overlong NUL
  expect_corrupt(Pkl(2).str("\xf4\x90\x80\x80").stop(), "not valid UTF-8", 2);  // past U+10FFFF
  expect_corrupt(Pkl(2).str("\xe2\x82").stop(), "not valid UTF-8", 2);  // cut short
}

TEST(TorchPickleTest, OperationsOnTheWrongKind) {
  expect_corrupt(Pkl(2).empty_dict().none().append().stop(), "APPEND to a non-list", 4);
  expect_corrupt(Pkl(2).empty_dict().mark().none().appends().stop(), "APPENDS to a non-list");
  expect_corrupt(Pkl(2).empty_list().none().none().setitem().stop(), "SETITEM on a non-dict");
  expect_corrupt(Pkl(2).empty_list().mark().none().none().setitems().stop(), "SETITEMS on a non-dict");
  expect_corrupt(Pkl(2).empty_dict().mark().none().setitems().stop(), "odd number of items");
  expect_corrupt(Pkl(2).mark().none().op('d').stop(), "odd number of items");
  expect_corrupt(Pkl(2).empty_list().mark().none().op(0x90).stop(), "ADDITEMS on a non-set");
  expect_corrupt(Pkl(2).empty_list().empty_tuple().reduce().stop(), "not a global");
  expect_corrupt(Pkl(2).global("collections", "OrderedDict").none().reduce().stop(), "not a tuple");
  expect_corrupt(Pkl(2).global("collections", "OrderedDict").int_tuple({1, 2}).reduce().stop(), "2 arguments");
  expect_corrupt(Pkl(2).mark().op('o').stop(), "OBJ without a class");
}

TEST(TorchPickleTest, ForbiddenGlobals) {
  const std::pair<const char*, const char*> kForbidden[] = {
      {"os", "system"},        {"posix", "system"},         {"nt", "system"},          {"builtins", "eval"},
      {"builtins", "exec"},    {"builtins", "__import__"},  {"__builtin__", "getattr"}, {"__builtin__", "open"},
      {"subprocess", "Popen"}, {"shutil", "rmtree"},        {"mymodule", "MyModel"},   {"torch", "load"},
      {"torch.nn.modules.linear", "Linear"},                {"numpy.core.multiarray", "_reconstruct"},
      {"collections", "namedtuple"},                        {"torch._utils", "_rebuild_tensor_v9"},
  };
  for (const auto& [module, name] : kForbidden) {
    std::string full = "'";
    full.append(module).append(".").append(name).append("'");
    // Refused when GLOBAL (STACK_GLOBAL, INST) names it, before any call.
    expect_unsupported(Pkl(2).global(module, name).stop(), full, 2);
    expect_unsupported(Pkl(4).stack_global(module, name).stop(), full);
    expect_unsupported(Pkl(2).mark().op('i').raw(module).raw("\n").raw(name).raw("\n").stop(), full, 3);
    const Error error = error_of(Pkl(2).global(module, name).str("touch x").tuple1().reduce().stop());
    EXPECT_NE(error.message().find("never imports or calls"), std::string::npos) << error.what();
  }
}

TEST(TorchPickleTest, TorchFeaturesCkptDoesNotRead) {
  expect_unsupported(Pkl(2).global("torch._utils", "_rebuild_qtensor").stop(), "quantized tensors", 2);
  expect_unsupported(Pkl(2).global("torch._utils", "_rebuild_sparse_tensor").stop(), "sparse tensors", 2);
  expect_unsupported(Pkl(2).global("torch._utils", "_rebuild_meta_tensor_no_storage").stop(), "meta tensors", 2);
  expect_unsupported(Pkl(2).global("torch", "QInt8Storage").stop(), "quantized storages", 2);
  expect_unsupported(Pkl(2).global("torch.serialization", "_get_layout").str("torch.sparse_coo").tuple1().reduce()
                         .stop(), "layout 'torch.sparse_coo'");
  expect_unsupported(Pkl(2).global("torch", "FloatStorage").empty_tuple().reduce().stop(), "call of 'torch.FloatStorage'");
  expect_unsupported(Pkl(2).empty_list().empty_dict().build().stop(), "BUILD");
}

TEST(TorchPickleTest, ProtocolNewerThan5) {
  expect_unsupported(Pkl(6).none().stop(), "pickle protocol 6 is newer than 5", 0);
  expect_unsupported(Pkl(255).none().stop(), "protocol 255", 0);
  EXPECT_EQ(run(Pkl(5).none().stop()).root->kind, Kind::kNone);
}

TEST(TorchPickleTest, OutOfBandBuffersAndOtherUnsupportedOpcodes) {
  expect_unsupported(Pkl(5).op(0x97).stop(), "out-of-band buffers", 2);       // NEXT_BUFFER
  expect_unsupported(Pkl(5).op(0x97).op(0x98).stop(), "out-of-band buffers", 2);  // READONLY_BUFFER
  expect_unsupported(Pkl(5).empty_list().op(0x98).stop(), "out-of-band buffers", 3);
  expect_unsupported(Pkl(2).raw("\x82\x01").stop(), "extension registry", 2);  // EXT1
  expect_unsupported(Pkl(2).raw("\x84\x01\0\0\0").stop(), "extension registry", 2);  // EXT4
  expect_unsupported(Pkl(0).raw("S'text'\n").stop(), "protocol 0 text strings", 2);
  expect_unsupported(Pkl(0).raw("Vtext\n").stop(), "protocol 0 text strings", 2);
  expect_unsupported(Pkl(0).raw("Pid\n").stop(), "text persistent ids", 2);
}

TEST(TorchPickleTest, ErrorOffsetsAreFileOffsets) {
  const Error error = error_of(Pkl(2).none().op(0xff).stop(), {.file_offset = 1000});
  EXPECT_EQ(error.context().offset, 1003u) << error.what();
}

// ---------------------------------------------------------------- memory and depth

// Bytes the C heap holds now (glibc's statistics; 0 where a sanitizer's
// allocator replaces glibc's).
size_t heap_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

TEST(TorchPickleTest, CallsDoNotCopyTheirArgumentsQuadratically) {
  // One container of k items, then m calls that each make a new container
  // from it (OrderedDict(d), set(l), torch.Size(t)), each popped: the
  // pickle is ~k + 6m bytes; copying the items would hold k * m pointers
  // (128 MB for this 20 KB pickle).
  {
    const size_t before = heap_in_use();
    const std::vector<char> probe(1 << 22, 'x');
    if (heap_in_use() < before + probe.size()) GTEST_SKIP() << "no heap statistics with this allocator";
  }
  constexpr int kItems = 8000;
  constexpr int kCalls = 2000;
  std::string ints;
  for (int i = 0; i < kItems / 2; ++i) ints += "K\x01";
  struct Case {
    const char* module;
    const char* name;
    std::string container;
  };
  const std::vector<Case> cases = {
      {"collections", "OrderedDict", "}(" + std::string(kItems, 'N') + "u"},
      {"builtins", "set", "](" + std::string(kItems, 'N') + "e"},
      {"torch", "Size", "(" + ints + "t"},
  };
  for (const Case& c : cases) {
    Pkl p(2);
    p.global(c.module, c.name).binput(0).pop().raw(c.container).tuple1().binput(1).pop();
    for (int i = 0; i < kCalls; ++i) p.binget(0).binget(1).reduce().pop();
    const std::string bytes = p.none().stop();
    const size_t before = heap_in_use();
    try {
      const Pickle pickle = run(bytes);
      const size_t used = heap_in_use() - std::min(before, heap_in_use());
      EXPECT_LE(used, 256 * bytes.size() + (4 << 20)) << c.module << "." << c.name << ", " << bytes.size() << " bytes";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt) << error.what();  // refusing is fine too
    }
  }
}

TEST(TorchPickleTest, NestedRebuildFromTypeDoesNotOverflowTheStack) {
  // _rebuild_from_type_v2(func, type, args, state) calls func(*args); with
  // func = _rebuild_from_type_v2 again, n levels deep (7 bytes a level),
  // innermost args (): must end in an Error, not a stack overflow. Run in a
  // child process so that a crash fails this test only.
  constexpr int kLevels = 500000;
  Pkl p(2);
  p.global("torch._tensor", "_rebuild_from_type_v2").binput(0).pop().global("torch", "Tensor").binput(1).pop();
  p.binget(0);
  for (int i = 0; i < kLevels; ++i) p.mark().binget(0).binget(1);
  p.empty_tuple();
  for (int i = 0; i < kLevels; ++i) p.none().tuple();
  const std::string bytes = p.reduce().stop();
  EXPECT_EXIT(
      {
        try {
          torch_detail::unpickle(span_of(bytes));
        } catch (const Error& error) {
          std::_Exit(error.code() == ErrorCode::kCorrupt ? 0 : 2);
        }
        std::_Exit(3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(TorchPickleTest, DeepNestingIsNotRecursiveInTheUnpickler) {
  // 300,000 nested lists and 300,000 nested tuples unpickle (the depth
  // limit belongs to the tree builder, which refuses them).
  constexpr int kDepth = 300000;
  std::string lists(kDepth, ']');
  lists.append(kDepth - 1, 'a');
  const std::string list_bytes = Pkl(2).raw(lists).stop();
  EXPECT_EQ(run(list_bytes).root->kind, Kind::kList);
  std::string tuples = ")";
  for (int i = 0; i < kDepth; ++i) tuples += '\x85';
  const std::string tuple_bytes = Pkl(2).raw(tuples).stop();
  EXPECT_EQ(run(tuple_bytes).root->kind, Kind::kTuple);
  for (const std::string* bytes : {&list_bytes, &tuple_bytes}) {
    try {
      tree_of(*bytes);
      ADD_FAILURE() << "accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::kCorrupt);
      EXPECT_NE(error.message().find("deeper than 512"), std::string::npos) << error.what();
    }
  }
}

TEST(TorchPickleTest, MemoizedStringsAreSharedNotCopied) {
  // One 1000-character str and one bytes, memoized, then 1000 BINGETs of
  // each (as torch's pickler writes a str it meets again): every leaf holds
  // the one payload, none a copy of it.
  const std::string text(1000, 'w');
  Pkl p(2);
  p.empty_list().mark().str(text).binput(1).short_bytes("raw bytes").binput(2);
  for (int i = 0; i < 1000; ++i) p.binget(1).binget(2);
  const Tree tree = tree_of(p.appends().stop());
  ASSERT_EQ(tree.size(), 2002u);
  const std::string* first_text = &tree[0].string();
  const Bytes* first_bytes = &tree[1].bytes();
  EXPECT_EQ(*first_text, text);
  EXPECT_TRUE(tree[0].shared());
  for (size_t i = 0; i < tree.size(); i += 2) {
    ASSERT_EQ(&tree[i].string(), first_text) << i;
    ASSERT_EQ(&tree[i + 1].bytes(), first_bytes) << i;
  }
  // A str that is not memoized (no PUT) is its own leaf each time.
  const Tree plain = tree_of(Pkl(2).empty_list().mark().str("a").str("a").appends().stop());
  EXPECT_NE(&plain[0].string(), &plain[1].string());
  EXPECT_FALSE(plain[0].shared());
}

}  // namespace
}  // namespace ckpt
