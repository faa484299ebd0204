//===- Streams.cpp - the emulator's streams and events --------------------===//
//
// See Streams.h. One lock orders every stream and event: the emulator runs
// few streams, and a single condition variable wakes every waiter when any
// of them moves. The state is never destroyed, so a worker still blocked at
// exit (a peer that never came) touches nothing that static destructors
// have torn down.
//
//===----------------------------------------------------------------------===//

#include "Streams.h"

#include "Internal.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lamina::cuda_emulator {
namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  std::deque<std::function<bool()>> queue;
  bool worker = false, running = false, hung = false, destroyed = false;
  bool idle() const { return queue.empty() && !running; }
};

struct Event {
  uint64_t recorded = 0, completed = 0;
  /// The stream of the latest record: when it hangs, so does the event.
  std::shared_ptr<Stream> producer;
  Clock::time_point when = Clock::now();
  bool done() const { return completed >= recorded; }
};

struct State {
  std::mutex m;
  std::condition_variable cv;
  std::map<cudaStream_t, std::shared_ptr<Stream>> streams;
  std::map<cudaEvent_t, std::shared_ptr<Event>> events;
};
State &state() {
  static State *s = new State; // never destroyed (see above)
  return *s;
}

/// How long the host waits for queued work before calling the stream hung:
/// LAMINA_CUDA_EMULATOR_WAIT_S, 300 s by default. On a GPU the host would
/// not wait at all (the device would); this bound only turns a schedule
/// that can never complete into an error instead of a hang.
Clock::duration waitLimit() {
  static double seconds = [] {
    const char *v = std::getenv("LAMINA_CUDA_EMULATOR_WAIT_S");
    double s = v && *v ? std::atof(v) : 300;
    return s > 0 ? s : 300;
  }();
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(seconds));
}

std::shared_ptr<Stream> &streamOf(cudaStream_t s) {
  auto &slot = state().streams[s];
  if (!slot)
    slot = std::make_shared<Stream>();
  return slot;
}

/// Waits (lock held) until `done()` or `stream` hangs, at most waitLimit;
/// then marks `stream` hung and says so. False when it hung.
template <typename Pred>
bool hostWait(std::unique_lock<std::mutex> &lock, const Pred &done,
              const std::shared_ptr<Stream> &producer, const char *what) {
  State &st = state();
  bool ok = st.cv.wait_until(lock, Clock::now() + waitLimit(), [&] {
    return done() || (producer && producer->hung);
  });
  if (ok && done())
    return true;
  if (!ok) {
    std::fprintf(stderr,
                 "lamina cuda emulator: %s waited past "
                 "LAMINA_CUDA_EMULATOR_WAIT_S for queued work (a peer that "
                 "never issued its side?); the stream is now hung\n",
                 what);
    if (producer)
      producer->hung = true;
  }
  return false;
}

void work(std::shared_ptr<Stream> s) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  for (;;) {
    st.cv.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
    if (s->queue.empty())
      return;
    std::function<bool()> task = std::move(s->queue.front());
    s->queue.pop_front();
    s->running = true;
    lock.unlock();
    bool ok = task();
    lock.lock();
    s->running = false;
    if (!ok) {
      s->hung = true;
      s->queue.clear();
    }
    st.cv.notify_all();
  }
}

void push(const std::shared_ptr<Stream> &s, std::function<bool()> task) {
  if (s->hung)
    return;
  s->queue.push_back(std::move(task));
  if (!s->worker) {
    s->worker = true;
    std::thread(work, s).detach();
  }
  state().cv.notify_all();
}

/// Waits for `s` to drain (lock held); false when it hung.
bool drain(std::unique_lock<std::mutex> &lock, const std::shared_ptr<Stream> &s,
           const char *what) {
  if (s->hung)
    return false;
  return hostWait(
      lock, [&] { return s->idle() && !s->hung; }, s, what);
}

template <typename H> H newToken() { return reinterpret_cast<H>(new char); }

} // namespace

void enqueue(cudaStream_t stream, std::function<bool()> task) {
  std::lock_guard<std::mutex> lock(state().m);
  push(streamOf(stream), std::move(task));
}

bool hostWorkMayRun(cudaStream_t stream) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  auto it = st.streams.find(stream);
  if (it == st.streams.end())
    return true;
  std::shared_ptr<Stream> s = it->second;
  return drain(lock, s, "work issued to a stream");
}

} // namespace lamina::cuda_emulator

