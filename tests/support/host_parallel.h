// Thread helpers of the CPU reference (internal to tests/support). Results never depend on the
// thread count: every output element is computed by one thread, in a fixed order.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace rt_moe::test::host {

inline std::int64_t worker_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<std::int64_t>(n);
}

// Runs make_worker() once per thread, then that worker on items [0, n) handed out in increasing
// order; a worker is a callable taking the item index and may own scratch buffers. The first
// exception stops the hand-out and is rethrown here.
template <class MakeWorker>
void parallel_items(std::int64_t n, MakeWorker make_worker) {
  const std::int64_t threads = std::min(n, worker_count());
  if (threads <= 1) {
    auto worker = make_worker();
    for (std::int64_t i = 0; i < n; ++i) worker(i);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto run = [&] {
    try {
      auto worker = make_worker();
      for (std::int64_t i = next++; i < n; i = next++) worker(i);
    } catch (...) {
      next = n;
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (std::int64_t t = 1; t < threads; ++t) pool.emplace_back(run);
  run();
  for (auto& thread : pool) thread.join();
  if (error) std::rethrow_exception(error);
}

// Runs body(begin, end) on one contiguous range of [0, n) per thread; range starts are multiples
// of `align`.
template <class Body>
void parallel_ranges(std::int64_t n, std::int64_t align, Body body) {
  const std::int64_t units = (n + align - 1) / align;
  const std::int64_t threads = std::max<std::int64_t>(1, std::min(units, worker_count()));
  const std::int64_t per_thread = (units + threads - 1) / threads * align;
  parallel_items(threads, [&] {
    return [&](std::int64_t t) {
      const std::int64_t begin = std::min(n, t * per_thread);
      body(begin, std::min(n, begin + per_thread));
    };
  });
}

}  // namespace rt_moe::test::host
