//===- NcclApi.cpp - the NCCL calls, on the host --------------------------===//
//
// The part of NCCL's API that lamina_nccl calls, for the CUDA kernel
// emulator's programs (library lamina_nccl_emulated; docs/cuda.md, "The
// kernel emulator"): communicators between processes over TCP
// (Bootstrap.h connects them; lamina_transport's exchange moves the
// bytes), every operation queued on its CUDA stream's worker
// (lib/Runtime/Cuda/Emulator/Streams.h), so it runs in stream order,
// overlaps the host's compute, and completes the events recorded after it.
//
// * ncclGetUniqueId names rank 0's listener and a random tag;
//   ncclCommInitRank gathers every rank's listener at rank 0 and connects
//   every pair. ncclCommSplit gathers the colours and keys the same way
//   and connects each new group. Non-blocking communicators
//   (config.blocking = 0) do both on a thread: ncclCommGetAsyncError says
//   ncclInProgress until they are done. As in NCCL (2.23 to 2.28 at
//   least, NVIDIA/nccl#1472), a non-blocking split leaves the parent
//   ncclInProgress and fills *newcomm only when it is done, so a caller
//   must wait for the parent before it can see the child.
// * Collectives exchange whole buffers between every pair and reduce in
//   rank order, so every rank gets bitwise the same result (as NCCL
//   guarantees); 16-bit floats are summed in f32 and rounded once.
// * A failed transfer (a peer died, sizes that do not match) is the
//   communicator's asynchronous error, with its text in ncclGetLastError,
//   and hangs the stream as a GPU would; ncclCommAbort ends the wait.
//
//===----------------------------------------------------------------------===//

#include "Bootstrap.h"

#include "Streams.h"

#include "lamina/Runtime/Math.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <unistd.h>

using namespace lamina::rt::dist::nccl::emulator;
using namespace lamina::rt::dist::transport;
using lamina::Status;
namespace emu = lamina::cuda_emulator;

namespace {

constexpr char kIdMagic[8] = "LAMEMU1";

struct Id {
  char magic[8];
  Address root;
  uint64_t tag;
};
static_assert(sizeof(Id) <= sizeof(ncclUniqueId), "the id must fit");

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A communicator's state, shared with the stream tasks and the set-up
/// thread that use it: whichever ends last closes the connections.
struct State {
  int rank = 0, size = 1;
  uint64_t tag = 0, splits = 0;
  std::vector<Address> addresses;
  std::vector<Socket> links; ///< to every other rank
  std::atomic<int> result{ncclInProgress};
  AbortFlag aborted{false};
  /// Set-up threads (init, a split) of this communicator still running.
  std::atomic<int> setups{0};
  std::mutex m; ///< guards lastError
  std::string lastError;
  std::mutex ops; ///< one operation at a time on the connections