using namespace lamina::cuda_emulator;

extern "C" {
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  *s = newToken<cudaStream_t>();
  std::lock_guard<std::mutex> lock(state().m);
  streamOf(*s);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  return cudaStreamCreate(s);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned, int) {
  return cudaStreamCreate(s);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  // As sm_90 reports them; the emulator runs every stream alike.
  if (least)
    *least = 0;
  if (greatest)
    *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  auto it = st.streams.find(s);
  if (it == st.streams.end())
    return cudaErrorInvalidResourceHandle;
  // The worker finishes the queue, then ends (a hung one is left behind).
  it->second->destroyed = true;
  st.streams.erase(it);
  st.cv.notify_all();
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  auto it = st.streams.find(s);
  if (it == st.streams.end())
    return cudaSuccess;
  return it->second->idle() && !it->second->hung ? cudaSuccess
                                                 : cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  auto it = st.streams.find(s);
  if (it == st.streams.end())
    return cudaSuccess;
  std::shared_ptr<Stream> stream = it->second;
  if (drain(lock, stream, "cudaStreamSynchronize"))
    return cudaSuccess;
  // A GPU would wait forever here; the emulator says why it does not.
  std::fprintf(stderr, "lamina cuda emulator: cudaStreamSynchronize on a "
                       "hung stream (its communication failed)\n");
  return cudaErrorLaunchFailure;
}
cudaError_t cudaDeviceSynchronize(void) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  std::vector<std::shared_ptr<Stream>> all;
  for (auto &[h, s] : st.streams)
    all.push_back(s);
  for (auto &s : all)
    if (!drain(lock, s, "cudaDeviceSynchronize"))
      return cudaErrorLaunchFailure;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
  *e = newToken<cudaEvent_t>();
  std::lock_guard<std::mutex> lock(state().m);
  state().events[*e] = std::make_shared<Event>();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
  return cudaEventCreate(e);
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  // A record still queued keeps its event alive until the worker reaches it.
  std::lock_guard<std::mutex> lock(state().m);
  return state().events.erase(e) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  auto it = st.events.find(e);
  if (it == st.events.end())
    return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Event> ev = it->second;
  std::shared_ptr<Stream> &stream = streamOf(s);
  uint64_t generation = ++ev->recorded;
  ev->producer = stream;
  if (stream->hung)
    return cudaSuccess; // never completes
  if (stream->idle()) {
    ev->completed = generation;
    ev->when = Clock::now();
    return cudaSuccess;
  }
  push(stream, [ev, generation] {
    std::lock_guard<std::mutex> lock(state().m);
    if (ev->completed < generation) {
      ev->completed = generation;
      ev->when = Clock::now();
    }
    return true;
  });
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(state().m);
  auto it = state().events.find(e);
  if (it == state().events.end())
    return cudaErrorInvalidResourceHandle;
  return it->second->done() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  auto it = st.events.find(e);
  if (it == st.events.end())
    return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Event> ev = it->second;
  uint64_t target = ev->recorded;
  if (hostWait(
          lock, [&] { return ev->completed >= target; }, ev->producer,
          "cudaEventSynchronize"))
    return cudaSuccess;
  return cudaErrorLaunchFailure;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  std::lock_guard<std::mutex> lock(state().m);
  auto a = state().events.find(start), b = state().events.find(end);
  if (a == state().events.end() || b == state().events.end())
    return cudaErrorInvalidResourceHandle;
  if (!a->second->done() || !b->second->done())
    return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->second->when -
                                                 a->second->when)
            .count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  auto it = st.events.find(e);
  if (it == st.events.end())
    return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Event> ev = it->second;
  uint64_t target = ev->recorded;
  if (ev->completed >= target)
    return cudaSuccess;
  std::shared_ptr<Stream> stream = streamOf(s);
  std::shared_ptr<Stream> producer = ev->producer;
  if (stream->worker) {
    push(stream, [ev, target, producer] {
      std::unique_lock<std::mutex> lock(state().m);
      state().cv.wait(lock, [&] {
        return ev->completed >= target || (producer && producer->hung);
      });
      return ev->completed >= target;
    });
    return cudaSuccess;
  }
  // The stream's next work is issued by this thread: wait here.
  if (!hostWait(
          lock, [&] { return ev->completed >= target; }, producer,
          "cudaStreamWaitEvent"))
    stream->hung = true;
  return cudaSuccess;
}
} // extern "C"
