//===- Streams.cpp - the emulator's streams and events --------------------===//
//
// See Streams.h. A stream is a queue of tasks: device work, or a wait for
// another stream to have run a number of tasks (what an event wait and the
// legacy stream's implicit synchronisation become). Whoever needs a stream
// to have reached a task runs its queue up to there on its own thread (a
// wait runs the other stream first), one thread per stream at a time;
// communication streams run on their worker. One lock and one condition
// variable guard every stream and event: the emulator runs few streams.
// The state is never destroyed, so a worker still blocked at exit (a peer
// that never came) touches nothing that static destructors tore down.
//
//===----------------------------------------------------------------------===//

#include "Streams.h"

#include "Internal.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lamina::cuda_emulator {
namespace {

using Clock = std::chrono::steady_clock;

struct Stream;

/// A stream capture (cudaStreamBeginCapture .. cudaStreamEndCapture), then
/// the graph made of it: its device work in issue order, run again at each
/// cudaGraphLaunch, and the stream-ordered allocations made while
/// capturing, which the graph owns (a graph's memory nodes keep their
/// addresses from launch to launch) until its last handle and launch are
/// gone. Only one stream's work is captured: the runtime captures a
/// single-stream step, and an event, a wait, a synchronisation or
/// communication in a capture invalidates it (a wait on an event recorded
/// outside it would be cudaErrorStreamCaptureIsolation on a GPU).
struct Capture {
  std::vector<std::function<bool()>> work;
  std::vector<void *> memory;
  std::string invalid; ///< why the capture failed; empty: it did not
  ~Capture() {
    for (void *p : memory) {
      forgetAllocation(p);
      std::free(p);
    }
  }
};

struct Task {
  std::function<bool()> work; ///< null: a wait
  std::shared_ptr<Stream> after;
  uint64_t afterCount = 0; ///< the wait ends once `after` ran this many
};

struct Stream {
  std::deque<Task> queue;
  uint64_t issued = 0, executed = 0;
  bool worker = false; ///< a worker thread runs the queue
  bool busy = false;   ///< a thread is running its front task
  bool hung = false, destroyed = false;
  bool legacy = false, blocking = true;
  int device = 0; ///< the current device when it was created
  std::shared_ptr<Capture> capture; ///< while capturing
  /// Its communication operations no compute stream has waited for yet
  /// (State::comms indices, in issue order; the overlap report only).
  std::deque<size_t> unwaited;
};

struct Event {
  std::shared_ptr<Stream> producer; ///< of the latest record; null: none
  uint64_t count = 0; ///< complete once the producer ran this many tasks
  Clock::time_point when = Clock::now();
  bool complete() const { return !producer || producer->executed >= count; }
};

/// One communication operation, for the overlap report.
struct CommRecord {
  const char *kind;
  uint64_t count;      ///< complete once its stream ran this many tasks
  uint64_t issued;     ///< device work issued before it (State::work)
  int64_t hidden = -1; ///< work issued before a compute stream waited
};

struct State {
  std::mutex m;
  /// Device work issued to streams without a worker, and the operations
  /// (only with LAMINA_CUDA_EMULATOR_OVERLAP).
  uint64_t work = 0;
  bool overlap = false;
  std::vector<CommRecord> comms;
  std::condition_variable cv;
  std::map<cudaStream_t, std::shared_ptr<Stream>> streams;
  /// Each device's legacy default stream.
  std::map<int, std::shared_ptr<Stream>> legacy;
  std::map<cudaEvent_t, std::shared_ptr<Event>> events;
  std::map<cudaGraph_t, std::shared_ptr<Capture>> graphs;
  std::map<cudaGraphExec_t, std::shared_ptr<Capture>> execs;
  std::mutex allocMutex;
  std::map<uintptr_t, size_t> allocations;
};
void reportOverlap();

State &state() {
  static State *s = [] {
    auto *st = new State; // never destroyed (see above)
    const char *v = std::getenv("LAMINA_CUDA_EMULATOR_OVERLAP");
    if (v && *v && std::string(v) != "0") {
      st->overlap = true;
      std::atexit(reportOverlap);
    }
    return st;
  }();
  return *s;
}

/// Per kind: operations, those a compute stream waited for, those with no
/// device work issued between them and that wait, and the median of it.
void reportOverlap() {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  std::map<std::string, std::vector<int64_t>> byKind;
  std::map<std::string, int> hostOnly;
  for (const CommRecord &r : st.comms) {
    if (r.hidden < 0)
      ++hostOnly[r.kind];
    else
      byKind[r.kind].push_back(r.hidden);
    byKind[r.kind];
  }
  for (auto &[kind, v] : byKind) {
    std::sort(v.begin(), v.end());
    size_t zero = size_t(std::count(v.begin(), v.end(), int64_t(0)));
    std::fprintf(stderr,
                 "lamina cuda emulator: overlap: %s: %zu issued, %zu waited "
                 "for by compute, %zu with no device work between issue and "
                 "wait, median %lld\n",
                 kind.c_str(), v.size() + size_t(hostOnly[kind]), v.size(),
                 zero, v.empty() ? 0LL : (long long)v[v.size() / 2]);
  }
}

/// How long a thread waits for another to run a stream before calling the
/// wait hung: LAMINA_CUDA_EMULATOR_WAIT_S, 300 s by default. It only turns
/// a schedule that can never complete into an error instead of a hang.
Clock::duration waitLimit() {
  static double seconds = [] {
    const char *v = std::getenv("LAMINA_CUDA_EMULATOR_WAIT_S");
    double s = v && *v ? std::atof(v) : 300;
    return s > 0 ? s : 300;
  }();
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(seconds));
}

