#pragma once
// A Communicator (ckpt/distributed.h) over an MPI communicator, for
// save_sharded / load_sharded in MPI programs. Built where CMake finds MPI
// (Debian's OpenMPI, scripts/install-deps): link the target ckpt_mpi.
//
//   MPI_Init(&argc, &argv);
//   {
//     ckpt::MpiCommunicator comm(MPI_COMM_WORLD);
//     ckpt::save_sharded("run/step-100", local_tree, shards, comm);
//   }
//   MPI_Finalize();

#include <mpi.h>

#include <string>
#include <string_view>
#include <vector>

#include "ckpt/distributed.h"

namespace ckpt {

class MpiCommunicator final : public Communicator {
 public:
  // Duplicates `comm` (MPI_Comm_dup, collective over its ranks), so that
  // ckpt's messages never meet the caller's, and has the duplicate return
  // errors instead of aborting: a failed MPI call throws Error{kIo} with
  // MPI's error string. (A rank that dies usually ends the whole job
  // anyway: mpirun kills the others.) MPI must be initialized and stay so
  // until this is destroyed. Throws Error{kIo} if the duplication fails.
  explicit MpiCommunicator(MPI_Comm comm);
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  // Frees the duplicate (unless MPI was finalized already).
  ~MpiCommunicator() override;

  size_t rank() const override { return rank_; }
  size_t size() const override { return size_; }
  // True when MPI was initialized at MPI_THREAD_MULTIPLE (MPI_Query_thread,
  // asked once here): only then do the manager's asynchronous sharded saves
  // run their collectives on its background thread (on the duplicate, so
  // they never meet the caller's messages); otherwise they block.
  bool callable_from_any_thread() const override { return thread_multiple_; }
  void barrier() override;
  // Messages up to 2 GiB - 1 bytes each, and in all (MPI counts are int);
  // more throws Error{kInvalidArgument}.
  std::vector<std::string> all_gather(std::string_view bytes) override;
  std::string broadcast(std::string_view bytes, size_t root) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  size_t rank_ = 0;
  size_t size_ = 0;
  bool thread_multiple_ = false;
};

}  // namespace ckpt
