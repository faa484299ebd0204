//===- Streams.cpp - communication ordered against compute ---------------===//
//
// CommStreams: each operation on its communicator's stream, after an event
// of the caller's compute stream, finished by an event the compute stream
// (or the host, bounded by the timeout) waits for (docs/cuda.md, "The
// stream and event protocol").
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

namespace lamina::rt::dist::nccl {

using namespace detail;

//===----------------------------------------------------------------------===//
// CommStreams
//===----------------------------------------------------------------------===//

CommStreams::CommStreams(NcclGroups &groups, double timeoutSeconds)
    : timeout(timeoutSeconds), groups_(groups) {}

CommStreams::~CommStreams() {
  // Destroying an event whose work is pending is allowed: CUDA releases it
  // once the work completes.
  for (Slot &s : slots_) {
    if (s.start)
      (void)cudaEventDestroy(s.start);
    if (s.done)
      (void)cudaEventDestroy(s.done);
  }
}

int CommStreams::outstanding() const {
  int n = 0;
  for (const Slot &s : slots_)
    n += s.busy ? 1 : 0;
  return n;
}

Status CommStreams::acquire(int &slot) {
  if (free_.empty()) {
    Slot s;
    cudaError_t e = cudaEventCreateWithFlags(&s.start, cudaEventDisableTiming);
    if (e != cudaSuccess)
      return Status::error(cudaText("cudaEventCreateWithFlags", e));
    e = cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      (void)cudaEventDestroy(s.start);
      return Status::error(cudaText("cudaEventCreateWithFlags", e));
    }
    slots_.push_back(s);
    free_.push_back(int(slots_.size()) - 1);
  }
  slot = free_.back();
  free_.pop_back();
  Slot &s = slots_[size_t(slot)];
  s.busy = true;
  s.serial = nextSerial_++;
  s.firstPolledAt = -1;
  return Status::success();
}

void CommStreams::release(int slot) {
  Slot &s = slots_[size_t(slot)];
  s.busy = false;
  s.channel = nullptr;
  s.what.clear();
  free_.push_back(slot);
}

Status CommStreams::usable(Channel &ch, const char *op) {
  if (groups_.aborted())
    return Status::error(std::string(op) + " on " + ch.name +
                         ": the NCCL communicators were aborted after an "
                         "earlier error");
  if (!ch.valid())
    return Status::error(std::string(op) + ": communicator " +
                         (ch.name.empty() ? "(unnamed)" : ch.name) +
                         " does not exist on this rank");
  if (!ch.stream)
    return Status::error(std::string(op) + " on " + ch.name +
                         ": the communicator has no stream");
  return Status::success();
}

Status CommStreams::begin(Channel &ch, cudaStream_t compute,
                          const std::string &what, int &slot) {
  if (Status s = acquire(slot); !s.ok())
    return Status::error(what + ": " + s.message());
  Slot &s = slots_[size_t(slot)];
  s.channel = &ch;
  s.what = what;
  // The communication starts after everything already enqueued on the
  // compute stream (which produced the buffers).
  cudaError_t e = cudaEventRecord(s.start, compute);
  if (e != cudaSuccess) {
    release(slot);
    return Status::error(what + ": " +
                         cudaText("cudaEventRecord (compute stream)", e));
  }
  e = cudaStreamWaitEvent(ch.stream, s.start, 0);
  if (e != cudaSuccess) {
    release(slot);
    return Status::error(what + ": " + cudaText("cudaStreamWaitEvent", e) +
                         " (" + ch.name + " stream)");
  }
  return Status::success();
}

Status CommStreams::enqueued(Channel &ch, ncclResult_t r, const char *call,
                             const std::string &what) {
  if (r == ncclSuccess)
    return Status::success();
  if (r != ncclInProgress)
    return Status::error(what + ": " + ncclText(call, r, ch.comm));
  // Non-blocking communicator: the operation is enqueued once the
  // communicator is ready again (connections may be set up first).
  Status s =
      waitReady(ch.comm, now() + timeout, timeout, what + " (" + call + ")");
  if (!s.ok()) {
    std::string async = groups_.asyncErrors();
    groups_.abortAll();
    return Status::error(s.message() + "; NCCL communicators aborted" +
                         (async.empty() ? "" : " (" + async + ")"));
  }
  return Status::success();
}