bool isLegacy(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

/// A handle's stream; the legacy stream is the current device's.
std::shared_ptr<Stream> &streamOf(cudaStream_t h) {
  int device = currentDeviceId();
  auto &slot = isLegacy(h) ? state().legacy[device] : state().streams[h];
  if (!slot) {
    slot = std::make_shared<Stream>();
    slot->legacy = isLegacy(h);
    slot->device = device;
  }
  return slot;
}

void hang(const std::shared_ptr<Stream> &s) {
  s->hung = true;
  s->queue.clear();
  state().cv.notify_all();
}

enum class Progress { Done, NotYet, Hung };

Progress advance(std::unique_lock<std::mutex> &lock,
                 const std::shared_ptr<Stream> &s, uint64_t count, bool block);

/// Runs `s`'s front task on this thread (lock held; s is not busy).
Progress runFront(std::unique_lock<std::mutex> &lock,
                  const std::shared_ptr<Stream> &s, bool block) {
  s->busy = true;
  Task &front = s->queue.front();
  if (!front.work) {
    std::shared_ptr<Stream> after = front.after;
    Progress p = advance(lock, after, front.afterCount, block);
    s->busy = false;
    if (p == Progress::Hung)
      hang(s);
    if (p != Progress::Done)
      return p;
    s->queue.pop_front();
    ++s->executed;
    state().cv.notify_all();
    return Progress::Done;
  }
  std::function<bool()> work = std::move(front.work);
  s->queue.pop_front();
  lock.unlock();
  bool ok = work();
  lock.lock();
  s->busy = false;
  if (!ok) {
    hang(s);
    return Progress::Hung;
  }
  ++s->executed;
  state().cv.notify_all();
  return Progress::Done;
}

/// Until `s` has run `count` tasks: runs them here, or, when another
/// thread runs `s` (its worker, or a thread that got there first), waits
/// for it (block) or says NotYet.
Progress advance(std::unique_lock<std::mutex> &lock,
                 const std::shared_ptr<Stream> &s, uint64_t count, bool block) {
  Clock::time_point deadline = Clock::now() + waitLimit();
  while (s->executed < count) {
    if (s->hung)
      return Progress::Hung;
    if (s->busy || s->worker) {
      if (!block)
        return Progress::NotYet;
      if (state().cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        std::fprintf(stderr,
                     "lamina cuda emulator: a stream waited past "
                     "LAMINA_CUDA_EMULATOR_WAIT_S for another (a peer that "
                     "never issued its side?)\n");
        return Progress::Hung;
      }
      continue;
    }
    if (Progress p = runFront(lock, s, block); p != Progress::Done)
      return p;
  }
  return Progress::Done;
}

void work(std::shared_ptr<Stream> s) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  for (;;) {
    st.cv.wait(lock, [&] {
      return (!s->queue.empty() && !s->busy) ||
             (s->queue.empty() && s->destroyed);
    });
    if (s->queue.empty())
      return;
    (void)runFront(lock, s, /*block=*/true);
  }
}

