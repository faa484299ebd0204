//===- Groups.cpp - the pipeline and data-parallel communicators ---------===//
//
// NcclGroups: ncclCommSplit of the world into the data-parallel group and
// the pipeline pairs (GridPlace's colors and keys), each with its own
// stream, their connections warmed up, and the channels other groups add.
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
// Groups
//===----------------------------------------------------------------------===//

namespace {

Status commShape(Channel &ch) {
  ncclResult_t r = ncclCommCount(ch.comm, &ch.size);
  if (r != ncclSuccess)
    return Status::error(ch.name + ": " +
                         ncclText("ncclCommCount", r, ch.comm));
  r = ncclCommUserRank(ch.comm, &ch.rank);
  if (r != ncclSuccess)
    return Status::error(ch.name + ": " +
                         ncclText("ncclCommUserRank", r, ch.comm));
  return Status::success();
}

/// ncclCommSplit of `parent`, waited for; `out` stays null for NOCOLOR.
/// A non-blocking split fills the new communicator only when the parent
/// leaves ncclInProgress (NVIDIA/nccl#1472, as of NCCL 2.23 to 2.28): the
/// parent is waited for first, then the child.
Status split(Channel &parent, int color, int key, double timeout,
             const std::string &name, Channel &out) {
  ncclConfig_t config = nonBlockingConfig();
  // NCCL's set-up thread stores the child here when it is done, so the
  // slot must outlive a wait that gave up: it is leaked then.
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  ncclResult_t r = ncclCommSplit(parent.comm, color, key, slot.get(), &config);
  std::string what = "ncclCommSplit (" + name + ")";
  auto child = [&slot] {
    return __atomic_load_n(slot.get(), __ATOMIC_ACQUIRE);
  };
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string text = ncclText("ncclCommSplit", r, parent.comm);
    if (child())
      (void)ncclCommAbort(child());
    (void)slot.release();
    return Status::error(name + ": " + text);
  }
  double deadline = now() + timeout;
  if (Status s = waitReady(parent.comm, deadline, timeout,
                           what + " on the parent " + parent.name);
      !s.ok()) {
    if (child())
      (void)ncclCommAbort(child());
    (void)slot.release();
    return s;
  }
  ncclComm_t comm = child();
  if (comm) {
    if (Status s = waitReady(comm, deadline, timeout, what); !s.ok()) {
      (void)ncclCommAbort(comm);
      return s;
    }
  } else if (color != NCCL_SPLIT_NOCOLOR) {
    return Status::error(what + ": NCCL returned no communicator");
  }
  out.name = name;
  out.comm = comm;
  if (comm)
    return commShape(out);
  return Status::success();
}

} // namespace

namespace {

/// Polls cudaStreamQuery until `stream` is idle or the deadline passes.
Status waitStream(cudaStream_t stream, double timeout,
                  const std::string &what) {
  double deadline = now() + timeout;
  for (unsigned spins = 0;; ++spins) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess)
      return Status::success();
    if (e != cudaErrorNotReady)
      return Status::error(what + ": " + cudaText("cudaStreamQuery", e));
    if (now() > deadline)
      return Status::error(what + " did not complete within " +
                           secondsText(timeout) +
                           " (a rank may have failed or died)");
    backoff(spins);
  }
}