Status CommStreams::finish(Channel &ch, int slot, ncclResult_t r,
                           const char *call, CommHandle &out) {
  Slot &s = slots_[size_t(slot)];
  if (Status st = enqueued(ch, r, call, s.what); !st.ok()) {
    release(slot);
    return st;
  }
  cudaError_t e = cudaEventRecord(s.done, ch.stream);
  if (e != cudaSuccess) {
    std::string what = s.what;
    release(slot);
    return Status::error(what + ": " + cudaText("cudaEventRecord", e) + " (" +
                         ch.name + " stream)");
  }
  out.slot = slot;
  out.serial = s.serial;
  return Status::success();
}

Status CommStreams::sendRecv(Channel &ch, const void *sendBuf, size_t sendBytes,
                             int sendPeer, void *recvBuf, size_t recvBytes,
                             int recvPeer, cudaStream_t compute,
                             CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "send/recv"); !s.ok())
    return s;
  if (sendPeer < -1 || sendPeer >= ch.size || recvPeer < -1 ||
      recvPeer >= ch.size)
    return Status::error("send/recv on " + ch.name + ": peer " +
                         std::to_string(sendPeer < -1 || sendPeer >= ch.size
                                            ? sendPeer
                                            : recvPeer) +
                         " is not a rank of the " + std::to_string(ch.size) +
                         "-rank communicator");
  if (sendPeer < 0 && recvPeer < 0)
    return Status::error("send/recv on " + ch.name +
                         ": neither a send nor a "
                         "receive");
  if ((sendPeer >= 0 && sendBytes && !sendBuf) ||
      (recvPeer >= 0 && recvBytes && !recvBuf))
    return Status::error("send/recv on " + ch.name + ": a null buffer");
  std::string what;
  if (sendPeer >= 0)
    what = "send of " + std::to_string(sendBytes) + " bytes to rank " +
           std::to_string(sendPeer);
  if (recvPeer >= 0)
    what += std::string(what.empty() ? "" : " and ") + "receive of " +
            std::to_string(recvBytes) + " bytes from rank " +
            std::to_string(recvPeer);
  what += " on " + ch.name + " (rank " + std::to_string(ch.rank) + " of " +
          std::to_string(ch.size) + ")";
  std::vector<Transfer> transfers;
  if (sendPeer >= 0)
    transfers.push_back(
        {true, const_cast<void *>(sendBuf), sendBytes, sendPeer});
  if (recvPeer >= 0)
    transfers.push_back({false, recvBuf, recvBytes, recvPeer});
  Status st = group(ch, transfers, compute, what, out);
  if (st.ok() && sendPeer >= 0)
    ch.p2pBytesSent += sendBytes;
  return st;
}

Status CommStreams::allToAll(Channel &ch, const void *send,
                             const std::vector<size_t> &sendBytes,
                             const std::vector<size_t> &sendOffsets, void *recv,
                             const std::vector<size_t> &recvBytes,
                             const std::vector<size_t> &recvOffsets,
                             cudaStream_t compute, CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "all-to-all"); !s.ok())
    return s;
  const size_t n = size_t(ch.size);
  if (sendBytes.size() != n || sendOffsets.size() != n ||
      recvBytes.size() != n || recvOffsets.size() != n)
    return Status::error("all-to-all on " + ch.name + ": counts for " +
                         std::to_string(sendBytes.size()) + " ranks, not " +
                         std::to_string(n));
  size_t sent = 0, got = 0;
  for (size_t q = 0; q < n; ++q)
    sent += sendBytes[q], got += recvBytes[q];
  if ((sent && !send) || (got && !recv))
    return Status::error("all-to-all on " + ch.name + ": a null buffer");
  std::string what = "all-to-all of " + std::to_string(sent) + " bytes out, " +
                     std::to_string(got) + " in on " + ch.name + " (rank " +
                     std::to_string(ch.rank) + " of " +
                     std::to_string(ch.size) + ")";
  std::vector<Transfer> transfers;
  for (size_t q = 0; q < n; ++q) {
    if (sendBytes[q])
      transfers.push_back(
          {true,
           const_cast<char *>(static_cast<const char *>(send)) + sendOffsets[q],
           sendBytes[q], int(q)});
    if (recvBytes[q])
      transfers.push_back({false, static_cast<char *>(recv) + recvOffsets[q],
                           recvBytes[q], int(q)});
  }
  return group(ch, transfers, compute, what, out);
}