/// Marks `s`'s capture failed (lock held); cudaStreamEndCapture reports it.
/// Returns the error the offending call gets.
cudaError_t invalidate(const std::shared_ptr<Stream> &s, const char *why,
                       cudaError_t err = cudaErrorStreamCaptureUnsupported) {
  if (s->capture && s->capture->invalid.empty()) {
    s->capture->invalid = why;
    std::fprintf(stderr,
                 "lamina cuda emulator: stream capture invalidated: %s\n",
                 why);
  }
  return err;
}

/// Appends `t` to `s` (lock held), after the legacy stream's implicit
/// synchronisation with the blocking streams; on a capturing stream, to the
/// capture instead.
void push(const std::shared_ptr<Stream> &s, Task t) {
  if (s->capture) {
    if (!t.work)
      (void)invalidate(s, "a wait for another stream");
    else
      s->capture->work.push_back(std::move(t.work));
    return;
  }
  if (s->hung)
    return; // never runs
  auto waitFor = [&](const std::shared_ptr<Stream> &other) {
    if (other != s && other->issued > other->executed && !other->hung) {
      s->queue.push_back(Task{nullptr, other, other->issued});
      ++s->issued;
    }
  };
  // (Per device: each device has its legacy stream.)
  if (s->legacy) {
    for (auto &[h, other] : state().streams)
      if (other->blocking && other->device == s->device)
        waitFor(other);
  } else if (s->blocking) {
    auto it = state().legacy.find(s->device);
    if (it != state().legacy.end())
      waitFor(it->second);
  }
  s->queue.push_back(std::move(t));
  ++s->issued;
  state().cv.notify_all();
}

template <typename H> H newToken() { return reinterpret_cast<H>(new char); }

/// The event of a handle (lock held); null for an unknown one.
std::shared_ptr<Event> eventOf(cudaEvent_t e) {
  auto it = state().events.find(e);
  return it == state().events.end() ? nullptr : it->second;
}

/// Until `ev` completes: runs its stream that far (block: waits for it).
bool reach(std::unique_lock<std::mutex> &lock, const Event &ev, bool block) {
  return ev.complete() ||
         advance(lock, ev.producer, ev.count, block) == Progress::Done;
}

cudaError_t synchronize(std::unique_lock<std::mutex> &lock,
                        const std::shared_ptr<Stream> &s, const char *what) {
  if (s->capture)
    return invalidate(s, "a synchronisation with the capturing stream");
  if (advance(lock, s, s->issued, true) == Progress::Done)
    return cudaSuccess;
  // A GPU would wait forever here; the emulator says why it does not.
  std::fprintf(stderr,
               "lamina cuda emulator: %s on a hung stream (its "
               "communication failed)\n",
               what);
  return cudaErrorLaunchFailure;
}

cudaError_t createStream(cudaStream_t *s, unsigned flags) {
  *s = newToken<cudaStream_t>();
  std::lock_guard<std::mutex> lock(state().m);
  streamOf(*s)->blocking = !(flags & cudaStreamNonBlocking);
  return cudaSuccess;
}

} // namespace

void submit(cudaStream_t stream, std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(state().m);
  std::shared_ptr<Stream> s = streamOf(stream);
  if (!s->worker)
    ++state().work;
  push(s, Task{[fn = std::move(fn)] {
         fn();
         return true;
       }});
}

void enqueue(cudaStream_t stream, std::function<bool()> task,
             const char *kind) {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  std::shared_ptr<Stream> s = streamOf(stream);
  if (s->capture) {
    (void)invalidate(s, "communication");
    return;
  }
  if (!s->worker) {
    s->worker = true;
    std::thread(work, s).detach();
  }
  push(s, Task{std::move(task)});
  if (st.overlap) {
    s->unwaited.push_back(st.comms.size());
    st.comms.push_back(CommRecord{kind, s->issued, st.work});
  }
}

void noteAllocation(const void *p, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().allocMutex);
  state().allocations[reinterpret_cast<uintptr_t>(p)] = bytes ? bytes : 1;
}

