// ThreadGroup (ckpt/distributed.h): ranks that are threads of one process.

#include <string>
#include <vector>

#include "ckpt/distributed.h"
#include "ckpt/error.h"

namespace ckpt {

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(ThreadGroup& group, size_t rank) : group_(group), rank_(rank) {}
  ~ThreadCommunicator() override { group_.leave(rank_); }

  size_t rank() const override { return rank_; }
  size_t size() const override { return group_.size(); }
  bool callable_from_any_thread() const override { return true; }
  void barrier() override { group_.all_gather(rank_, {}); }
  std::vector<std::string> all_gather(std::string_view bytes) override { return group_.all_gather(rank_, bytes); }
  std::string broadcast(std::string_view bytes, size_t root) override {
    if (root >= group_.size()) {
      throw Error(ErrorCode::kInvalidArgument, "broadcast from rank " + std::to_string(root) + " of a group of " +
                                                   std::to_string(group_.size()));
    }
    return group_.all_gather(rank_, rank_ == root ? bytes : std::string_view())[root];
  }

 private:
  ThreadGroup& group_;
  size_t rank_;
};

ThreadGroup::ThreadGroup(size_t size) : size_(size), handed_out_(size, false), slots_(size) {
  if (size == 0) throw Error(ErrorCode::kInvalidArgument, "a group of threads needs at least one rank");
}

std::unique_ptr<Communicator> ThreadGroup::communicator(size_t rank) {
  std::lock_guard lock(mutex_);
  if (rank >= size_) {
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(rank) + " of a group of " + std::to_string(size_));
  }
  if (handed_out_[rank]) {
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(rank) + "'s communicator was already handed out");
  }
  handed_out_[rank] = true;
  return std::make_unique<ThreadCommunicator>(*this, rank);
}

std::vector<std::string> ThreadGroup::all_gather(size_t rank, std::string_view bytes) {
  std::unique_lock lock(mutex_);
  auto left = [&] {
    return Error(ErrorCode::kIo, "rank " + std::to_string(*departed_) + " left the group of threads");
  };
  if (departed_) throw left();
  slots_[rank] = std::string(bytes);
  if (++arrived_ == size_) {
    result_ = std::move(slots_);
    slots_.assign(size_, std::string());
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return result_;
  }
  const uint64_t generation = generation_;
  changed_.wait(lock, [&] { return generation_ != generation || departed_.has_value(); });
  // Complete before anyone left: every rank arrived, the result is whole.
  if (generation_ != generation) return result_;
  throw left();
}

void ThreadGroup::leave(size_t rank) {
  std::lock_guard lock(mutex_);
  if (!departed_) departed_ = rank;
  changed_.notify_all();
}

}  // namespace ckpt