Status CommStreams::group(Channel &ch, const std::vector<Transfer> &transfers,
                          cudaStream_t compute, const std::string &what,
                          CommHandle &out) {
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    release(slot);
    return Status::error(what + ": " + ncclText("ncclGroupStart", r, ch.comm));
  }
  const char *failed = nullptr;
  ncclResult_t first = ncclSuccess;
  for (const Transfer &t : transfers) {
    r = t.send
            ? ncclSend(t.buf, t.bytes, ncclUint8, t.peer, ch.comm, ch.stream)
            : ncclRecv(t.buf, t.bytes, ncclUint8, t.peer, ch.comm, ch.stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      failed = t.send ? "ncclSend" : "ncclRecv";
      first = r;
      break;
    }
  }
  // The group is always closed, even after a failed call inside it.
  r = ncclGroupEnd();
  if (failed) {
    release(slot);
    return Status::error(what + ": " + ncclText(failed, first, ch.comm));
  }
  return finish(ch, slot, r, "ncclGroupEnd", out);
}

Status CommStreams::allReduce(Channel &ch, const void *send, void *recv,
                              size_t count, DType type, cudaStream_t compute,
                              CommHandle &out, bool maximum) {
  out = CommHandle();
  if (Status s = usable(ch, "all-reduce"); !s.ok())
    return s;
  if (count && (!send || !recv))
    return Status::error("all-reduce on " + ch.name + ": a null buffer");
  std::string what = std::string("all-reduce (") + (maximum ? "max" : "sum") +
                     ") of " + std::to_string(count) + " " + dtypeName(type) +
                     " on " + ch.name + " (rank " + std::to_string(ch.rank) +
                     " of " + std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r =
      ncclAllReduce(send, recv, count, ncclType(type),
                    maximum ? ncclMax : ncclSum, ch.comm, ch.stream);
  Status st = finish(ch, slot, r, "ncclAllReduce", out);
  if (st.ok())
    ch.collectiveBytes +=
        2.0 * (ch.size - 1) / ch.size * double(count) * double(dtypeSize(type));
  return st;
}

Status CommStreams::reduceScatter(Channel &ch, const void *send, void *recv,
                                  size_t countPerRank, DType type,
                                  cudaStream_t compute, CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "reduce-scatter"); !s.ok())
    return s;
  if (countPerRank && (!send || !recv))
    return Status::error("reduce-scatter on " + ch.name + ": a null buffer");
  std::string what = "reduce-scatter (sum) of " + std::to_string(countPerRank) +
                     " x " + std::to_string(ch.size) + " " + dtypeName(type) +
                     " on " + ch.name + " (rank " + std::to_string(ch.rank) +
                     " of " + std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r = ncclReduceScatter(send, recv, countPerRank, ncclType(type),
                                     ncclSum, ch.comm, ch.stream);
  Status st = finish(ch, slot, r, "ncclReduceScatter", out);
  if (st.ok())
    ch.collectiveBytes +=
        double(ch.size - 1) * double(countPerRank) * double(dtypeSize(type));
  return st;
}

Status CommStreams::allGather(Channel &ch, const void *send, void *recv,
                              size_t countPerRank, DType type,
                              cudaStream_t compute, CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "all-gather"); !s.ok())
    return s;
  if (countPerRank && (!send || !recv))
    return Status::error("all-gather on " + ch.name + ": a null buffer");
  std::string what = "all-gather of " + std::to_string(countPerRank) + " x " +
                     std::to_string(ch.size) + " " + dtypeName(type) + " on " +
                     ch.name + " (rank " + std::to_string(ch.rank) + " of " +
                     std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r = ncclAllGather(send, recv, countPerRank, ncclType(type),
                                 ch.comm, ch.stream);
  Status st = finish(ch, slot, r, "ncclAllGather", out);
  if (st.ok())
    ch.collectiveBytes +=
        double(ch.size - 1) * double(countPerRank) * double(dtypeSize(type));
  return st;
}

Status CommStreams::check(const CommHandle &h, Slot *&s) {
  if (h.slot < 0 || size_t(h.slot) >= slots_.size() ||
      !slots_[size_t(h.slot)].busy || slots_[size_t(h.slot)].serial != h.serial)
    return Status::error("invalid communication handle (already waited for, "
                         "completed, or never issued)");
  s = &slots_[size_t(h.slot)];
  return Status::success();
}