void forgetAllocation(const void *p) {
  std::lock_guard<std::mutex> lock(state().allocMutex);
  state().allocations.erase(reinterpret_cast<uintptr_t>(p));
}

bool isAllocated(const void *p) {
  std::lock_guard<std::mutex> lock(state().allocMutex);
  auto &a = state().allocations;
  uintptr_t x = reinterpret_cast<uintptr_t>(p);
  auto it = a.upper_bound(x);
  if (it == a.begin())
    return false;
  --it;
  return x < it->first + it->second;
}

bool drainAll() {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  // The current device's streams (cudaDeviceSynchronize, cudaFree).
  int device = currentDeviceId();
  std::vector<std::shared_ptr<Stream>> all;
  for (auto &[h, s] : st.streams)
    if (s->device == device)
      all.push_back(s);
  if (auto it = st.legacy.find(device); it != st.legacy.end())
    all.push_back(it->second);
  bool ok = true;
  for (auto &s : all) {
    if (s->capture)
      (void)invalidate(s, "a device-wide synchronisation (cudaFree, "
                          "cudaDeviceSynchronize)");
    ok &= advance(lock, s, s->issued, true) == Progress::Done;
  }
  return ok;
}

bool capturing(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(state().m);
  return streamOf(stream)->capture != nullptr;
}

cudaError_t invalidateCapture(cudaStream_t stream, const char *why) {
  std::lock_guard<std::mutex> lock(state().m);
  return invalidate(streamOf(stream), why);
}

bool captureAllocation(cudaStream_t stream, void *p) {
  std::lock_guard<std::mutex> lock(state().m);
  std::shared_ptr<Stream> s = streamOf(stream);
  if (!s->capture)
    return false;
  s->capture->memory.push_back(p);
  return true;
}

bool capturedFree(cudaStream_t stream, void *p) {
  std::lock_guard<std::mutex> lock(state().m);
  std::shared_ptr<Stream> s = streamOf(stream);
  if (!s->capture)
    return false;
  auto &m = s->capture->memory;
  if (std::find(m.begin(), m.end(), p) == m.end())
    (void)invalidate(s, "cudaFreeAsync of memory allocated outside the "
                        "capture");
  return true;
}

} // namespace lamina::cuda_emulator

using namespace lamina::cuda_emulator;

