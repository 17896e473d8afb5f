#pragma once
// parallel_for: the one small thread pool ckpt uses, for positioned reads
// and writes (io/) and for element-wise work such as casts (core/). Knows no
// file and no format.

#include <cstddef>
#include <functional>

namespace ckpt::detail {

// min(hardware threads, 4): enough to keep a disk or the page cache busy.
unsigned default_threads();

// Runs body(item, worker) for every item in [0, count), handing items out in
// order to min(threads, count) threads (threads 0: default_threads());
// `worker` numbers the thread, from 0, so that a body can keep per-thread
// scratch memory. The calling thread is worker 0. After the first exception
// no further item starts; that exception is rethrown.
void parallel_for(size_t count, unsigned threads, const std::function<void(size_t item, unsigned worker)>& body);

}  // namespace ckpt::detail