  void fail(ncclResult_t r, const std::string &text) {
    std::lock_guard<std::mutex> lock(m);
    if (lastError.empty())
      lastError = text;
    result = r;
  }
};

std::mutex globalMutex;
std::string globalError;

void setGlobalError(const std::string &text) {
  std::lock_guard<std::mutex> lock(globalMutex);
  globalError = text;
}

ncclResult_t invalid(ncclResult_t r, const std::string &text) {
  setGlobalError(text);
  return r;
}

size_t typeSize(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

} // namespace

struct ncclComm {
  std::shared_ptr<State> s;
  /// The set-up threads (init, splits) that use this communicator.
  std::vector<std::thread> threads;
  /// Ends them; one still waiting for a peer (a rank that never came) is
  /// aborted first, so destroying or aborting never hangs.
  void join() {
    if (s->setups.load() > 0)
      s->aborted = true;
    for (std::thread &t : threads)
      if (t.joinable())
        t.join();
    threads.clear();
  }
};

namespace {

/// Ends a set-up of `s` (counted in `setups` before it started, so that a
/// join right after the start already sees it).
struct SetupScope {
  State &s;
  explicit SetupScope(State &s) : s(s) {}
  ~SetupScope() { --s.setups; }
};

/// Sets up `s` as rank `rank` of `size` from the unique id.
void initialise(std::shared_ptr<State> s, Id id) {
  SetupScope scope(*s);
  Address mine;
  if (Status st = listenerAddress(mine); !st.ok()) {
    s->fail(ncclSystemError, st.message());
    return;
  }
  if (s->rank == 0)
    mine = id.root;
  struct Join {
    Address a;
    int32_t size, pad;
  } join{mine, s->size, 0};
  std::vector<unsigned char> all;
  if (Status st = star(mix(id.tag ^ 1), s->rank, s->size, id.root, &join,
                       sizeof join, all, s->aborted);
      !st.ok()) {
    s->fail(ncclRemoteError, "joining the communicator: " + st.message());
    return;
  }
  s->addresses.resize(size_t(s->size));
  for (int r = 0; r < s->size; ++r) {
    Join j;
    std::memcpy(&j, all.data() + sizeof j * size_t(r), sizeof j);
    if (j.size != s->size) {
      s->fail(ncclInvalidUsage,
              "rank " + std::to_string(r) + " joined with nranks " +
                  std::to_string(j.size) + ", this rank with " +
                  std::to_string(s->size));
      return;
    }
    s->addresses[size_t(r)] = j.a;
  }
  if (Status st = mesh(s->tag, s->rank, s->addresses, s->links, s->aborted);
      !st.ok()) {
    s->fail(ncclRemoteError, st.message());
    return;
  }
  s->result = ncclSuccess;
}

/// Parent `p`'s split: the colours and keys of every parent rank, then
/// child `c`'s connections (c is null for NCCL_SPLIT_NOCOLOR). A
/// non-blocking split (`publish` set) then stores the child's handle in
/// *publish and only then ends the parent's ncclInProgress.
void splitInto(std::shared_ptr<State> p, uint64_t tag, int color, int key,
               std::shared_ptr<State> c, ncclComm_t handle,
               ncclComm_t *publish) {
  // The thread belongs to the new communicator (the parent for NOCOLOR):
  // aborting that one ends the wait.
  State &owner = c ? *c : *p;
  SetupScope scope(owner);
  struct Publish {
    State &p;
    ncclComm_t handle, *to;
    ~Publish() {
      if (!to)
        return;
      __atomic_store_n(to, handle, __ATOMIC_RELEASE);
      int busy = ncclInProgress; // a failure stays the parent's state
      p.result.compare_exchange_strong(busy, ncclSuccess);
    }
  } done{*p, handle, publish};
  int32_t mine[2] = {color, key};
  std::vector<unsigned char> all;
  if (Status st = star(mix(tag ^ 1), p->rank, p->size, p->addresses[0], mine,
                       sizeof mine, all, owner.aborted);
      !st.ok()) {
    std::string text = "ncclCommSplit: " + st.message();
    p->fail(ncclRemoteError, text);
    if (c)
      c->fail(ncclRemoteError, text);
    return;
  }
  if (!c)
    return;
  std::vector<std::pair<int32_t, int>> members; // key, parent rank
  for (int r = 0; r < p->size; ++r) {
    int32_t ck[2];
    std::memcpy(ck, all.data() + sizeof ck * size_t(r), sizeof ck);
    if (ck[0] == color)
      members.push_back({ck[1], r});
  }
  std::sort(members.begin(), members.end());
  c->size = int(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == p->rank)
      c->rank = int(i);
    c->addresses.push_back(p->addresses[size_t(members[i].second)]);
  }
  c->tag = mix(tag ^ (uint64_t(uint32_t(color)) << 8));
  if (Status st = mesh(c->tag, c->rank, c->addresses, c->links, c->aborted);
      !st.ok()) {
    c->fail(ncclRemoteError, "ncclCommSplit: " + st.message());
    return;
  }
  c->result = ncclSuccess;
}

bool nonBlocking(const ncclConfig_t *config) {
  return config && config->blocking == 0;
}

ncclResult_t usable(ncclComm_t comm, const char *call) {
  if (!comm)
    return invalid(ncclInvalidArgument, std::string(call) + ": null comm");
  int r = comm->s->result.load();
  if (r == ncclInProgress)
    return invalid(ncclInvalidUsage, std::string(call) +
                                         ": the communicator is not ready "
                                         "(ncclCommGetAsyncError says "
                                         "ncclInProgress)");
  if (r != ncclSuccess)
    return ncclResult_t(r);
  return ncclSuccess;
}

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

struct P2p {
  bool send;
  void *data;
  size_t bytes;
  int peer;
};

/// A frame of an operation to or from rank `peer` of `s`.
Transfer message(State &s, int peer, bool send, void *data, size_t bytes) {
  Transfer t;
  t.fd = s.links[size_t(peer)].fd();
  t.peer = peer;
  t.send = send;
  t.data = data;
  t.bytes = bytes;
  return t;
}

/// Runs `messages` at once until done or aborted: the error, empty when
/// none.
std::string exchangeAll(State &s, std::vector<Transfer> &messages) {
  ExchangeFailure why;
  Status st = exchangeFrames(messages, Deadline().orCancelled(s.aborted), &why);
  if (st.ok())
    return "";
  switch (why.reason) {
  case ExchangeFailure::Cancelled:
    return "aborted";
  case ExchangeFailure::BadHeader:
    return "rank " + std::to_string(why.peer) + " sent " +
           std::to_string(why.header.length) +
           " bytes where this rank receives " +
           std::to_string(why.transfer->bytes) + " (mismatched operations)";
  case ExchangeFailure::Closed:
    return "rank " + std::to_string(why.peer) +
           " of the communicator closed its connection (it may have died)";
  case ExchangeFailure::SystemError:
    return st.message() + " (it may have died)";
  default:
    break;
  }
  return st.message();
}

/// Every message of a group between this rank and its peers.
bool runP2p(State &s, std::vector<P2p> &ops) {
  std::lock_guard<std::mutex> lock(s.ops);
  std::vector<Transfer> messages;
  std::vector<P2p *> selfSends, selfRecvs;
  for (P2p &op : ops) {
    if (op.peer == s.rank) {
      (op.send ? selfSends : selfRecvs).push_back(&op);
      continue;
    }
    messages.push_back(message(s, op.peer, op.send, op.data, op.bytes));
  }
  std::string err;
  if (selfSends.size() != selfRecvs.size())
    err = "a send to this rank itself without its receive, or the reverse";
  for (size_t i = 0; err.empty() && i < selfSends.size(); ++i) {
    if (selfSends[i]->bytes != selfRecvs[i]->bytes)
      err = "a send to itself of " + std::to_string(selfSends[i]->bytes) +
            " bytes received as " + std::to_string(selfRecvs[i]->bytes);
    else if (selfSends[i]->bytes)
      std::memmove(selfRecvs[i]->data, selfSends[i]->data, selfSends[i]->bytes);
  }
  if (err.empty())
    err = exchangeAll(s, messages);
  if (err.empty())
    return true;
  if (!s.aborted.load())
    s.fail(ncclRemoteError, err);
  return false;
}

/// out[i] = op over ranks 0..n-1 of in[r][i], in rank order; 16-bit floats
/// in f32, rounded once.
template <typename T, typename Acc, typename Load, typename Store>
void reduceAs(const std::vector<const void *> &in, void *out, size_t count,
              ncclRedOp_t op, Load load, Store store) {
  const size_t n = in.size();
  for (size_t i = 0; i < count; ++i) {
    Acc acc = load(static_cast<const T *>(in[0])[i]);
    for (size_t r = 1; r < n; ++r) {
      Acc v = load(static_cast<const T *>(in[r])[i]);
      switch (op) {
      case ncclProd:
        acc = acc * v;
        break;
      case ncclMax:
        acc = std::max(acc, v);
        break;
      case ncclMin:
        acc = std::min(acc, v);
        break;
      default:
        acc = acc + v;
        break;
      }
    }
    if (op == ncclAvg)
      acc = acc / Acc(n);
    static_cast<T *>(out)[i] = store(acc);
  }
}

template <typename T>
void reducePlain(const std::vector<const void *> &in, void *out, size_t count,
                 ncclRedOp_t op) {
  reduceAs<T, T>(
      in, out, count, op, [](T v) { return v; }, [](T v) { return v; });
}

void reduce(const std::vector<const void *> &in, void *out, size_t count,
            ncclDataType_t type, ncclRedOp_t op) {
  using namespace lamina::rt::math;
  switch (type) {
  case ncclInt8:
    return reducePlain<int8_t>(in, out, count, op);
  case ncclUint8:
    return reducePlain<uint8_t>(in, out, count, op);
  case ncclInt32:
    return reducePlain<int32_t>(in, out, count, op);
  case ncclUint32:
    return reducePlain<uint32_t>(in, out, count, op);
  case ncclInt64:
    return reducePlain<int64_t>(in, out, count, op);
  case ncclUint64:
    return reducePlain<uint64_t>(in, out, count, op);
  case ncclFloat32:
    return reducePlain<float>(in, out, count, op);
  case ncclFloat64:
    return reducePlain<double>(in, out, count, op);
  case ncclFloat16:
    return reduceAs<uint16_t, float>(
        in, out, count, op, [](uint16_t v) { return halfToFloat(v); },
        [](float v) { return floatToHalf(v); });
  case ncclBfloat16:
    return reduceAs<uint16_t, float>(
        in, out, count, op, [](uint16_t v) { return bf16ToFloat(v); },
        [](float v) { return floatToBf16(v); });
  default:
    return;
  }
}

enum class Coll { AllReduce, ReduceScatter, AllGather };

/// A collective as one exchange: every rank's whole contribution to every
/// other (all-reduce: the buffer; reduce-scatter: the peer's chunk;
/// all-gather: this rank's chunk), then the reduction in rank order.
bool runCollective(State &s, Coll kind, const void *send, void *recv,
                   size_t count, ncclDataType_t type, ncclRedOp_t op) {
  std::lock_guard<std::mutex> lock(s.ops);
  const size_t es = typeSize(type), n = size_t(s.size), me = size_t(s.rank);
  const size_t chunk = count * es; // bytes each rank contributes to a peer
  std::vector<std::vector<unsigned char>> from(n);
  std::vector<Transfer> messages;
  for (size_t r = 0; r < n; ++r) {
    if (r == me)
      continue;
    const char *src = static_cast<const char *>(send);
    if (kind == Coll::ReduceScatter)
      src += r * chunk;
    messages.push_back(
        message(s, int(r), true, const_cast<char *>(src), chunk));
    void *dst;
    if (kind == Coll::AllGather) {
      dst = static_cast<char *>(recv) + r * chunk;
    } else {
      from[r].resize(chunk);
      dst = from[r].data();
    }
    messages.push_back(message(s, int(r), false, dst, chunk));
  }
  if (std::string err = exchangeAll(s, messages); !err.empty()) {
    if (!s.aborted.load())
      s.fail(ncclRemoteError, err);
    return false;
  }
  if (kind == Coll::AllGather) {
    char *mine = static_cast<char *>(recv) + me * chunk;
    if (mine != send && chunk)
      std::memmove(mine, send, chunk);
    return true;
  }
  std::vector<const void *> in(n);
  const char *own = static_cast<const char *>(send) +
                    (kind == Coll::ReduceScatter ? me * chunk : 0);
  for (size_t r = 0; r < n; ++r)
    in[r] = r == me ? static_cast<const void *>(own) : from[r].data();
  if (count)
    reduce(in, recv, count, type, op);
  return true;
}

thread_local int groupDepth = 0;
struct Pending {
  std::shared_ptr<State> s;
  cudaStream_t stream;
  P2p op;
};
thread_local std::vector<Pending> pending;

void submitP2p(const std::shared_ptr<State> &s, cudaStream_t stream,
               std::vector<P2p> ops) {
  bool sends = false, recvs = false;
  for (const P2p &op : ops)
    (op.send ? sends : recvs) = true;
  emu::enqueue(
      stream, [s, ops]() mutable { return runP2p(*s, ops); },
      sends && recvs ? "send/recv"
      : sends        ? "send"
                     : "recv");
}

ncclResult_t p2p(bool send, void *buf, size_t count, ncclDataType_t type,
                 int peer, ncclComm_t comm, cudaStream_t stream,
                 const char *call) {
  if (ncclResult_t r = usable(comm, call); r != ncclSuccess)
    return r;
  if (!typeSize(type))
    return invalid(ncclInvalidArgument, std::string(call) + ": bad datatype");
  if (peer < 0 || peer >= comm->s->size)
    return invalid(ncclInvalidArgument,
                   std::string(call) + ": peer " + std::to_string(peer) +
                       " is not a rank of the " +
                       std::to_string(comm->s->size) + "-rank communicator");
  P2p op{send, buf, count * typeSize(type), peer};
  if (groupDepth > 0)
    pending.push_back({comm->s, stream, op});
  else
    submitP2p(comm->s, stream, {op});
  return ncclSuccess;
}

ncclResult_t collective(Coll kind, const void *send, void *recv, size_t count,
                        ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                        cudaStream_t stream, const char *call) {
  if (ncclResult_t r = usable(comm, call); r != ncclSuccess)
    return r;
  if (!typeSize(type) || op < ncclSum || op > ncclAvg)
    return invalid(ncclInvalidArgument,
                   std::string(call) + ": bad datatype or reduction");
  std::shared_ptr<State> s = comm->s;
  emu::enqueue(
      stream,
      [=] { return runCollective(*s, kind, send, recv, count, type, op); },
      kind == Coll::AllReduce       ? "all-reduce"
      : kind == Coll::ReduceScatter ? "reduce-scatter"
                                    : "all-gather");
  return ncclSuccess;
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a network error";
  case ncclInProgress:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  // The communicator's first error, else the last call's that failed.
  thread_local std::string copy;
  copy.clear();
  if (comm) {
    std::lock_guard<std::mutex> lock(comm->s->m);
    copy = comm->s->lastError;
  }
  if (copy.empty()) {
    std::lock_guard<std::mutex> lock(globalMutex);
    copy = globalError;
  }
  return copy.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *out) {
  Id id;
  std::memcpy(id.magic, kIdMagic, sizeof id.magic);
  if (Status st = listenerAddress(id.root); !st.ok())
    return invalid(ncclSystemError, st.message());
  std::random_device rd;
  id.tag = mix(
      (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid()) ^
      uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::memset(out, 0, sizeof *out);
  std::memcpy(out, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                    ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  *comm = nullptr;
  Id id;
  std::memcpy(&id, &commId, sizeof id);
  if (std::memcmp(id.magic, kIdMagic, sizeof id.magic) != 0)
    return invalid(ncclInvalidArgument,
                   "the unique id was not made by the emulator's "
                   "ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalid(ncclInvalidArgument, "rank " + std::to_string(rank) +
                                            " of " + std::to_string(nranks));
  auto *c = new ncclComm;
  c->s = std::make_shared<State>();
  c->s->rank = rank;
  c->s->size = nranks;
  c->s->tag = id.tag;
  *comm = c;
  ++c->s->setups;
  if (nonBlocking(config)) {
    c->threads.emplace_back(initialise, c->s, id);
    return ncclInProgress;
  }
  initialise(c->s, id);
  return ncclResult_t(c->s->result.load());
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id,
                              int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *config) {
  *newcomm = nullptr;
  if (ncclResult_t r = usable(comm, "ncclCommSplit"); r != ncclSuccess)
    return r;
  std::shared_ptr<State> p = comm->s;
  uint64_t tag = mix(p->tag ^ ++p->splits);
  std::shared_ptr<State> child;
  ncclComm_t owner = comm;
  if (color != NCCL_SPLIT_NOCOLOR) {
    if (color < 0)
      return invalid(ncclInvalidArgument, "ncclCommSplit: a negative colour");
    auto *c = new ncclComm;
    c->s = child = std::make_shared<State>();
    owner = c;
  }
  ++owner->s->setups;
  if (nonBlocking(config)) {
    // NCCL's order: the parent busy until the child's handle is out.
    p->result = ncclInProgress;
    owner->threads.emplace_back(splitInto, p, tag, color, key, child,
                                child ? owner : nullptr, newcomm);
    return ncclInProgress;
  }
  splitInto(p, tag, color, key, child, nullptr, nullptr);
  *newcomm = child ? owner : nullptr;
  return child ? ncclResult_t(child->result.load())
               : ncclResult_t(p->result.load());
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state) {
  if (!comm)
    return ncclInvalidArgument;
  *state = ncclResult_t(comm->s->result.load());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (!comm)
    return ncclInvalidArgument;
  *count = comm->s->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (!comm)
    return ncclInvalidArgument;
  *rank = comm->s->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  if (!comm)
    return ncclInvalidArgument;
  *device = 0;
  return cudaGetDevice(device) == cudaSuccess ? ncclSuccess
                                              : ncclUnhandledCudaError;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  // The stream tasks own what they use; nothing is left to flush.
  return comm ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm)
    return ncclInvalidArgument;
  comm->join();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  comm->s->aborted = true;
  comm->join();
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0)
    return invalid(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--groupDepth > 0)
    return ncclSuccess;
  // One task per communicator and stream, its operations in issue order.
  std::vector<Pending> all;
  all.swap(pending);
  std::vector<bool> taken(all.size(), false);
  for (size_t i = 0; i < all.size(); ++i) {
    if (taken[i])
      continue;
    std::vector<P2p> ops;
    for (size_t j = i; j < all.size(); ++j)
      if (!taken[j] && all[j].s == all[i].s && all[j].stream == all[i].stream) {
        ops.push_back(all[j].op);
        taken[j] = true;
      }
    submitP2p(all[i].s, all[i].stream, std::move(ops));
  }
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return p2p(true, const_cast<void *>(sendbuff), count, datatype, peer, comm,
             stream, "ncclSend");
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  return p2p(false, recvbuff, count, datatype, peer, comm, stream, "ncclRecv");
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(Coll::AllReduce, sendbuff, recvbuff, count, datatype, op,
                    comm, stream, "ncclAllReduce");
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return collective(Coll::ReduceScatter, sendbuff, recvbuff, recvcount,
                    datatype, op, comm, stream, "ncclReduceScatter");
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective(Coll::AllGather, sendbuff, recvbuff, sendcount, datatype,
                    ncclSum, comm, stream, "ncclAllGather");
}

} // extern "C"
