#pragma once
// RETURNN's `learning_rates` file: the per-epoch learning rate and scores
// that RETURNN's LearningRateControl keeps beside its models
// (returnn/learning_rate_control.py: save() writes better_repr(epoch_data),
// load() eval()s the text with EpochData, nan, inf and np in scope):
//
//   {
//   1: EpochData(learningRate=0.001, error={
//   'dev_error': 0.25,
//   'dev_score': 1.2,
//   }),
//   2: EpochData(learningRate=0.001, error={'dev_score': 1.1}),
//   }
//
// Read without Python by a small parser of exactly that literal subset
// (docs/manager.md, "learning_rates"), bounded in size and depth; written
// back as RETURNN writes it, so that RETURNN's own load() reads it.

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt::detail {

// One epoch's record (RETURNN's LearningRateControl.EpochData).
struct EpochRecord {
  // learningRate=..., absent when the file says None.
  std::optional<double> learning_rate;
  // The scores of `error={...}` that are numbers ("dev_score", "train_score",
  // "dev_error_output/output_prob", ...); an old file's plain `error=1.5` is
  // {"old_format_score": 1.5}, as RETURNN reads it.
  std::map<std::string, double> scores;
  // RETURNN's meta entries (error keys ":meta:NAME"), by NAME, each kept as
  // the Python literal text it had (a number, string, None, True, a list...),
  // so that writing it back loses nothing.
  std::map<std::string, std::string> meta;

  bool operator==(const EpochRecord&) const = default;
};

// epoch -> record, in epoch order.
using LearningRates = std::map<int64_t, EpochRecord>;

// The file's name inside a RETURNN model directory (RETURNN's default for
// `learning_rate_file`; i6's setups keep it beside the models).
inline constexpr std::string_view kLearningRatesFile = "learning_rates";

// The prefix of an error key that holds a meta entry (":meta:NAME").
inline constexpr std::string_view kMetaKeyPrefix = ":meta:";

// Limits of the parser: the text is a human-sized record, not data.
inline constexpr size_t kMaxLearningRatesBytes = 64u << 20;  // 64 MiB
inline constexpr int kMaxLiteralDepth = 32;                   // nested [ ( { in a meta value

// Parses the text of a learning_rates file. `file` names it in errors.
// Accepts: a dict literal of integer epochs to EpochData(learningRate=X,
// error=E) calls (keywords in any order, also `learning_rate=`, `meta={}`);
// X a number or None; E a dict of string keys to numbers (keys ":meta:NAME"
// to any literal), a plain number (the old format) or None. Numbers: Python
// int and float literals, nan, inf, float('nan'), float('-inf'),
// np.float64(X), np.float32(X) and the like; signs; `#` comments; trailing
// commas. Throws Error{kCorrupt} naming `file` and "line L, column C" for
// anything else, a duplicate epoch or key, more than kMaxLiteralDepth levels,
// or a text over kMaxLearningRatesBytes.
LearningRates parse_learning_rates(std::string_view text, const std::filesystem::path& file = {});

// Reads and parses `file`. Throws Error{kNotFound}, {kIo}, or as
// parse_learning_rates.
LearningRates read_learning_rates(const std::filesystem::path& file);

// The text RETURNN's save() writes for `rates` (better_repr: epochs and keys
// sorted, a dict on several lines with a trailing comma each once its items
// are 40 characters or more, floats as Python's repr, nan and inf as
// float('nan'), float('inf')), which RETURNN's load() and
// parse_learning_rates read back to the same values. Scores and a learning
// rate are floats in the file (RETURNN's EpochData refuses an int learning
// rate). Throws Error{kInvalidArgument} for a key or meta name that is not
// valid UTF-8, or a meta value that is not a literal parse_learning_rates
// accepts.
std::string learning_rates_text(const LearningRates& rates);

// Writes learning_rates_text(rates) to `file` atomically (io/atomic_file.h).
void write_learning_rates(const std::filesystem::path& file, const LearningRates& rates);

// Python's repr() of a float: the shortest text that reads back to `value`,
// in fixed notation for exponents -4..15 ("0.001", "1.0", "1e-05", "1e+16"),
// "nan", "inf", "-inf".
std::string python_float_repr(double value);

}  // namespace ckpt::detail
