#pragma once
// Restore: matching a loaded tree (the source) against a target (the current
// model or training state, or a spec of names with dtypes and shapes) and
// filling the target from it, with one structured answer for everything that
// did not match.
//
//   ckpt::RestoreReport r = ckpt::restore(target, ckpt::load("step_1200.pt"));
//
// Leaves are matched by their dotted names (tree.h), so a flat torch state
// dict matches the same nest, and a list matches a map with keys "0", "1"
// (as Flax stores lists). Names are compared after the source's renames
// (RestoreOptions::rename). Empty maps and lists are not leaves: they stay as
// the target has them.

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/error.h"
#include "ckpt/transform.h"
#include "ckpt/tree.h"

namespace ckpt {

// Where a default applies (RestoreOptions::defaults):
//  * a name: that leaf, or the subtree of that name and every leaf under it
//    ("ema" covers "ema.w" but not "emax"; "" covers every leaf);
//  * a glob, any string with '*', '?' or '[': the leaves whose names match it
//    (transform.h's glob_match, '*' crossing dots);
//  * a KeyPath: the node at those keys and every leaf under it (keys compared
//    exactly: the string "0" is not the integer 0 here).
using FieldSelector = std::variant<std::string, KeyPath>;

namespace detail {
class DeclaredDefaults;
}

// What a missing optional field becomes.
class FieldDefault {
 public:
  using Initializer = std::function<Tree(std::string_view name, const Tree& current)>;
  using Factory = std::function<Tree()>;
  enum class Kind { kKeep, kValue, kFactory, kInit };

  // The target's current value stays (a new layer keeps its initialization).
  static FieldDefault keep();
  // A value. A leaf declared itself (by its name, its key path or a glob)
  // takes the whole value. A leaf under a declared subtree takes the part of
  // the value at the leaf's path below the subtree: key by key where the
  // declared name ends at a key of the target (a key finds the value's equal
  // key, else one that prints the same: the string "0", the integer key 0
  // and a list's first item are one), by dotted name (Tree::find_path) where
  // it ends inside a key (a flat state dict's "head" for "head.weight").
  // Whole field: a declared subtree (a name or key path, not a glob) all of
  // whose leaves were defaulted by this declaration takes a value that is
  // not a map or list whole, in the subtree's place (none in place of a map
  // of tensors); a map or list gives each leaf its part as above.
  static FieldDefault value(Tree value);
  // As value(), with the value made by `factory`: at most once per restore(),
  // when a leaf first needs it (never when no leaf does).
  static FieldDefault factory(Factory factory);
  // Called for each defaulted leaf with its name and the target's current
  // leaf; returns the leaf's value.
  static FieldDefault init(Initializer initializer);

  Kind kind() const noexcept { return kind_; }

 private:
  friend class detail::DeclaredDefaults;
  Kind kind_ = Kind::kKeep;
  Tree value_;
  Factory factory_;
  Initializer initializer_;
};

enum class DTypePolicy {
  kError,  // a dtype mismatch is a mismatch (the default)
  kCast,   // convert to the target's dtype (cast.h) and report it under `cast`
};

struct RestoreOptions {
  // True: any missing, unexpected, shape- or dtype-mismatched leaf throws one
  // MismatchError listing them all. False: restore what matches and report
  // the rest.
  bool strict = true;
  DTypePolicy dtype = DTypePolicy::kError;
  // With kCast: only these (checkpoint dtype, target dtype) pairs are cast;
  // empty: any pair.
  std::vector<std::pair<DType, DType>> casts;
  // Optional fields, each a name, glob or key path (FieldSelector) -> its
  // default. A missing leaf that one covers takes the default and is reported
  // as defaulted, in strict mode too. The first declaration that covers a
  // leaf wins.
  std::vector<std::pair<FieldSelector, FieldDefault>> defaults;
  // Partial restore: only target leaves under this name (and source leaves
  // under it, after renaming) take part; the rest of the target stays as it
  // is and is not reported. Empty: everything.
  std::string prefix;
  // Likewise, only names matching one of these globs; empty: every name.
  std::vector<std::string> only;
  // Applied to the source's names before matching.
  Transforms rename;
  // Threads for casts; 0 picks min(hardware threads, 4).
  unsigned threads = 0;
};

// A part of RestoreReport::tree that restore() filled: a leaf from the source
// or from a default, or a subtree that took its default whole.
struct FilledPart {
  static constexpr size_t kFromSource = static_cast<size_t>(-1);

