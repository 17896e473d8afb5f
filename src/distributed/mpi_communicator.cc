// MpiCommunicator (ckpt/mpi.h): the collectives over MPI.

#include <climits>
#include <cstdint>

#include "ckpt/error.h"
#include "ckpt/mpi.h"

namespace ckpt {
namespace {

// Throws Error{kIo} naming `call` and MPI's text for `code` unless it is MPI_SUCCESS.
void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw Error(ErrorCode::kIo, std::string(call) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

int count_of(uint64_t bytes) {
  if (bytes > static_cast<uint64_t>(INT_MAX)) {
    throw Error(ErrorCode::kInvalidArgument,
                "a message of " + std::to_string(bytes) + " bytes is more than one MPI collective carries");
  }
  return static_cast<int>(bytes);
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) {
  check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  int rank = 0;
  int size = 0;
  check(MPI_Comm_rank(comm_, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_, &size), "MPI_Comm_size");
  rank_ = static_cast<size_t>(rank);
  size_ = static_cast<size_t>(size);
  int provided = MPI_THREAD_SINGLE;
  check(MPI_Query_thread(&provided), "MPI_Query_thread");
  thread_multiple_ = provided == MPI_THREAD_MULTIPLE;
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::barrier() { check(MPI_Barrier(comm_), "MPI_Barrier"); }

std::vector<std::string> MpiCommunicator::all_gather(std::string_view bytes) {
  const int mine = count_of(bytes.size());
  std::vector<int> counts(size_);
  check(MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm_), "MPI_Allgather");
  std::vector<int> displacements(size_);
  uint64_t total = 0;
  for (size_t r = 0; r < size_; ++r) {
    displacements[r] = count_of(total);
    total += static_cast<uint64_t>(counts[r]);
  }
  count_of(total);
  std::string all(total, '\0');
  check(MPI_Allgatherv(bytes.data(), mine, MPI_BYTE, all.data(), counts.data(), displacements.data(), MPI_BYTE, comm_),
        "MPI_Allgatherv");
  std::vector<std::string> result;
  result.reserve(size_);
  for (size_t r = 0; r < size_; ++r) result.push_back(all.substr(displacements[r], counts[r]));
  return result;
}

std::string MpiCommunicator::broadcast(std::string_view bytes, size_t root) {
  if (root >= size_) {
    throw Error(ErrorCode::kInvalidArgument,
                "broadcast from rank " + std::to_string(root) + " of " + std::to_string(size_));
  }
  const int root_rank = static_cast<int>(root);
  int count = rank_ == root ? count_of(bytes.size()) : 0;
  check(MPI_Bcast(&count, 1, MPI_INT, root_rank, comm_), "MPI_Bcast");
  std::string result = rank_ == root ? std::string(bytes) : std::string(static_cast<size_t>(count), '\0');
  check(MPI_Bcast(result.data(), count, MPI_BYTE, root_rank, comm_), "MPI_Bcast");
  return result;
}

}  // namespace ckpt
