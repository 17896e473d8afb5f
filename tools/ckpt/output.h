#pragma once
// Text and JSON renderings shared by the subcommands: shapes, byte sizes,
// non-tensor leaves, aligned tables.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/tensor.h"
#include "ckpt/tree.h"

namespace ckpt::tool {

// "512 B", "3.2 KiB", "1.50 MiB", "2.00 GiB": binary units, 3 significant digits.
std::string size_text(uint64_t bytes);
// "1 tensor", "2 tensors": `count` and `noun`, plural with an "s" unless 1.
std::string count_text(uint64_t count, std::string_view noun);

// `text` with every line break replaced by a space, so that it fits one line.
std::string one_line(std::string text);

// Rows of cells printed with each column padded to its widest cell, two
// spaces between columns, `indent` spaces before each row.
class Table {
 public:
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out, size_t indent = 2) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace ckpt::tool