  KeyPath path;  // where it lies in the tree
  // The declaration (index into RestoreOptions::defaults) whose default it
  // holds, or kFromSource.
  size_t default_index = kFromSource;
  // True where it holds that value or factory default's whole value (a
  // declared leaf, a glob's leaf, a subtree taking it whole), not a part of
  // it found below a declared subtree.
  bool whole_default = false;
};

struct RestoreReport {
  // The target with matched leaves replaced by the source's (tensors share
  // the source's memory; cast ones are fresh), defaulted ones by their
  // defaults (a subtree that takes its default whole holds that value in its
  // place), every other leaf as the target had it. Without a target: the
  // source, renamed and filtered.
  Tree tree;
  // With a target: each part of `tree` that restore() filled (keep defaults
  // fill nothing), in target order, by key path, so that a caller can put the
  // values into structures of its own without names. Empty without a target.
  std::vector<FilledPart> filled;
  // Leaf names (target names; unexpected ones are the source's, renamed),
  // in target order (unexpected: source order).
  std::vector<std::string> restored;          // filled from the source (cast ones included)
  std::vector<std::string> missing;           // in the target, not in the source, no default
  std::vector<std::string> unexpected;        // in the source, not in the target
  std::vector<std::string> shape_mismatched;  // skipped: the target keeps its value
  std::vector<std::string> dtype_mismatched;  // skipped: dtype (or kind: tensor vs string) differs
  std::vector<std::string> defaulted;         // missing, filled from a declared default
  std::vector<std::string> cast;              // restored through a dtype cast
  // One line per mismatch with what each side has ("w: checkpoint [3, 4]
  // float32, target [4, 4] float32"), in the order of the lists above.
  std::vector<std::string> details;

  // True if nothing is missing, unexpected or mismatched.
  bool ok() const noexcept;
  // The problems grouped by kind, every name listed:
  //   "restore found 3 problems: missing (2): a, b; shape mismatched (1): w: ..."
  // "" when ok().
  std::string summary() const;
};

// Thrown by a strict restore; what() is the report's summary().
class MismatchError : public Error {
 public:
  explicit MismatchError(RestoreReport report);
  const RestoreReport& report() const noexcept { return report_; }

 private:
  RestoreReport report_;
};

// Fills `target` from `source`. Target tensor leaves give the dtype and shape
// a leaf must have (Tensor::spec leaves have nothing else); a source tensor
// of another shape is never applied, even partly. Non-tensor leaves take the
// source's value when it is of the same kind; an int goes into a float leaf,
// and a 0-d tensor into a bool/int/float leaf (or such a value into a 0-d
// tensor leaf) when the value is exactly representable; a none leaf in the
// target takes whatever the source has under its name, a whole subtree
// included. Target leaves that share memory (tied weights) are restored
// together: one found in the source fills the others.
// Throws MismatchError (strict), Error{kInvalidArgument} for a bad option (a
// value default without the leaf, or with a tensor of another shape for a
// tensor leaf), or what a cast, a rename or a default's factory or
// initializer throws.
RestoreReport restore(const Tree& target, const Tree& source, const RestoreOptions& options = {});

// Raw restore, no target: the source as loaded, renamed and filtered
// (prefix, only); every leaf is reported restored.
RestoreReport restore(const Tree& source, const RestoreOptions& options = {});

}  // namespace ckpt
