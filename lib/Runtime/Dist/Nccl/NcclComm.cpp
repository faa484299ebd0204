//===- NcclComm.cpp - the Communicator over NCCL --------------------------===//
//
// lamina::rt::cuda::distTrainMain (Cuda/DistProgram.h): the distributed
// driver on the process's GPU with this data plane. The world communicator
// is bootstrapped over the host control plane (ControlPlane.h): MPI under
// mpirun or srun --mpi, the TCP star under torchrun-style launchers (no
// MPI at all, and no second rendezvous port); every group the executor
// splits and every
// directed point-to-point pair is a communicator of its own with its own
// stream (lamina_nccl's NcclGroups::addChannel). Operations order
// themselves after the compute stream's work (an event), and the compute
// stream waits for them by event (waitForCompute): nothing waits on the
// host in the steady state except sends being polled and the step's end
// (quiesce: the compute stream polled under --comm-timeout).
//
// NCCL matches the transfers between two ranks in order, not by tag: each
// direction of each pair has its own communicator (so an activation
// waiting for its receiver never blocks a gradient going the other way),
// and connect() checks that every rank sends in the order its peer
// receives -- true of every schedule lamina generates; a list that is not
// is refused at start-up rather than exchanging the wrong tensors.
//
//===----------------------------------------------------------------------===//

#include "../DistTrain.h"

#include "lamina/Runtime/Cuda/DistProgram.h"
#include "lamina/Runtime/Cuda/Generated.h"
#include "lamina/Runtime/Dist/Nccl.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

using namespace lamina::rt;
using namespace lamina::rt::dist;

namespace {

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(ControlPlane &control, Device &device)
      : control(control), device(device) {}
  ~NcclCommunicator() override {
    handles.clear();
    streams.reset();
    if (Status s = groups.destroy(); !s.ok())
      std::fprintf(stderr, "warning: rank %d: %s\n", control.rank(),
                   s.message().c_str());
  }

  Status init(double timeoutSeconds) {
    // Initialises the GPU: its error (no device, a bad LOCAL_RANK) first.
    if (Status s = device.synchronize(); !s.ok())
      return s;
    compute = cuda::deviceStream();
    if (!compute)
      return Status::error("no compute stream on " + device.describe());
    nccl::WorldOptions options;
    options.timeoutSeconds = timeoutSeconds;
    const char *local = std::getenv("LOCAL_RANK");
    options.device = local && *local ? std::atoi(local) : 0;
    if (std::strcmp(control.name(), "mpi") == 0) {
      options.bootstrap = nccl::Bootstrap::Mpi;
    } else {
      // The unique id travels on the control plane's connections.
      options.bootstrap = nccl::Bootstrap::Host;
      nccl::HostBootstrap &h = options.host;
      h.rank = control.rank();
      h.size = control.size();
      h.localRank = options.device;
      h.launcher = "torchrun-style";
      h.localRankVariable = "LOCAL_RANK";
      h.firstFailed = [this](bool ok) {
        return control.allMin(ok ? INT_MAX : control.rank(),
                              "agreeing on device selection did not complete",
                              "; a rank may have died");
      };
      h.broadcast = [this](void *data, size_t n) {
        control.broadcast(data, n,
                          "broadcasting the NCCL unique id did not complete");
      };
    }
    ncclComm_t world = nullptr;
    if (Status s = nccl::ncclWorld(options, world, info); !s.ok())
      return s;
    if (Status s = nccl::NcclGroups::create(world, 1, info.size, timeoutSeconds,
                                            groups);
        !s.ok())
      return s;
    streams = std::make_unique<nccl::CommStreams>(groups, timeoutSeconds);
    channels.push_back(&groups.world);
    return Status::success();
  }

  int rank() const override { return control.rank(); }
  int size() const override { return control.size(); }
  const char *name() const override { return "nccl"; }

  Status split(int color, int key, int &group) override {
    nccl::Channel *ch = nullptr;
    std::string name = "group " + std::to_string(channels.size());
    if (Status s = groups.addChannel(color, key, name, ch); !s.ok())
      return s;
    group = ch ? int(channels.size()) : -1;
    if (ch)
      channels.push_back(ch);
    return Status::success();
  }
  int groupSize(int group) const override {
    return channels.at(size_t(group))->size;
  }

  Status connect(const std::vector<std::pair<int, int>> &edges) override;

  ShardLayout shardLayout(int64_t total, int parts) const override {
    return paddedShards(total, parts);
  }

