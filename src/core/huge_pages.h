#pragma once
// Whether a large heap block is asked to be backed by transparent huge pages
// (madvise MADV_HUGEPAGE), decided per block (docs/design.md, "Huge pages").
//
// Huge pages make the first writes of a large block 512 times fewer page
// faults: a 1 GiB load into warm memory took 0.27-0.33 s advised against
// 0.40-0.48 s in 4 KiB pages (`ckpt_bench huge-pages`). Two things make
// them slow instead:
// - Free page reporting. A virtual machine whose balloon device reports free
//   memory to the host (virtio-balloon's VIRTIO_BALLOON_F_REPORTING, this
//   project's machines) hands the host exactly the free blocks of 2 MiB and
//   more; a huge page taken from them faults on the host again. The first
//   1 GiB advised fill of a process took 3.0 s there, 6.5 times the 4 KiB
//   fill, later ones 0.27-0.83 s (the blocks freed by the previous fill, or
//   not): the "2x slower on the first load after idle". 4 KiB pages
//   come from the split blocks that were never reported.
// - Compaction. Where THP defrag is "madvise" (most distributions' default),
//   a fault in an advised block that finds no free 2 MiB block compacts
//   memory on the spot.
// So by default (auto) a block is advised only where free pages are not
// reported and the buddy allocator has free blocks of 2 MiB or more for all
// of it: what the kernel does under "enabled=always" for blocks it was not
// asked about (huge pages when they are free, no stall for them).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ckpt::detail {

// CKPT_THP: "1"/"always" advises every large block (torch's
// THP_MEM_ALLOC_ENABLE=1 does that for its allocations), "0"/"never" none,
// unset/empty/"auto" decides by free memory as above. Another value is
// taken as "auto".
enum class HugePagePolicy { kAuto, kAlways, kNever };
HugePagePolicy huge_page_policy_from(const char* value);

// The bytes free in blocks of 2 MiB or larger (order >= 9 with 4 KiB pages)
// in /proc/buddyinfo's text ("Node 0, zone Normal c0 c1 ... c10" per line);
// nullopt when the text is not of that form.
std::optional<uint64_t> free_huge_bytes(std::string_view buddyinfo);

// Whether a virtio balloon device's feature bits (its sysfs `features`
// file: one '0'/'1' per bit, bit 0 first) include free page reporting
// (VIRTIO_BALLOON_F_REPORTING, bit 5).
bool balloon_reports_free_pages(std::string_view features);

// Whether a block of `size` bytes (already 2 MiB aligned, at least the
// large-block threshold) is to be advised, by `policy` and, for kAuto, by
// `free_pages_reported` and `free_huge` (free_huge_bytes of the moment;
// nullopt: unknown, advised).
bool advise_huge_pages(HugePagePolicy policy, size_t size, bool free_pages_reported,
                       std::optional<uint64_t> free_huge);

// The decision for a block now: CKPT_THP and the balloon devices under
// /sys/bus/virtio/drivers/virtio_balloon (read once per process), and for
// auto, /proc/buddyinfo read at this call.
bool advise_huge_pages_now(size_t size);

}  // namespace ckpt::detail