extern "C" {
cudaError_t cudaStreamCreate(cudaStream_t *s) { return createStream(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
  return createStream(s, flags);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int) {
  return createStream(s, flags);
}
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
  // As sm_90 reports them; the emulator runs every stream alike.
  if (least)
    *least = 0;
  if (greatest)
    *greatest = -5;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t h) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  auto it = st.streams.find(h);
  if (isLegacy(h) || it == st.streams.end())
    return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Stream> s = it->second;
  st.streams.erase(it);
  // Its work still completes: the worker's on the worker, the rest here.
  s->destroyed = true;
  if (!s->worker)
    (void)advance(lock, s, s->issued, true);
  st.cv.notify_all();
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t h) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  std::shared_ptr<Stream> s = streamOf(h);
  if (s->capture)
    return invalidate(s, "cudaStreamQuery on the capturing stream");
  return advance(lock, s, s->issued, false) == Progress::Done
             ? cudaSuccess
             : cudaErrorNotReady;
}
cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  State &st = state();
  std::unique_lock<std::mutex> lock(st.m);
  return synchronize(lock, streamOf(h), "cudaStreamSynchronize");
}
cudaError_t cudaDeviceSynchronize(void) {
  return drainAll() ? cudaSuccess : cudaErrorLaunchFailure;
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
  // A record still queued keeps its event alive until the stream runs it.
  std::lock_guard<std::mutex> lock(state().m);
  return state().events.erase(e) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h) {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  std::shared_ptr<Event> ev = eventOf(e);
  if (!ev)
    return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Stream> s = streamOf(h);
  if (s->capture)
    return invalidate(s, "an event recorded in a capture (not emulated)");
  ev->producer = s;
  if (s->hung) {
    ev->count = UINT64_MAX; // never completes
    return cudaSuccess;
  }
  push(s, Task{[ev, count = s->issued + 1] {
         std::lock_guard<std::mutex> lock(state().m);
         if (ev->count == count)
           ev->when = Clock::now();
         return true;
       }});
  ev->count = s->issued;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::unique_lock<std::mutex> lock(state().m);
  std::shared_ptr<Event> ev = eventOf(e);
  if (!ev)
    return cudaErrorInvalidResourceHandle;
  return reach(lock, *ev, false) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  std::unique_lock<std::mutex> lock(state().m);
  std::shared_ptr<Event> ev = eventOf(e);
  if (!ev)
    return cudaErrorInvalidResourceHandle;
  return reach(lock, *ev, true) ? cudaSuccess : cudaErrorLaunchFailure;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  std::lock_guard<std::mutex> lock(state().m);
  std::shared_ptr<Event> a = eventOf(start), b = eventOf(end);
  if (!a || !b)
    return cudaErrorInvalidResourceHandle;
  if (!a->complete() || !b->complete())
    return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned) {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  std::shared_ptr<Event> ev = eventOf(e);
  if (!ev)
    return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Stream> s = streamOf(h);
  // As on a GPU, complete or not: only in-stream order may cross into a
  // capture.
  if (s->capture)
    return invalidate(s, "a wait for an event recorded outside the capture",
                      cudaErrorStreamCaptureIsolation);
  if (ev->complete())
    return cudaSuccess;
  // The wait captures the event's latest record.
  push(s, Task{nullptr, ev->producer, ev->count});
  if (st.overlap && !s->worker)
    for (auto &open = ev->producer->unwaited;
         !open.empty() && st.comms[open.front()].count <= ev->count;
         open.pop_front()) {
      CommRecord &r = st.comms[open.front()];
      r.hidden = int64_t(st.work - r.issued);
    }
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode) {
  std::lock_guard<std::mutex> lock(state().m);
  if (isLegacy(h))
    return cudaErrorStreamCaptureUnsupported;
  std::shared_ptr<Stream> s = streamOf(h);
  if (s->capture)
    return cudaErrorIllegalState;
  s->capture = std::make_shared<Capture>();
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *graph) {
  std::lock_guard<std::mutex> lock(state().m);
  std::shared_ptr<Stream> s = streamOf(h);
  if (!s->capture)
    return cudaErrorIllegalState;
  std::shared_ptr<Capture> c = std::move(s->capture); // leaves it null
  *graph = nullptr;
  if (!c->invalid.empty())
    return cudaErrorStreamCaptureInvalidated;
  *graph = newToken<cudaGraph_t>();
  state().graphs[*graph] = std::move(c);
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t h,
                                  cudaStreamCaptureStatus *status) {
  std::lock_guard<std::mutex> lock(state().m);
  std::shared_ptr<Stream> s = streamOf(h);
  *status = !s->capture                   ? cudaStreamCaptureStatusNone
            : s->capture->invalid.empty() ? cudaStreamCaptureStatusActive
                                          : cudaStreamCaptureStatusInvalidated;
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes,
                              size_t *count) {
  std::lock_guard<std::mutex> lock(state().m);
  auto it = state().graphs.find(g);
  if (it == state().graphs.end() || nodes)
    return cudaErrorInvalidValue; // the count only
  *count = it->second->work.size();
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                 unsigned long long) {
  std::lock_guard<std::mutex> lock(state().m);
  auto it = state().graphs.find(g);
  if (it == state().graphs.end())
    return cudaErrorInvalidValue;
  *exec = newToken<cudaGraphExec_t>();
  state().execs[*exec] = it->second;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t h) {
  State &st = state();
  std::lock_guard<std::mutex> lock(st.m);
  auto it = st.execs.find(exec);
  if (it == st.execs.end())
    return cudaErrorInvalidResourceHandle;
  std::shared_ptr<Stream> s = streamOf(h);
  if (s->capture)
    return invalidate(s, "a graph launched into a capture (not emulated)");
  // Each launch runs the recorded work again; the tasks keep the graph
  // (and its memory) alive until they have run.
  std::shared_ptr<Capture> c = it->second;
  for (size_t i = 0; i < c->work.size(); ++i) {
    ++st.work;
    push(s, Task{[c, i] { return c->work[i](); }});
  }
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::mutex> lock(state().m);
  return state().execs.erase(exec) ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  std::lock_guard<std::mutex> lock(state().m);
  return state().graphs.erase(g) ? cudaSuccess : cudaErrorInvalidValue;
}
} // extern "C"
