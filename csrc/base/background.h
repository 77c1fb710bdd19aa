// Work left for after a program's first run: one process-wide background thread.
//
// A kernel whose constant weights want packing into oneDNN's blocked layout can leave that for
// later (Kernel::background_work): its first runs use a primitive made for the weights as
// they are stored, and once the program's first run has returned, the rest is done a kernel at
// a time (DeferredWork) and each kernel switches to its packed copy. The first call pays neither
// the packing (BERT base: 140-160 ms of its 340 MB of GEMM weights on an Ice Lake core) nor the
// page faults of the fresh copy.
//
// Where the packing runs matters as much: a run on all cores while this thread packs on one of
// them waits for that core at every parallel region (BERT base's second call took 205 ms instead
// of 70 when its packing ran beside it). So the background thread packs only while no engine run
// is in progress and none has started for a millisecond (idle time between calls), and a caller
// whose calls come back to back, leaving it no such time, does a share of the work itself at the
// end of its run (a kernel or more, about an eighth of that run's time), on all its threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "base/kernel.h"

namespace ag {

// Marks an engine run in progress (Executor::run_into), for the background thread's idle test.
class RunActivity {
 public:
  RunActivity();
  ~RunActivity();
  RunActivity(const RunActivity&) = delete;
  RunActivity& operator=(const RunActivity&) = delete;
};

// The kernels of one program that left work for later, and how far that work is.
class DeferredWork {
 public:
  // nullptr when none of `kernels` left work (Kernel::background_work() == 1)
  static std::unique_ptr<DeferredWork> of(const std::vector<std::shared_ptr<const Kernel>>& kernels);
  // At the end of every run of the program. The first queues the background job (`owner` keeps the
  // program and its kernels alive while it waits); a later one whose caller left the background
  // thread no idle time since the previous run ended does a share of the work here.
  void after_run(const std::shared_ptr<const void>& owner, double run_seconds);
  size_t size() const { return todo_.size(); }  // kernels that left work
  bool pending() const;  // a kernel not claimed yet
  size_t left() const;   // kernels whose work is not done

 private:
  explicit DeferredWork(std::vector<const Kernel*> todo) : todo_(std::move(todo)) {}
  bool do_one();  // claims the next kernel and finishes its work; false when none is left

  std::vector<const Kernel*> todo_;
  std::atomic<size_t> next_{0}, claimed_seen_{0};  // (claimed: by the background thread or a caller)
  std::atomic<bool> queued_{false};
};

// Queues `job` (jobs run in order). At exit the running job finishes and the others are dropped;
// in a process forked while a job ran, jobs never run (the kernels keep their first primitive).
void run_in_background(std::function<void()> job);
// Waits until no job is queued or running (tests, benchmarks).
void wait_background_idle();
// Lets the running job finish and drops the queued ones; later jobs are dropped too. Python's
// exit calls it (airgraph/_core.py) while the interpreter still runs, since a job may release
// tensors that need it; the C library's exit calls it again (a no-op then).
void stop_background();

}  // namespace ag
