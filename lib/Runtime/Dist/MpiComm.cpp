//===- MpiComm.cpp - the Communicator over MPI ----------------------------===//

#include "MpiComm.h"

#include "lamina/Schedule/StepBuffers.h"

#include <algorithm>
#include <climits>
#include <cstring>

using namespace lamina::rt;
using namespace lamina::rt::dist;

// The capacities are the compiler's (schedule::shardCapacity), which sized
// ZeRO's slots in the step buffer from them.
ShardLayout lamina::rt::dist::evenShards(int64_t total, int parts) {
  ShardLayout l;
  splitCounts(total, parts, l.counts, l.offsets);
  schedule::ShardCapacity cap = schedule::shardCapacity(total, parts, false);
  l.fullCapacity = cap.full;
  l.shardCapacity = cap.shard;
  return l;
}

ShardLayout lamina::rt::dist::paddedShards(int64_t total, int parts) {
  ShardLayout l;
  schedule::ShardCapacity cap = schedule::shardCapacity(total, parts, true);
  for (int i = 0; i < parts; ++i) {
    int64_t lo = std::min(total, cap.shard * i),
            hi = std::min(total, lo + cap.shard);
    l.counts.push_back(int(hi - lo));
    l.offsets.push_back(int(cap.shard * i));
  }
  l.fullCapacity = cap.full;
  l.shardCapacity = cap.shard;
  return l;
}

MpiCommunicator::MpiCommunicator(Comm &comm, Device &device)
    : comm(comm), device(device), staged(!device.isHost()) {
  groups.push_back(MPI_COMM_WORLD);
}

MpiCommunicator::~MpiCommunicator() {
  for (size_t i = 1; i < groups.size(); ++i)
    if (groups[i] != MPI_COMM_NULL)
      MPI_Comm_free(&groups[i]);
}

Status MpiCommunicator::split(int color, int key, int &group) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &c);
  if (c == MPI_COMM_NULL) {
    group = -1;
    return Status::success();
  }
  group = int(groups.size());
  groups.push_back(c);
  return Status::success();
}

int MpiCommunicator::groupSize(int group) const {
  return commSize(groups.at(size_t(group)));
}

Request MpiCommunicator::add(Op op) {
  Request r{nextId++};
  ops.emplace(r.id, std::move(op));
  counters();
  return r;
}

Status MpiCommunicator::stage(Op &op, const void *p, size_t bytes,
                              char *&host) {
  if (!staged) {
    host = static_cast<char *>(const_cast<void *>(p));
    return Status::success();
  }
  size_t at = op.host.size();
  op.host.resize(at + bytes);
  host = op.host.data() + at;
  return bytes ? device.download(host, p, bytes) : Status::success();
}

Status MpiCommunicator::stageInPlace(Op &op, void *p, size_t bytes,
                                     char *&host) {
  if (Status s = stage(op, p, bytes, host); !s.ok())
    return s;
  if (staged)
    op.deviceResult = p, op.resultBytes = bytes;
  return Status::success();
}

Status MpiCommunicator::isend(const void *buf, size_t bytes, int peer,
                              int tag, Request &out) {
  Op op;
  char *h;
  if (Status s = stage(op, buf, bytes, h); !s.ok())
    return s;
  op.req = comm.isend(h, bytes, peer, tag);
  out = add(std::move(op));
  return Status::success();
}

Status MpiCommunicator::irecv(void *buf, size_t bytes, int peer, int tag,
                              Request &out) {
  Op op;
  char *h = static_cast<char *>(buf);
  if (staged) {
    op.host.resize(bytes);
    h = op.host.data();
    op.deviceResult = buf, op.resultBytes = bytes;
  }
  op.req = comm.irecv(h, bytes, peer, tag);
  out = add(std::move(op));
  return Status::success();
}

Status MpiCommunicator::reduce(float *buf, int64_t count, int group, MPI_Op op,
                               Request &out) {
  Op pending;
  char *h;
  size_t bytes = size_t(count) * sizeof(float);
  if (Status s = stageInPlace(pending, buf, bytes, h); !s.ok())
    return s;
  pending.req = comm.iallreduce(reinterpret_cast<float *>(h), count,
                                groups.at(size_t(group)), op);
  out = add(std::move(pending));
  return Status::success();
}

Status MpiCommunicator::allReduce(float *buf, int64_t count, int group,
                                  Request &out) {
  return reduce(buf, count, group, MPI_SUM, out);
}

