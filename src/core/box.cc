#include "ckpt/box.h"

#include <algorithm>
#include <mutex>

#include "core/box_copy.h"

namespace ckpt {
namespace {

// The elements of `region` (a box of the global tensor) that lie in `piece`,
// copied into `out` (the region's own C-order array).
void copy_piece_part(const Piece& piece, const Box& region, std::span<std::byte> out, size_t element_size) {
  const std::optional<Box> common = intersect(piece.box, region);
  if (!common) return;
  std::vector<int64_t> from_origin(common->offsets.size()), to_origin(common->offsets.size());
  for (size_t d = 0; d < common->offsets.size(); ++d) {
    from_origin[d] = common->offsets[d] - piece.box.offsets[d];
    to_origin[d] = common->offsets[d] - region.offsets[d];
  }
  // A mapped piece whose rows (dimension 0) the common part covers (nearly)
  // whole: those rows read alone from the file (Storage::copy_out_alone, no
  // readahead past them), straight into `out` where they are whole rows
  // there too.
  const Buffer& source = piece.data.buffer();
  if (source.kind() == StorageKind::kMapped && source.address() != nullptr && !common->sizes.empty()) {
    uint64_t row_bytes = element_size;
    for (size_t d = 1; d < piece.box.sizes.size(); ++d) row_bytes *= static_cast<uint64_t>(piece.box.sizes[d]);
    const uint64_t rows_bytes = static_cast<uint64_t>(common->sizes[0]) * row_bytes;
    const uint64_t needed = box_numel(*common) * element_size;
    if (rows_bytes <= needed + needed / 4) {
      const std::byte* rows_at = source.address() + static_cast<uint64_t>(from_origin[0]) * row_bytes;
      bool whole_rows = true;
      for (size_t d = 1; d < common->sizes.size(); ++d) {
        whole_rows = whole_rows && common->sizes[d] == piece.box.sizes[d] && common->sizes[d] == region.sizes[d];
      }
      if (whole_rows) {
        source.storage()->copy_out_alone(
            rows_at, out.subspan(static_cast<uint64_t>(to_origin[0]) * row_bytes, static_cast<size_t>(rows_bytes)));
        return;
      }
      Buffer rows = Buffer::allocate(static_cast<size_t>(rows_bytes));
      source.storage()->copy_out_alone(rows_at, rows.mutable_bytes());
      Shape rows_shape = piece.box.sizes;
      rows_shape[0] = common->sizes[0];
      std::vector<int64_t> rows_origin = from_origin;
      rows_origin[0] = 0;
      detail::copy_box({.element_size = element_size,
                        .extent = common->sizes,
                        .to = out,
                        .to_shape = region.sizes,
                        .to_origin = to_origin,
                        .from = rows.bytes(),
                        .from_shape = rows_shape,
                        .from_origin = rows_origin});
      return;
    }
  }
  // Any other piece is read through its bytes: a mapped one's through the
  // mapping (only the pages of the common part's rows are faulted in),
  // other deferred pieces produced whole.
  detail::copy_box({.element_size = element_size,
                    .extent = common->sizes,
                    .to = out,
                    .to_shape = region.sizes,
                    .to_origin = to_origin,
                    .from = piece.data.bytes(),
                    .from_shape = piece.box.sizes,
                    .from_origin = from_origin});
}

// A global tensor's elements held in pieces, assembled on first use.
class PiecedStorage final : public Storage {
 public:
  PiecedStorage(DType dtype, Shape shape, std::vector<Piece> pieces, size_t nbytes)
      : dtype_(dtype), shape_(std::move(shape)), pieces_(std::move(pieces)), nbytes_(nbytes) {}

  StorageKind kind() const override { return StorageKind::kDeferred; }

  const std::byte* materialize() const override {
    std::call_once(once_, [this] {
      Buffer buffer = Buffer::allocate(nbytes_);
      assemble(buffer.mutable_bytes());
      assembled_ = std::move(buffer);
    });
    return assembled_.data();
  }

