#include "runtime/background.h"

#include <pthread.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/parallel.h"

namespace ag {
namespace {

thread_local bool t_allowed = false;

struct Worker {
  std::mutex mu;
  std::condition_variable cv, idle;
  std::deque<std::function<void()>> jobs;
  bool running = false, stop = false, started = false;
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

bool background_allowed() { return t_allowed; }

BackgroundScope::BackgroundScope(bool allow) : prev_(t_allowed) { t_allowed = allow; }
BackgroundScope::~BackgroundScope() { t_allowed = prev_; }

}  // namespace ag
