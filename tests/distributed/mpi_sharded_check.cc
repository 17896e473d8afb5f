// The MPI test program of issue 20's sharded saves, run under mpirun by
// tests/distributed/mpi_sharded_test.sh (ctest mpi_sharded):
//
//   ckpt_mpi_sharded_check save DIR STEP      save the global state (step STEP) split over the ranks
//   ckpt_mpi_sharded_check load DIR STEP      load this rank's boxes, compare bit for bit
//   ckpt_mpi_sharded_check die DIR STEP RANK  save, rank RANK SIGKILLs itself after writing its shard
//   ckpt_mpi_sharded_check collectives - 0     MpiCommunicator's collectives alone
//   ckpt_mpi_sharded_check manager RUN FIRST  a Manager (keep_last 2) over the ranks saves steps
//                                             FIRST..FIRST+2, asking for async saves (MPI_Init: the
//                                             engine's one thread, so each blocks), then lists and loads
//   ckpt_mpi_sharded_check manager-threads RUN FIRST  the same under MPI_THREAD_MULTIPLE: the saves
//                                             run on the manager's thread, wait() commits them
//
// The global state is the same on every run (seeded), so any number of ranks
// can check what any other number saved. Exit 0 on success; 1 with a line
// on stderr otherwise.

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "ckpt/box.h"
#include "ckpt/checkpoint.h"
#include "ckpt/distributed.h"
#include "ckpt/manager.h"
#include "ckpt/mpi.h"
#include "support/random_tensor.h"

namespace {

using namespace ckpt;

const Tensor& global_w() {
  static const Tensor w = testing::random_tensor(DType::kFloat32, {10, 3}, 1);
  return w;
}
const Tensor& global_grid() {
  static const Tensor grid = testing::random_tensor(DType::kBFloat16, {4, 6}, 2);
  return grid;
}
const Tensor& global_bias() {
  static const Tensor bias = testing::random_tensor(DType::kInt64, {3}, 3);
  return bias;
}

// Rank `rank`'s share of [0, n) split over `size` ranks (numpy's array_split).
std::pair<int64_t, int64_t> share(int64_t n, size_t rank, size_t size) {
  int64_t begin = 0;
  for (size_t r = 0; r < rank; ++r) begin += n / int64_t(size) + (int64_t(r) < n % int64_t(size) ? 1 : 0);
  return {begin, n / int64_t(size) + (int64_t(rank) < n % int64_t(size) ? 1 : 0)};
}

// w split by rows, grid by columns.
Box rows_of(size_t rank, size_t size) {
  const auto [begin, count] = share(10, rank, size);
  return {.offsets = {begin, 0}, .sizes = {count, 3}};
}
Box columns_of(size_t rank, size_t size) {
  const auto [begin, count] = share(6, rank, size);
  return {.offsets = {0, begin}, .sizes = {4, count}};
}

// Dies (SIGKILL, no clean-up) at its `at`-th collective: a rank lost mid-save.
class DyingCommunicator final : public Communicator {
 public:
  DyingCommunicator(Communicator& inner, int at) : inner_(inner), at_(at) {}
  size_t rank() const override { return inner_.rank(); }
  size_t size() const override { return inner_.size(); }
  void barrier() override { step().barrier(); }
  std::vector<std::string> all_gather(std::string_view bytes) override { return step().all_gather(bytes); }
  std::string broadcast(std::string_view bytes, size_t root) override { return step().broadcast(bytes, root); }