  void copy_out(const std::byte* src, std::span<std::byte> dst) const override {
    if (src != nullptr) {  // a slice of the assembled bytes
      std::copy_n(src, dst.size(), dst.data());
      return;
    }
    if (dst.size() != nbytes_) {
      throw Error(ErrorCode::kInvalidArgument, "copy_to: destination size differs from the pieced tensor's");
    }
    assemble(dst);
  }

  const std::vector<Piece>& pieces() const { return pieces_; }

  void read_region(const Box& region, std::span<std::byte> out) const {
    for (const Piece& piece : pieces_) copy_piece_part(piece, region, out, dtype_size(dtype_));
  }

 private:
  void assemble(std::span<std::byte> out) const { read_region(whole_box(shape_), out); }

  DType dtype_;
  Shape shape_;
  std::vector<Piece> pieces_;
  size_t nbytes_;
  mutable std::once_flag once_;
  mutable Buffer assembled_;
};

const PiecedStorage* pieced_storage(const Tensor& tensor) {
  const Buffer& buffer = tensor.buffer();
  if (!buffer.deferred() || buffer.storage()->kind() != StorageKind::kDeferred) return nullptr;
  return dynamic_cast<const PiecedStorage*>(buffer.storage().get());
}

}  // namespace

Box whole_box(const Shape& shape) { return {.offsets = std::vector<int64_t>(shape.size(), 0), .sizes = shape}; }

uint64_t box_numel(const Box& box) { return checked_numel(box.sizes); }

std::string box_text(const Box& box) {
  std::string text = "[";
  for (size_t d = 0; d < box.sizes.size(); ++d) {
    if (d > 0) text += ", ";
    const int64_t start = d < box.offsets.size() ? box.offsets[d] : 0;
    text += std::to_string(start) + ":" + std::to_string(start + box.sizes[d]);
  }
  return text + "]";
}

void check_box(const Box& box, const Shape& shape, const ErrorContext& context) {
  const auto fail = [&](const std::string& why) {
    throw Error(ErrorCode::kInvalidArgument, "box " + box_text(box) + " of a tensor of shape " + shape_text(shape) +
                                                 ": " + why,
                context);
  };
  if (box.offsets.size() != shape.size() || box.sizes.size() != shape.size()) {
    fail("its rank is not the tensor's (" + std::to_string(box.offsets.size()) + " offsets, " +
         std::to_string(box.sizes.size()) + " sizes)");
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (box.offsets[d] < 0 || box.sizes[d] < 0) fail("a negative offset or size");
    if (box.offsets[d] > shape[d] || box.sizes[d] > shape[d] - box.offsets[d]) {
      fail("it reaches outside the tensor in dimension " + std::to_string(d));
    }
  }
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  const size_t rank = a.sizes.size();
  if (a.offsets.size() != rank || b.offsets.size() != b.sizes.size() || b.sizes.size() != rank) {
    throw Error(ErrorCode::kInvalidArgument,
                "intersect: boxes " + box_text(a) + " and " + box_text(b) + " differ in rank");
  }
  Box common{.offsets = std::vector<int64_t>(rank), .sizes = std::vector<int64_t>(rank)};
  for (size_t d = 0; d < rank; ++d) {
    const int64_t start = std::max(a.offsets[d], b.offsets[d]);
    const int64_t stop = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (stop <= start) return std::nullopt;
    common.offsets[d] = start;
    common.sizes[d] = stop - start;
  }
  return common;
}

void check_tiling(const Shape& shape, const std::vector<Box>& boxes, ErrorCode code, const ErrorContext& context) {
  const uint64_t total = checked_numel(shape);
  const auto fail = [&](const std::string& why) {
    throw Error(code, "pieces of a tensor of shape " + shape_text(shape) + ": " + why, context);
  };
  uint64_t covered = 0;
  for (const Box& box : boxes) {
    if (box.offsets.size() != shape.size() || box.sizes.size() != shape.size()) {
      fail("piece " + box_text(box) + " has another rank than the tensor");
    }
    try {
      check_box(box, shape);
    } catch (const Error&) {
      fail("piece " + box_text(box) + " lies outside the tensor");
    }
    covered += box_numel(box);
  }
  // Boxes that share no element and add up to the tensor tile it. Sorted by
  // their first offset, a box can only overlap the ones after it that start
  // before it ends in dimension 0.
  std::vector<size_t> order(boxes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto start0 = [&](size_t i) { return shape.empty() ? int64_t{0} : boxes[i].offsets[0]; };
  const auto stop0 = [&](size_t i) { return shape.empty() ? int64_t{1} : boxes[i].offsets[0] + boxes[i].sizes[0]; };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return start0(a) < start0(b); });
  for (size_t i = 0; i < order.size(); ++i) {
    if (box_numel(boxes[order[i]]) == 0) continue;
    for (size_t j = i + 1; j < order.size() && start0(order[j]) < stop0(order[i]); ++j) {
      if (box_numel(boxes[order[j]]) != 0 && intersect(boxes[order[i]], boxes[order[j]])) {
        fail("piece " + box_text(boxes[order[j]]) + " overlaps piece " + box_text(boxes[order[i]]));
      }
    }
  }
  if (covered != total) {
    fail("they leave " + std::to_string(total - covered) + " of its " + std::to_string(total) +
         " elements uncovered");
  }
}