  Status isend(const void *buf, size_t bytes, int peer, int tag,
               Request &out) override {
    nccl::Channel *ch = pair(control.rank(), peer);
    if (!ch)
      return noPair("send to", peer, tag);
    nccl::CommHandle h;
    if (Status s = streams->send(*ch, buf, bytes, 1, compute, h); !s.ok())
      return s;
    p2pBytesSent += bytes;
    out = add(h);
    return Status::success();
  }
  Status irecv(void *buf, size_t bytes, int peer, int tag,
               Request &out) override {
    nccl::Channel *ch = pair(peer, control.rank());
    if (!ch)
      return noPair("receive from", peer, tag);
    nccl::CommHandle h;
    if (Status s = streams->recv(*ch, buf, bytes, 0, compute, h); !s.ok())
      return s;
    out = add(h);
    return Status::success();
  }
  Status allReduce(float *buf, int64_t count, int group,
                   Request &out) override {
    nccl::Channel &ch = *channels.at(size_t(group));
    nccl::CommHandle h;
    if (Status s = streams->allReduce(ch, buf, buf, size_t(count),
                                      nccl::DType::F32, compute, h);
        !s.ok())
      return s;
    collectiveBytes += 2.0 * (ch.size - 1) / ch.size * double(count) * 4;
    out = add(h);
    return Status::success();
  }
  Status allReduceMax(float *buf, int64_t count, int group,
                      Request &out) override {
    nccl::Channel &ch = *channels.at(size_t(group));
    nccl::CommHandle h;
    if (Status s = streams->allReduce(ch, buf, buf, size_t(count),
                                      nccl::DType::F32, compute, h,
                                      /*maximum=*/true);
        !s.ok())
      return s;
    collectiveBytes += 2.0 * (ch.size - 1) / ch.size * double(count) * 4;
    out = add(h);
    return Status::success();
  }
  Status allReduceDouble(double *buf, int count, int group,
                         Request &out) override {
    nccl::CommHandle h;
    if (Status s =
            streams->allReduce(*channels.at(size_t(group)), buf, buf,
                               size_t(count), nccl::DType::F64, compute, h);
        !s.ok())
      return s;
    out = add(h);
    return Status::success();
  }
  Status reduceScatter(const float *send, float *recv,
                       const ShardLayout &layout, int group,
                       Request &out) override {
    nccl::Channel &ch = *channels.at(size_t(group));
    nccl::CommHandle h;
    if (Status s =
            streams->reduceScatter(ch, send, recv, size_t(layout.shardCapacity),
                                   nccl::DType::F32, compute, h);
        !s.ok())
      return s;
    collectiveBytes += ringVolume(ch, layout);
    out = add(h);
    return Status::success();
  }
  Status allGather(void *buf, DType type, const ShardLayout &layout, int group,
                   Request &out) override {
    if (Status s = gatherable(type); !s.ok())
      return s;
    nccl::Channel &ch = *channels.at(size_t(group));
    nccl::CommHandle h;
    nccl::DType t = type == DType::BF16  ? nccl::DType::BF16
                    : type == DType::F16 ? nccl::DType::F16
                                         : nccl::DType::F32;
    char *base = static_cast<char *>(buf);
    if (Status s = streams->allGather(
            ch,
            base + size_t(ch.rank) * size_t(layout.shardCapacity) *
                       dtypeSize(type),
            buf, size_t(layout.shardCapacity), t, compute, h);
        !s.ok())
      return s;
    collectiveBytes += ringVolume(ch, layout, type);
    out = add(h);
    return Status::success();
  }

  /// Not counted in collectiveBytes: the expert-parallel group counts the
  /// rows it sends (CommExpertParallelGroup), as over MPI.
  Status allToAll(const void *send, const std::vector<int> &sendBytes,
                  const std::vector<int> &sendOffsets, void *recv,
                  const std::vector<int> &recvBytes,
                  const std::vector<int> &recvOffsets, int group,
                  Request &out) override {
    auto sizes = [](const std::vector<int> &v) {
      return std::vector<size_t>(v.begin(), v.end());
    };
    nccl::CommHandle h;
    if (Status s =
            streams->allToAll(*channels.at(size_t(group)), send,
                              sizes(sendBytes), sizes(sendOffsets), recv,
                              sizes(recvBytes), sizes(recvOffsets), compute, h);
        !s.ok())
      return s;
    out = add(h);
    return Status::success();
  }

