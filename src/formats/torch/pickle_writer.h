#pragma once
// PickleWriter: emits pickle protocol 2 opcodes, the subset torch.save uses,
// into a byte string. Globals are memoized (written once, then fetched), as
// Python's pickler does. Byte layout: docs/formats/torch.md.
//
//   PickleWriter out;                // PROTO 2
//   out.empty_dict();
//   out.mark(); out.str("epoch"); out.integer(3); out.setitems();
//   std::string bytes = out.finish();  // STOP

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ckpt::torch_detail {

class PickleWriter {
 public:
  PickleWriter();

  void none();
  void boolean(bool value);
  void integer(int64_t value);   // BININT1/BININT2/BININT, LONG1 beyond 32 bits
  void real(double value);       // BINFLOAT
  // A str; `utf8` must be valid UTF-8 (torch.load decodes it so).
  void str(std::string_view utf8);
  // Python bytes, as protocol 2 writes them: _codecs.encode(latin-1 str, "latin1").
  void bytes(std::string_view data);
  // GLOBAL "module\nname\n" the first time, BINGET after.
  void global(std::string_view module, std::string_view name);
  // A str that is written once and fetched from the memo after ("storage", "cpu").
  void memo_str(std::string_view text);

  void mark();
  void empty_tuple();
  // Builds a tuple of the last `count` values: TUPLE1..3, or TUPLE down to a
  // mark() the caller pushed before them when count > 3.
  void tuple(size_t count);
  void empty_list();
  void appends();   // APPENDS down to the last mark
  void empty_dict();
  void setitems();  // SETITEMS down to the last mark
  void reduce();
  void binpersid();
  // NEWOBJ: cls.__new__(cls, *args) of the class and the argument tuple below.
  void newobj();
  // BUILD: the object below gets the state on top (its __dict__ or __setstate__).
  void build();

  // STOP, and the bytes.
  std::string finish();
  size_t size() const { return out_.size(); }

 private:
  void put_memo(std::string key);
  bool get_memo(const std::string& key);
  std::string out_;
  std::unordered_map<std::string, uint32_t> memo_;
};

}  // namespace ckpt::torch_detail