Tensor pieced_tensor(DType dtype, const Shape& shape, std::vector<Piece> pieces, const ErrorContext& context) {
  const size_t element_size = dtype_size(dtype);
  const uint64_t total = checked_numel(shape, element_size);  // the byte size checked too
  std::vector<Box> boxes;
  boxes.reserve(pieces.size());
  for (const Piece& piece : pieces) {
    const auto fail = [&](const std::string& why) {
      throw Error(ErrorCode::kCorrupt,
                  "piece " + box_text(piece.box) + " of a tensor of shape " + shape_text(shape) + ": " + why, context);
    };
    if (piece.data.dtype() != dtype) {
      fail("its dtype is " + std::string(dtype_name(piece.data.dtype())) + ", the tensor's " +
           std::string(dtype_name(dtype)));
    }
    if (piece.data.shape() != piece.box.sizes) fail("its data has shape " + shape_text(piece.data.shape()));
    boxes.push_back(piece.box);
  }
  check_tiling(shape, boxes, ErrorCode::kCorrupt, context);
  if (pieces.size() == 1) return pieces.front().data;
  const size_t nbytes = static_cast<size_t>(total * element_size);
  if (nbytes == 0) return Tensor(dtype, shape, Buffer());
  auto storage = std::make_shared<PiecedStorage>(dtype, shape, std::move(pieces), nbytes);
  return Tensor(dtype, shape, Buffer::deferred(std::move(storage), nbytes));
}

std::vector<Piece> pieces_of(const Tensor& tensor) {
  if (const PiecedStorage* storage = pieced_storage(tensor)) return storage->pieces();
  return {Piece{.box = whole_box(tensor.shape()), .data = tensor}};
}

Tensor read_box(const Tensor& tensor, const Box& region) {
  check_box(region, tensor.shape());
  const size_t element_size = dtype_size(tensor.dtype());
  Buffer out = Buffer::allocate(static_cast<size_t>(checked_numel(region.sizes, element_size) * element_size));
  if (const PiecedStorage* storage = pieced_storage(tensor)) {
    storage->read_region(region, out.mutable_bytes());
  } else if (!out.empty()) {
    copy_piece_part(Piece{.box = whole_box(tensor.shape()), .data = tensor}, region, out.mutable_bytes(),
                    element_size);
  }
  return Tensor(tensor.dtype(), region.sizes, std::move(out));
}

}  // namespace ckpt