 private:
  Communicator& step() {
    if (++calls_ == at_) raise(SIGKILL);
    return inner_;
  }
  Communicator& inner_;
  int at_;
  int calls_ = 0;
};

// This rank's tree of step `step` and its shards.
std::pair<Tree, std::map<std::string, ShardSpec>> local_state(int64_t step, const Communicator& comm) {
  const Box rows = rows_of(comm.rank(), comm.size());
  const Box columns = columns_of(comm.rank(), comm.size());
  Tree model = Tree::map();
  model.set("w", read_box(global_w(), rows));
  model.set("grid", read_box(global_grid(), columns));
  model.set("bias", global_bias());
  Tree tree = Tree::map();
  tree.set("model", std::move(model));
  tree.set("step", Tree(step));
  return {std::move(tree),
          {{"model.w", {.global_shape = {10, 3}, .offsets = rows.offsets}},
           {"model.grid", {.global_shape = {4, 6}, .offsets = columns.offsets}}}};
}

void save_state(const std::string& dir, int64_t step, Communicator& comm) {
  const auto [tree, shards] = local_state(step, comm);
  save_sharded(dir, tree, shards, comm);
}

int fail(Communicator& comm, const std::string& what) {
  std::cerr << "rank " << comm.rank() << " of " << comm.size() << ": " << what << "\n";
  return 1;
}

int check_load(const std::string& dir, int64_t step, Communicator& comm) {
  // Boxes other than the saving ranks' (w by rows, grid by rows too).
  const Box rows = rows_of(comm.rank(), comm.size());
  const auto [begin, count] = share(4, comm.rank(), comm.size());
  const Box grid_rows{.offsets = {begin, 0}, .sizes = {count, 6}};
  const Tree mine = load_sharded(dir, {{"model.w", rows}, {"model.grid", grid_rows}}, comm);
  if (!mine.at("model.w").tensor().equals(read_box(global_w(), rows))) return fail(comm, "w differs");
  if (!mine.at("model.grid").tensor().equals(read_box(global_grid(), grid_rows))) return fail(comm, "grid differs");
  if (!mine.at("model.bias").tensor().equals(global_bias())) return fail(comm, "bias differs");
  if (mine.at("step").integer() != step) {
    return fail(comm, "step " + std::to_string(mine.at("step").integer()) + ", expected " + std::to_string(step));
  }
  return 0;
}

// Messages of every length from 0 (rank 0's) up, broadcasts from every root.
int check_collectives(Communicator& comm) {
  const std::vector<std::string> all = comm.all_gather(std::string(comm.rank() * 1000, char('a' + comm.rank())));
  if (all.size() != comm.size()) return fail(comm, "all_gather gave " + std::to_string(all.size()) + " messages");
  for (size_t r = 0; r < comm.size(); ++r) {
    if (all[r] != std::string(r * 1000, char('a' + r))) return fail(comm, "rank " + std::to_string(r) + "'s message");
  }
  for (size_t root = 0; root < comm.size(); ++root) {
    const std::string got = comm.broadcast(comm.rank() == root ? "from " + std::to_string(root) : "ignored", root);
    if (got != "from " + std::to_string(root)) return fail(comm, "broadcast from " + std::to_string(root) + ": " + got);
  }
  comm.barrier();
  try {
    comm.broadcast("", comm.size());
    return fail(comm, "a broadcast from a rank past the end");
  } catch (const Error&) {
  }
  return 0;
}

// The manager over the ranks: three steps from `first` with keep_last 2,
// each asked to be asynchronous; `threads`: MPI runs at MPI_THREAD_MULTIPLE,
// so they are (else each blocks, and is listed when it returns).
int check_manager(const std::string& run, int64_t first, bool threads, Communicator& comm) {
  if (comm.callable_from_any_thread() != threads) return fail(comm, "callable_from_any_thread() is not as MPI_Init gave");
  Manager manager(run, {.keep_last = 2, .fsync = false, .comm = &comm});
  for (int64_t step = first; step < first + 3; ++step) {
    const auto [tree, shards] = local_state(step, comm);
    manager.save_sharded(step, tree, shards, {.metrics = {{"loss", 1.0 / double(step + 1)}}, .blocking = false});
    if (!threads) {
      const std::optional<CheckpointEntry> latest = manager.latest();
      if (!latest || latest->step != step) return fail(comm, "a save that had to block was not committed on return");
    }
  }
  manager.wait();
  const std::vector<CheckpointEntry> entries = manager.list();
  if (entries.size() != 2 || entries[0].step != first + 1 || entries[1].step != first + 2) {
    return fail(comm, "listed " + std::to_string(entries.size()) + " checkpoints, expected steps " +
                          std::to_string(first + 1) + " and " + std::to_string(first + 2));
  }
  // This rank's rows of w, from the newest checkpoint.
  const Box rows = rows_of(comm.rank(), comm.size());
  LoadOptions boxes;
  boxes.boxes = {{"model.w", rows}};
  const Tree mine = manager.load(first + 2, boxes);
  if (!mine.at("model.w").tensor().equals(read_box(global_w(), rows))) return fail(comm, "the manager's w differs");
  if (mine.at("step").integer() != first + 2) return fail(comm, "the manager's step differs");
  manager.close();
  return 0;
}

int run(int argc, char** argv) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  if (argc < 4) return fail(comm, "usage: save|load|die DIR STEP [RANK]");
  const std::string mode = argv[1];
  const std::string dir = argv[2];
  const int64_t step = std::atoll(argv[3]);
  try {
    if (mode == "save") {
      save_state(dir, step, comm);
      return 0;
    }
    if (mode == "load") return check_load(dir, step, comm);
    if (mode == "collectives") return check_collectives(comm);
    if (mode == "manager" || mode == "manager-threads") return check_manager(dir, step, mode == "manager-threads", comm);
    if (mode == "die" && argc >= 5) {
      const size_t dying = std::strtoul(argv[4], nullptr, 10);
      if (comm.rank() != dying) {
        save_state(dir, step, comm);
        return fail(comm, "the save went through without the dying rank");
      }
      DyingCommunicator dies(comm, 2);  // after its shard is written, before it is gathered
      save_state(dir, step, dies);
      return fail(comm, "did not die");
    }
    return fail(comm, "unknown mode " + mode);
  } catch (const Error& error) {
    return fail(comm, error.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "manager-threads") {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    if (provided != MPI_THREAD_MULTIPLE) {  // an MPI built without it: the mode has nothing to check
      std::cerr << "MPI provides no MPI_THREAD_MULTIPLE\n";
      MPI_Finalize();
      return 77;
    }
  } else {
    MPI_Init(&argc, &argv);
  }
  const int code = run(argc, argv);
  MPI_Finalize();
  return code;
}