  Status waitForCompute(Request &r, const std::string &what,
                        const std::string &) override {
    nccl::CommHandle h;
    if (Status s = take(r, h); !s.ok())
      return s;
    if (Status s = streams->wait(h, compute); !s.ok())
      return Status::error(what + ": " + s.message());
    return Status::success();
  }
  Status wait(Request &r, const std::string &what,
              const std::string &hint) override {
    nccl::CommHandle h;
    if (Status s = take(r, h); !s.ok())
      return s;
    if (Status s = streams->waitHost(h); !s.ok())
      return Status::error(what + hint + " (" + s.message() + ")");
    return Status::success();
  }
  Status test(Request &r, bool &done) override {
    auto it = handles.find(r.id);
    if (it == handles.end())
      return Status::error("internal: testing an unknown request");
    if (Status s = streams->test(it->second, done); !s.ok())
      return s;
    if (done) {
      handles.erase(it);
      r = Request{};
    }
    return Status::success();
  }
  Status quiesce(const std::string &what) override {
    return streams->syncStream(compute, what);
  }
  [[noreturn]] void abort(const std::string &message) override {
    groups.abortAll();
    control.abort(message);
    // ControlPlane::abort does not return; g++ does not carry [[noreturn]]
    // through the virtual call.
    std::abort();
  }

private:
  Request add(nccl::CommHandle h) {
    Request r{nextId++};
    handles.emplace(r.id, h);
    return r;
  }
  Status take(Request &r, nccl::CommHandle &h) {
    auto it = handles.find(r.id);
    if (it == handles.end())
      return Status::error("internal: waiting for an unknown request");
    h = it->second;
    handles.erase(it);
    r = Request{};
    return Status::success();
  }
  nccl::Channel *pair(int from, int to) {
    auto it = directed.find({from, to});
    return it == directed.end() ? nullptr : it->second;
  }
  Status noPair(const char *verb, int peer, int tag) {
    return Status::error("internal: a " + std::string(verb) + " rank " +
                         std::to_string(peer) + " (tag " + std::to_string(tag) +
                         ") the action lists do not contain");
  }
  /// (n-1)/n of the unpadded vector, as the MPI communicator counts.
  static double ringVolume(const nccl::Channel &ch, const ShardLayout &l,
                           DType type = DType::F32) {
    int64_t total = 0;
    for (int c : l.counts)
      total += c;
    return double(ch.size - 1) / ch.size * double(total) * dtypeSize(type);
  }

  ControlPlane &control;
  Device &device;
  cudaStream_t compute = nullptr;
  nccl::WorldInfo info;
  nccl::NcclGroups groups;
  std::unique_ptr<nccl::CommStreams> streams;
  std::vector<nccl::Channel *> channels; ///< by group id; 0 is the world
  std::map<std::pair<int, int>, nccl::Channel *> directed;
  std::map<int64_t, nccl::CommHandle> handles;
  int64_t nextId = 0;
};

Status
NcclCommunicator::connect(const std::vector<std::pair<int, int>> &edges) {
  // Rounds of disjoint pairs, the same on every rank: one split each.
  std::set<std::pair<int, int>> unique(edges.begin(), edges.end());
  std::vector<std::pair<int, int>> left(unique.begin(), unique.end());
  const int me = control.rank();
  DeviceBuffer byte;
  if (Status s = byte.allocate(device, 64); !s.ok())
    return s;
  while (!left.empty()) {
    std::set<int> busy;
    std::vector<std::pair<int, int>> round, rest;
    for (const auto &e : left) {
      if (busy.count(e.first) || busy.count(e.second)) {
        rest.push_back(e);
        continue;
      }
      busy.insert(e.first);
      busy.insert(e.second);
      round.push_back(e);
    }
    left = rest;
    int color = -1, key = 0;
    for (size_t i = 0; i < round.size(); ++i)
      if (round[i].first == me || round[i].second == me) {
        color = int(i);
        key = round[i].first == me ? 0 : 1;
      }
    nccl::Channel *ch = nullptr;
    std::string name =
        color < 0 ? "p2p (none)"
                  : "p2p " + std::to_string(round[size_t(color)].first) + ">" +
                        std::to_string(round[size_t(color)].second);
    if (Status s = groups.addChannel(color, key, name, ch); !s.ok())
      return s;
    if (!ch)
      continue;
    if (ch->size != 2)
      return Status::error(name + ": ncclCommSplit made a communicator of " +
                           std::to_string(ch->size) + " ranks, not 2");
    directed[round[size_t(color)]] = ch;
    // One byte now, so the connection exists before the first transfer
    // (setting it up waits for the peer on the host).
    nccl::CommHandle h;
    Status s = key == 0 ? streams->send(*ch, byte.data(), 1, 1, compute, h)
                        : streams->recv(*ch, byte.data(), 1, 0, compute, h);
    if (s.ok())
      s = streams->waitHost(h);
    if (!s.ok())
      return s;
  }
  return Status::success();
}

Status makeNccl(ControlPlane &control, Comm *, Device &device,
                double timeoutSeconds, std::unique_ptr<Communicator> &out) {
  auto c = std::make_unique<NcclCommunicator>(control, device);
  if (Status s = c->init(timeoutSeconds); !s.ok())
    return s;
  out = std::move(c);
  return Status::success();
}

} // namespace

int lamina::rt::cuda::distTrainMain(int argc, char **argv,
                                    const DistSpec &spec) {
  // cuda::device() takes the GPU LOCAL_RANK names: give it the launcher's
  // local rank (mpirun, MPICH's hydra, srun) when torchrun's is absent.
  if (!std::getenv("LOCAL_RANK"))
    for (const char *var :
         {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
      if (const char *v = std::getenv(var)) {
        ::setenv("LOCAL_RANK", v, 0);
        break;
      }
  return dist::distTrain(argc, argv, spec, cuda::device(), makeNccl,
                         /*dataNeedsMpi=*/false);
}
