#include "base/background.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "base/parallel.h"

namespace ag {
namespace {

std::atomic<int> g_active_runs{0};
std::atomic<uint64_t> g_run_starts{0};
constexpr auto kIdle = std::chrono::milliseconds(1);  // no run for this long: the background thread may work

struct Worker {
  std::mutex mu;
  std::condition_variable cv, idle;
  std::deque<std::function<void()>> jobs;
  bool running = false, stop = false, started = false;
  std::atomic<bool> stopping{false};  // (read by a job waiting for idle time, outside the lock)
  std::thread thread;

  void loop() {
    set_num_threads(1);  // (oneDNN's reorders run on OpenMP: one thread here)
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stop || !jobs.empty(); });
      if (stop) break;
      std::function<void()> job = std::move(jobs.front());
      jobs.pop_front();
      running = true;
      lk.unlock();
      try {
        job();
      } catch (const std::exception& e) {  // (a kernel that cannot pack keeps its first primitive)
        std::fprintf(stderr, "airgraph: background work failed: %s\n", e.what());
      }
      job = nullptr;  // (what it held is released outside the lock)
      lk.lock();
      running = false;
      if (jobs.empty()) idle.notify_all();
    }
    running = false;
    idle.notify_all();
  }
};

// Never destroyed (a job may hold what must not be released after the interpreter is gone):
// at exit the thread is stopped and joined, the queued jobs leak.
Worker* g_worker = new Worker;

}  // namespace

void stop_background() {
  Worker* w = g_worker;
  {
    std::lock_guard<std::mutex> lk(w->mu);
    if (!w->started) return;
    w->stop = true;
    w->stopping = true;
    for (auto& j : w->jobs) new std::function<void()>(std::move(j));  // (leaked, never run)
    w->jobs.clear();
  }
  w->cv.notify_all();
  if (w->thread.joinable() && w->thread.get_id() != std::this_thread::get_id()) w->thread.join();
}

namespace {

void after_fork_in_child() {
  g_worker = new Worker;  // (the parent's thread does not exist here; its state is leaked)
}

}  // namespace

void run_in_background(std::function<void()> job) {
  Worker* w = g_worker;
  std::lock_guard<std::mutex> lk(w->mu);
  if (w->stop) return;
  if (!w->started) {
    w->started = true;
    static const bool registered = [] {
      std::atexit(stop_background);
      pthread_atfork(nullptr, nullptr, after_fork_in_child);
      return true;
    }();
    (void)registered;
    w->thread = std::thread([w] { w->loop(); });
  }
  w->jobs.push_back(std::move(job));
  w->cv.notify_one();
}

void wait_background_idle() {
  Worker* w = g_worker;
  std::unique_lock<std::mutex> lk(w->mu);
  w->idle.wait(lk, [&] { return w->stop || (w->jobs.empty() && !w->running); });
}


RunActivity::RunActivity() {
  g_active_runs.fetch_add(1, std::memory_order_acq_rel);
  g_run_starts.fetch_add(1, std::memory_order_relaxed);
}
RunActivity::~RunActivity() { g_active_runs.fetch_sub(1, std::memory_order_acq_rel); }

namespace {

// On the background thread: waits until no run has been in progress for kIdle; false when the
// worker is stopping.
bool wait_for_idle_time() {
  for (;;) {
    if (g_worker->stopping.load(std::memory_order_relaxed)) return false;
    const uint64_t starts = g_run_starts.load(std::memory_order_acquire);
    const bool idle = g_active_runs.load(std::memory_order_acquire) == 0;
    std::this_thread::sleep_for(kIdle);
    if (idle && g_active_runs.load(std::memory_order_acquire) == 0 &&
        g_run_starts.load(std::memory_order_acquire) == starts)
      return true;
  }
}

}  // namespace

std::unique_ptr<DeferredWork> DeferredWork::of(const std::vector<std::shared_ptr<const Kernel>>& kernels) {
  std::vector<const Kernel*> todo;
  for (const auto& k : kernels)
    if (k->background_work() == 1) todo.push_back(k.get());
  if (todo.empty()) return nullptr;
  return std::unique_ptr<DeferredWork>(new DeferredWork(std::move(todo)));
}

bool DeferredWork::do_one() {
  const size_t i = next_.fetch_add(1, std::memory_order_acq_rel);
  if (i >= todo_.size()) return false;
  try {
    todo_[i]->finish_background_work();
  } catch (const std::exception& e) {  // (a kernel that cannot pack keeps its first primitive)
    std::fprintf(stderr, "airgraph: deferred work failed: %s\n", e.what());
  }
  return true;
}

size_t DeferredWork::left() const {
  size_t n = 0;
  for (const Kernel* k : todo_) n += k->background_work() == 1;
  return n;
}

bool DeferredWork::pending() const { return next_.load(std::memory_order_relaxed) < todo_.size(); }

void DeferredWork::after_run(const std::shared_ptr<const void>& owner, double run_seconds) {
  if (!queued_.load(std::memory_order_relaxed) && !queued_.exchange(true)) {
    run_in_background([this, owner] {
      while (wait_for_idle_time() && do_one()) {
      }
    });
    claimed_seen_.store(next_.load());
    return;
  }
  // No kernel claimed since the previous run ended: this caller leaves no idle time; its share now.
  const size_t claimed = next_.load(std::memory_order_acquire);
  if (claimed_seen_.exchange(claimed) != claimed) return;
  using clk = std::chrono::steady_clock;
  const auto t0 = clk::now();
  const auto budget = std::chrono::duration<double>(run_seconds / 8);
  while (do_one() && clk::now() - t0 < budget) {
  }
  claimed_seen_.store(next_.load());
}


}  // namespace ag
