#pragma once
// convert: one checkpoint rewritten in another format, as `ckpt convert`,
// ckpt.convert() in Python and any program do it. Tensors are copied
// bit-exact (a dtype the target lacks is an error, never a cast); leaves can
// be renamed and dropped on the way.
//
//   ckpt::convert("model.pt", "model.safetensors");
//   ckpt::convert("old.pt", "new.ckpt", {.save = {.format = "tf"}, .rename = transforms});

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/format.h"
#include "ckpt/transform.h"
#include "ckpt/url.h"

namespace ckpt {

struct ConvertOptions {
  // How the target is written (format, extras, checksum, shards...). The
  // format is save.format, else the one `dst`'s extension names; unlike
  // save(), an extension that names no format is an error, never a silent
  // safetensors file. save.metadata empty: the source's metadata goes along
  // where the target keeps metadata (npz and npy do not).
  SaveOptions save;
  // Applied to the source's leaf names before anything is written.
  Transforms rename;
  // The tree goes to the target as it is wherever the target's writer
  // holds it (with save.extras, every format with the nested_tree
  // capability; without, what each writer holds: a TF bundle keeps strings
  // and bytes, torch everything). A target without the lists_and_int_keys
  // capability (Flax) writes lists as maps keyed "0", "1", ... and integer
  // keys as strings, as Flax's to_bytes does: every leaf keeps its name. A
  // target that refuses the tree (npz, a plain safetensors file) gets the
  // tensors alone, under their dotted names. The non-tensor values it
  // cannot hold are never lost silently: the conversion is refused unless
  // this is true, and then they are left behind and listed in
  // ConvertReport::dropped.
  bool drop_unsupported = false;
  // Applied to the tree after `rename`, before anything is written: the
  // tree to write instead (its tensors still map the source; reading them
  // reads it). Null: none. What it throws names `src` where it names no
  // file. `ckpt convert --fold-weight-norm` passes fold_weight_norm
  // (weight_norm.h) here.
  std::function<Tree(const Tree&)> rewrite;
  // A progress bar on stderr (bytes written of the source's tensor bytes,
  // rate, ETA) for a conversion of 256 MiB or more: kAuto draws it when
  // stderr is a terminal (or as CKPT_PROGRESS says; ckpt/url.h).
  Progress progress = Progress::kAuto;
};

struct ConvertReport {
  std::string source_format;  // the format id that read `src`
  std::string target_format;  // the format id written (that of the layout it picked: "hf_sharded" for shards)
  size_t tensors = 0;         // stored tensors of the source (EntryInfo), and their bytes
  uint64_t nbytes = 0;
  size_t renamed = 0;         // leaves whose name the transforms changed
  size_t removed = 0;         // leaves the transforms dropped
  std::vector<std::string> dropped;  // non-tensor values left behind (drop_unsupported)
};

// Reads `src` and writes it to `dst` atomically (an earlier `dst` is
// untouched on any failure). Read errors name `src`, write errors `dst`.
// Throws Error{kInvalidArgument} if no target format can be told, or
// max_shard_bytes is given for a format without the shards capability,
// {kUnsupported} if the target cannot be written or cannot hold what the
// source has (see drop_unsupported), and what open() and save() throw.
ConvertReport convert(const std::filesystem::path& src, const std::filesystem::path& dst,
                      const ConvertOptions& options = {});

}  // namespace ckpt