/// One byte each way on every pipeline pair, so that NCCL sets up the
/// point-to-point connections now: the first send/recv between two ranks
/// waits (on the host) for the peer to issue its side, which in a pipeline
/// schedule could otherwise tie the host order of operations on different
/// communicators together. Stage s does its previous pair, then its next
/// one, so the chain 0-1, 1-2, ... completes in order.
Status warmUpPairs(NcclGroups &g) {
  if (!g.pipePrev.valid() && !g.pipeNext.valid())
    return Status::success();
  void *buf = nullptr;
  cudaError_t e = cudaMalloc(&buf, 2);
  if (e != cudaSuccess)
    return Status::error(cudaText("cudaMalloc (pipeline warm-up)", e));
  Status result = Status::success();
  for (Channel *ch : {&g.pipePrev, &g.pipeNext}) {
    if (!ch->valid() || !result.ok())
      continue;
    std::string what = "connecting " + ch->name + " (a one-byte send/recv)";
    int peer = NcclGroups::peerRank(*ch);
    unsigned char *bytes = static_cast<unsigned char *>(buf);
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
      result =
          Status::error(what + ": " + ncclText("ncclGroupStart", r, ch->comm));
      continue;
    }
    ncclResult_t rs = ncclSend(bytes, 1, ncclUint8, peer, ch->comm, ch->stream);
    ncclResult_t rr = ncclSuccess;
    if (rs == ncclSuccess || rs == ncclInProgress)
      rr = ncclRecv(bytes + 1, 1, ncclUint8, peer, ch->comm, ch->stream);
    r = ncclGroupEnd();
    if (rs != ncclSuccess && rs != ncclInProgress)
      result = Status::error(what + ": " + ncclText("ncclSend", rs, ch->comm));
    else if (rr != ncclSuccess && rr != ncclInProgress)
      result = Status::error(what + ": " + ncclText("ncclRecv", rr, ch->comm));
    else if (r != ncclSuccess && r != ncclInProgress)
      result =
          Status::error(what + ": " + ncclText("ncclGroupEnd", r, ch->comm));
    else if (r == ncclInProgress)
      result = waitReady(ch->comm, now() + g.timeout(), g.timeout(), what);
    if (result.ok())
      result = waitStream(ch->stream, g.timeout(), what);
  }
  if (!result.ok())
    g.abortAll();
  e = cudaFree(buf);
  if (result.ok() && e != cudaSuccess)
    result = Status::error(cudaText("cudaFree (pipeline warm-up)", e));
  return result;
}

} // namespace

GridPlace gridPlace(int worldRank, int pp) {
  GridPlace p;
  p.stage = worldRank % pp;
  p.replica = worldRank / pp;
  p.dpColor = p.stage;
  p.dpKey = p.replica;
  for (int parity = 0; parity < 2; ++parity) {
    int edge = -1;
    if (p.stage % 2 == parity && p.stage + 1 < pp)
      edge = p.stage; // with the next stage
    else if (p.stage % 2 != parity && p.stage >= 1)
      edge = p.stage - 1; // with the previous stage
    p.edge[parity] = edge;
    p.edgeColor[parity] = edge < 0 ? -1 : p.replica * pp + edge;
  }
  return p;
}

int pipelineSplits(int pp) { return pp <= 1 ? 0 : pp == 2 ? 1 : 2; }

Status NcclGroups::create(ncclComm_t worldComm, int pp, int dp,
                          double timeoutSeconds, NcclGroups &g) {
  if (g.world.valid() || g.aborted_)
    return Status::error("NcclGroups::create: the object is already in use");
  g.timeout_ = timeoutSeconds > 0 ? timeoutSeconds : 60;
  g.world.name = "world";
  g.world.comm = worldComm;
  if (!worldComm)
    return Status::error("NcclGroups::create: no world communicator");
  if (Status s = commShape(g.world); !s.ok())
    return s;
  if (pp < 1 || dp < 1 || (long long)pp * dp != g.world.size)
    return Status::error("the grid pp " + std::to_string(pp) + " x dp " +
                         std::to_string(dp) + " does not match the world of " +
                         std::to_string(g.world.size) + " ranks");
  const GridPlace place = gridPlace(g.world.rank, pp);
  g.pp = pp;
  g.dp = dp;
  g.stage = place.stage;
  g.replica = place.replica;

  // The replicas of this stage (MPI_Comm_split(world, stage, replica) in
  // lib/Runtime/Dist).
  if (Status s = split(g.world, place.dpColor, place.dpKey, g.timeout_, "dp",
                       g.dpGroup);
      !s.ok())
    return s;

  // The pipeline pairs: one split per edge parity that exists (every rank
  // computes the same count, so all take part in each split).
  for (int parity = 0; parity < pipelineSplits(pp); ++parity) {
    int edge = place.edge[parity];
    int color = edge < 0 ? NCCL_SPLIT_NOCOLOR : place.edgeColor[parity];
    Channel pair;
    std::string name = edge == g.stage ? "pipe-next" : "pipe-prev";
    if (Status s = split(g.world, color, place.stage, g.timeout_,
                         edge < 0 ? "pipeline (none)" : name, pair);
        !s.ok())
      return s;
    if (edge < 0)
      continue;
    if (pair.size != 2) {
      (void)ncclCommAbort(pair.comm);
      return Status::error(name + ": ncclCommSplit made a communicator of " +
                           std::to_string(pair.size) + " ranks, not 2");
    }
    (edge == g.stage ? g.pipeNext : g.pipePrev) = pair;
  }

  // A stream per communicator, with the greatest priority: its work is
  // scheduled ahead of compute blocks waiting for an SM.
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e != cudaSuccess)
    return Status::error(cudaText("cudaDeviceGetStreamPriorityRange", e));
  for (Channel *ch : g.channels()) {
    e = cudaStreamCreateWithPriority(&ch->stream, cudaStreamNonBlocking,
                                     greatest);
    if (e != cudaSuccess) {
      ch->stream = nullptr;
      return Status::error(ch->name + ": " +
                           cudaText("cudaStreamCreateWithPriority", e));
    }
  }
  return warmUpPairs(g);
}