Status CommStreams::wait(CommHandle &h, cudaStream_t compute) {
  Slot *s;
  if (Status st = check(h, s); !st.ok())
    return st;
  // The wait captures the event's current record: the slot can be reused
  // (and its event recorded again) right after.
  cudaError_t e = cudaStreamWaitEvent(compute, s->done, 0);
  std::string what = s->what;
  release(h.slot);
  h = CommHandle();
  if (e != cudaSuccess)
    return Status::error(what + ": " +
                         cudaText("cudaStreamWaitEvent (compute stream)", e));
  return Status::success();
}

Status CommStreams::timeoutError(const std::string &what, double waited) {
  std::string async = groups_.asyncErrors();
  groups_.abortAll();
  return Status::error(
      what + " did not complete within " + secondsText(waited) +
      " (--comm-timeout); a peer may have died or not issued the matching "
      "operation; NCCL communicators aborted" +
      (async.empty() ? "" : " (ncclCommGetAsyncError: " + async + ")"));
}

Status CommStreams::test(CommHandle &h, bool &done) {
  done = false;
  Slot *s;
  if (Status st = check(h, s); !st.ok())
    return st;
  double t = now();
  if (s->firstPolledAt < 0)
    s->firstPolledAt = t;
  cudaError_t e = cudaEventQuery(s->done);
  if (e == cudaSuccess) {
    release(h.slot);
    h = CommHandle();
    done = true;
    return Status::success();
  }
  if (e != cudaErrorNotReady) {
    std::string what = s->what;
    release(h.slot);
    h = CommHandle();
    return Status::error(what + ": " + cudaText("cudaEventQuery", e));
  }
  // Not done: has the communicator failed (a peer's network error)?
  if (groups_.aborted() || !s->channel || !s->channel->comm) {
    std::string what = s->what;
    release(h.slot);
    h = CommHandle();
    return Status::error(what + ": the NCCL communicators were aborted");
  }
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(s->channel->comm, &state);
  if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
    std::string what = s->what;
    std::string text =
        r != ncclSuccess
            ? ncclText("ncclCommGetAsyncError", r, s->channel->comm)
            : ncclText("ncclCommGetAsyncError", state, s->channel->comm);
    release(h.slot);
    h = CommHandle();
    groups_.abortAll();
    return Status::error(what + ": " + text + "; NCCL communicators aborted");
  }
  if (t - s->firstPolledAt > timeout) {
    std::string what = s->what;
    release(h.slot);
    h = CommHandle();
    return timeoutError(what, timeout);
  }
  return Status::success();
}

Status CommStreams::waitHost(CommHandle &h) {
  for (unsigned spins = 0;; ++spins) {
    bool done = false;
    if (Status s = test(h, done); !s.ok())
      return s;
    if (done)
      return Status::success();
    backoff(spins);
  }
}

Status CommStreams::syncStream(cudaStream_t stream, const std::string &what) {
  int slot;
  if (Status s = acquire(slot); !s.ok())
    return Status::error(what + ": " + s.message());
  Slot &s = slots_[size_t(slot)];
  cudaError_t e = cudaEventRecord(s.done, stream);
  if (e != cudaSuccess) {
    release(slot);
    return Status::error(what + ": " + cudaText("cudaEventRecord", e));
  }
  double start = now();
  for (unsigned spins = 0;; ++spins) {
    e = cudaEventQuery(slots_[size_t(slot)].done);
    if (e == cudaSuccess) {
      release(slot);
      return Status::success();
    }
    if (e != cudaErrorNotReady) {
      release(slot);
      return Status::error(what + ": " + cudaText("cudaEventQuery", e));
    }
    std::string async = groups_.aborted() ? "" : groups_.asyncErrors();
    if (!async.empty()) {
      release(slot);
      groups_.abortAll();
      return Status::error(what + ": " + async +
                           "; NCCL communicators aborted");
    }
    if (now() - start > timeout) {
      release(slot);
      // The stream waits for communication that does not finish.
      return timeoutError(what + " (stream synchronisation)", timeout);
    }
    backoff(spins);
  }
}

} // namespace lamina::rt::dist::nccl
