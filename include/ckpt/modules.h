#pragma once
// Module file assignment: which leaves of a state tree go to which file of a
// checkpoint, and the way back (the union of the files, checked).
//
//   auto parts = ckpt::split_by_module(state, {.files = {{"encoder", "encoder.safetensors"},
//                                                        {"decoder.lm", "lm.safetensors"}},
//                                              .init_only = {"pretrained_lm"}});
//   // parts[0].file == "state" (everything unassigned), then encoder.safetensors, lm.safetensors
//
// Names. A leaf's name is its dotted name (tree.h, without the escape of
// colliding names). A module name is a dotted prefix at component boundaries
// (transform.h's name_under): module "decoder.lm" owns the leaves
// "decoder.lm" and "decoder.lm.*", not "decoder.lmx.w". It need not be a
// node of the tree: in a flat torch state dict {"decoder.lm.w": t} the module
// "decoder.lm" owns the key "decoder.lm.w". Empty maps and lists are placed
// like leaves (by their own name), so that they come back from the files.
//
// The parts are plain trees: save each with ckpt::save; the manager's step
// directory commits them together. See docs/modules.md.

#include <map>
#include <span>
#include <string>
#include <vector>

#include "ckpt/tree.h"

namespace ckpt {

struct ModuleFileOptions {
  // Module name -> file name ("encoder" -> "encoder.safetensors"). A file
  // name is one plain path component (not empty, not "." or "..", no '/',
  // no NUL). Several modules MAY share one file, and a module may name the
  // main file (it then stays there when its parent goes elsewhere).
  std::map<std::string, std::string> files;
  // Modules or parameter names (the same prefix rule) that are never saved:
  // their leaves go to no file, whatever `files` says about them or their
  // parents (init-only beats any assignment).
  std::vector<std::string> init_only;
  // The file of every leaf no module claims.
  std::string main_file = "state";
};

// One file of a checkpoint and what goes into it.
struct ModuleFile {
  std::string file;
  // `state` with every leaf that goes elsewhere removed, and the maps that
  // held only removed leaves pruned: a nested tree stays nested, a flat one
  // flat, keys in the tree's order.
  Tree state;
  // The modules assigned to this file, in name order (none for the main
  // file unless a module names it).
  std::vector<std::string> modules;
};

// Where the leaf (or empty container) named `name` goes: the file of the
// deepest module that owns it, main_file if none does, "" if it is
// init-only. Does not validate `options`.
std::string module_file_of(std::string_view name, const ModuleFileOptions& options);

// Splits `state` (a map, or none for nothing) into one tree per file: the
// main file first, then the assigned files in name order; a file that gets
// no leaf is still returned, with an empty map, so that a module's file
// always exists. A module's leaves go to its file, a deeper assignment beats
// a shallower one (its leaves leave the parent's file), init-only leaves go
// nowhere.
// A list is never divided: all its items go to one file (or all nowhere).
// Throws Error{kInvalidArgument, naming the module, entry or file} for: an
// empty module name; a file name that is not one plain component (main_file
// included); an assigned module or an init_only entry that matches no leaf;
// a list whose items would go to different files (assign the whole list);
// a state that is neither a map nor none.
std::vector<ModuleFile> split_by_module(const Tree& state, const ModuleFileOptions& options);

struct MergeModuleFilesOptions {
  // When set, the maps of the result follow this tree's key order (the
  // target, or the tree that was split), so that split then merge gives back
  // a tree equal (operator==) to the original. Keys it lacks follow, in
  // the order the parts had them. Without it: the parts' order, in turn.
  const Tree* order_like = nullptr;
};

// What merge_module_files() found. The lists hold leaf names as
// RestoreReport's do, and `details` one line per problem in its style, so
// that a loader puts both reports side by side: files first, then
// restore(target, report.state).
struct ModuleFilesReport {
  // The union of the parts: maps united key by key (deeply), lists and
  // leaves taken whole. A leaf in two files is taken from the first (parts
  // order); a leaf in the wrong file is taken all the same.
  Tree state;
  // Leaves (or subtrees) found in more than one file.
  std::vector<std::string> in_two_files;
  // Leaves found in a file their module is not assigned to (init-only ones
  // included: they belong in no file).
  std::vector<std::string> wrong_file;
  // Files that the options expect (the main file, every assigned file) and
  // no part has. Their leaves are then missing from `state`, which
  // restore() reports as missing.
  std::vector<std::string> missing_files;
  // One line per problem, in the order of the lists above:
  //   "encoder.w: in state and encoder.safetensors"
  //   "encoder.w: in state, assigned to encoder.safetensors"
  //   "lm.safetensors: no such file"
  std::vector<std::string> details;

  // True if no problem was found.
  bool ok() const noexcept;
  // "module files found 2 problems: in two files (1): encoder.w: in state and
  // encoder.safetensors; missing files (1): lm.safetensors"; "" when ok().
  std::string summary() const;
};

// The inverse of split_by_module(): the union of `parts` (each file's name
// and its tree as loaded; `modules` is not read), checking that
// every leaf came from exactly one file, the one its module is assigned to
// (module_file_of), and that every expected file is there.
// Throws Error{kInvalidArgument} for options split_by_module() refuses
// (the matching of modules against leaves aside), two parts with one file
// name, or a part whose state is not a map (or none).
ModuleFilesReport merge_module_files(std::span<const ModuleFile> parts, const ModuleFileOptions& options,
                                     const MergeModuleFilesOptions& merge_options = {});

}  // namespace ckpt