std::vector<Channel *> NcclGroups::all() {
  std::vector<Channel *> out = {&pipePrev, &pipeNext, &dpGroup, &world};
  for (auto &ch : extra_)
    out.push_back(ch.get());
  return out;
}

std::vector<Channel *> NcclGroups::channels() {
  std::vector<Channel *> valid;
  for (Channel *ch : all())
    if (ch->valid())
      valid.push_back(ch);
  return valid;
}

Status NcclGroups::addChannel(int color, int key, const std::string &name,
                              Channel *&out) {
  out = nullptr;
  if (!world.valid())
    return Status::error(name + ": the world communicator is gone");
  auto ch = std::make_unique<Channel>();
  if (Status s = split(world, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                       timeout_, name, *ch);
      !s.ok())
    return s;
  if (!ch->valid())
    return Status::success();
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithPriority(&ch->stream, cudaStreamNonBlocking,
                                     greatest);
  if (e != cudaSuccess) {
    (void)ncclCommAbort(ch->comm);
    return Status::error(name + ": " +
                         cudaText("cudaStreamCreateWithPriority", e));
  }
  out = ch.get();
  extra_.push_back(std::move(ch));
  return Status::success();
}

void NcclGroups::abortAll() {
  for (Channel *ch : all())
    if (ch->comm) {
      (void)ncclCommAbort(ch->comm);
      ch->comm = nullptr;
    }
  aborted_ = true;
}

std::string NcclGroups::asyncErrors() {
  std::string all;
  for (Channel *ch : channels()) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(ch->comm, &state);
    std::string text;
    if (r != ncclSuccess)
      text = ncclText("ncclCommGetAsyncError", r, ch->comm);
    else if (state != ncclSuccess && state != ncclInProgress)
      text = ncclText("ncclCommGetAsyncError", state, ch->comm);
    if (!text.empty())
      all += (all.empty() ? "" : "; ") + ch->name + ": " + text;
  }
  return all;
}

Status NcclGroups::destroy() {
  std::string errors;
  auto note = [&](const std::string &text) {
    errors += (errors.empty() ? "" : "; ") + text;
  };
  // The added channels first: they were split from the world.
  std::vector<Channel *> order = all();
  std::reverse(order.begin() + 4, order.end());
  std::rotate(order.begin(), order.begin() + 4, order.end());
  for (Channel *ch : order) {
    if (ch->comm) {
      ncclResult_t r = ncclCommFinalize(ch->comm);
      Status s = Status::success();
      if (r != ncclSuccess && r != ncclInProgress)
        s = Status::error(ncclText("ncclCommFinalize", r, ch->comm));
      else
        s = waitReady(ch->comm, now() + timeout_, timeout_, "ncclCommFinalize");
      if (s.ok()) {
        r = ncclCommDestroy(ch->comm);
        if (r != ncclSuccess)
          note(ch->name + ": " + ncclText("ncclCommDestroy", r, nullptr));
      } else {
        note(ch->name + ": " + s.message() + "; aborted");
        (void)ncclCommAbort(ch->comm);
      }
      ch->comm = nullptr;
    }
    if (ch->stream) {
      cudaError_t e = cudaStreamDestroy(ch->stream);
      if (e != cudaSuccess)
        note(ch->name + ": " + cudaText("cudaStreamDestroy", e));
      ch->stream = nullptr;
    }
  }
  if (!errors.empty())
    return Status::error(errors);
  return Status::success();
}

NcclGroups::~NcclGroups() { (void)destroy(); }

} // namespace lamina::rt::dist::nccl
