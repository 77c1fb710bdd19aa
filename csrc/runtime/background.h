// Work left for after a program's first run: one process-wide background thread.
//
// A kernel whose constant weights want packing into oneDNN's blocked layout can leave that for
// later (Kernel::background_work): its first runs use a primitive made for the weights as
// they are stored, and once the program's first run has returned, this thread packs them (one
// OpenMP thread, so that it takes one core from the callers at most) and the kernel switches to
// the packed copy. The first call pays neither the packing (BERT base: 140-160 ms of its 340 MB
// of GEMM weights here) nor the page faults of the fresh copy.
#pragma once

#include <functional>

namespace ag {

// Queues `job` (jobs run in order). At exit the running job finishes and the others are dropped;
// in a process forked while a job ran, jobs never run (the kernels keep their first primitive).
void run_in_background(std::function<void()> job);
// Waits until no job is queued or running (tests, benchmarks).
void wait_background_idle();
// Lets the running job finish and drops the queued ones; later jobs are dropped too. Python's
// exit calls it (airgraph/_core.py) while the interpreter still runs, since a job may release
// tensors that need it; the C library's exit calls it again (a no-op then).
void stop_background();

// Whether kernels made on this thread may leave work for later (the front's choice, per compile).
bool background_allowed();
class BackgroundScope {
 public:
  explicit BackgroundScope(bool allow);
  ~BackgroundScope();
  BackgroundScope(const BackgroundScope&) = delete;
  BackgroundScope& operator=(const BackgroundScope&) = delete;

 private:
  bool prev_;
};

}  // namespace ag
