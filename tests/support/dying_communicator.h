#pragma once
// A rank that dies, for the tests of sharded saves: its communicator goes
// away at its `at`-th collective (the inner one destroyed, so that a
// ThreadGroup's other ranks hear of it; this rank's call throws).

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/distributed.h"

namespace ckpt::testing {

class DyingCommunicator final : public Communicator {
 public:
  DyingCommunicator(std::unique_ptr<Communicator> inner, int at) : inner_(std::move(inner)), at_(at) {}
  size_t rank() const override { return rank_; }
  size_t size() const override { return size_; }
  bool callable_from_any_thread() const override { return true; }
  void barrier() override { step()->barrier(); }
  std::vector<std::string> all_gather(std::string_view bytes) override { return step()->all_gather(bytes); }
  std::string broadcast(std::string_view bytes, size_t root) override { return step()->broadcast(bytes, root); }

 private:
  Communicator* step() {
    if (++calls_ == at_) {
      inner_.reset();
      throw std::runtime_error("died");
    }
    return inner_.get();
  }
  std::unique_ptr<Communicator> inner_;
  size_t rank_ = inner_->rank();
  size_t size_ = inner_->size();
  int at_;
  int calls_ = 0;
};

}  // namespace ckpt::testing