Status MpiCommunicator::allReduceMax(float *buf, int64_t count, int group,
                                     Request &out) {
  return reduce(buf, count, group, MPI_MAX, out);
}

Status MpiCommunicator::allReduceDouble(double *buf, int count, int group,
                                        Request &out) {
  Op op;
  char *h;
  size_t bytes = size_t(count) * sizeof(double);
  if (Status s = stageInPlace(op, buf, bytes, h); !s.ok())
    return s;
  op.req = comm.iallreduceDouble(reinterpret_cast<double *>(h), count,
                                 groups.at(size_t(group)));
  out = add(std::move(op));
  return Status::success();
}

Status MpiCommunicator::reduceScatter(const float *send, float *recv,
                                      const ShardLayout &layout, int group,
                                      Request &out) {
  MPI_Comm c = groups.at(size_t(group));
  int me = commRank(c);
  Op op;
  size_t total = size_t(layout.fullCapacity) * sizeof(float);
  size_t mine = size_t(layout.counts[size_t(me)]) * sizeof(float);
  char *hs, *hr = reinterpret_cast<char *>(recv);
  if (Status s = stage(op, send, total, hs); !s.ok())
    return s;
  // MPI's buffers may not overlap: an in-place call (recv within send) on
  // the host gets its shard in op.host, copied to recv when it completes.
  const char *from = reinterpret_cast<const char *>(send);
  bool overlaps = hr >= from && hr < from + total;
  if (staged || overlaps) {
    size_t at = staged ? total : 0;
    op.host.resize(at + mine);
    hs = staged ? op.host.data() : hs;
    hr = op.host.data() + at;
    op.deviceResult = recv, op.resultOffset = at, op.resultBytes = mine;
  }
  op.req = comm.ireduceScatter(reinterpret_cast<const float *>(hs),
                               reinterpret_cast<float *>(hr), layout.counts, c);
  out = add(std::move(op));
  return Status::success();
}

Status MpiCommunicator::allGather(void *buf, DType type,
                                  const ShardLayout &layout, int group,
                                  Request &out) {
  if (Status s = gatherable(type); !s.ok())
    return s;
  Op op;
  char *h;
  size_t bytes = size_t(layout.fullCapacity) * dtypeSize(type);
  if (Status s = stageInPlace(op, buf, bytes, h); !s.ok())
    return s;
  // A gather moves bits: any 2-byte MPI type carries bf16 and f16.
  op.req = comm.iallgather(h, type == DType::F32 ? MPI_FLOAT : MPI_UINT16_T,
                           int(dtypeSize(type)), layout.counts, layout.offsets,
                           groups.at(size_t(group)));
  out = add(std::move(op));
  return Status::success();
}

Status MpiCommunicator::allToAll(const void *send,
                                 const std::vector<int> &sendBytes,
                                 const std::vector<int> &sendOffsets,
                                 void *recv, const std::vector<int> &recvBytes,
                                 const std::vector<int> &recvOffsets, int group,
                                 Request &out) {
  if (staged)
    return Status::error("the all-to-all of expert parallelism runs on the "
                         "host only");
  Op op;
  MPI_Ialltoallv(send, sendBytes.data(), sendOffsets.data(), MPI_BYTE, recv,
                 recvBytes.data(), recvOffsets.data(), MPI_BYTE,
                 groups.at(size_t(group)), &op.req);
  out = add(std::move(op));
  return Status::success();
}

Status MpiCommunicator::finish(std::map<int64_t, Op>::iterator it) {
  Op &op = it->second;
  Status s = Status::success();
  if (op.deviceResult && op.resultBytes)
    s = device.upload(op.deviceResult, op.host.data() + op.resultOffset,
                      op.resultBytes);
  ops.erase(it);
  return s;
}

Status MpiCommunicator::wait(Request &r, const std::string &what,
                             const std::string &hint) {
  auto it = ops.find(r.id);
  if (it == ops.end())
    return Status::error("internal: waiting for an unknown request");
  comm.waitOrAbort(it->second.req, what, hint);
  r = Request{};
  return finish(it);
}

Status MpiCommunicator::test(Request &r, bool &done) {
  auto it = ops.find(r.id);
  if (it == ops.end())
    return Status::error("internal: testing an unknown request");
  int flag = 0;
  MPI_Test(&it->second.req, &flag, MPI_STATUS_IGNORE);
  done = flag != 0;
  if (!done)
    return Status::success();
  r = Request{};
  return finish(it);
}
