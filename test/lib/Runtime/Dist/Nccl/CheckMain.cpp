//===- CheckMain.cpp - lamina-nccl-check ----------------------------------===//
//
// Runs every lamina_nccl operation on known data on 1..N GPUs (one rank per
// GPU; started alone, by mpirun, or with torchrun-style / srun variables)
// and compares the results on the host, then overlaps a dummy compute
// kernel with a large all-reduce and prints the measured overlap.
// docs/cuda.md, "NCCL and streams"; test/Runtime/Dist/Nccl/nccl-*.test.
//
// Exit codes: 0 every check passed on every rank, 1 an error or a failed
// check (its message on stderr), 2 a bad flag.
//
//===----------------------------------------------------------------------===//

#include "CheckKernels.h"

#include "lamina/Runtime/Dist/Nccl.h"
#include "lamina/Runtime/Math.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::dist::nccl;

namespace {

struct Options {
  WorldOptions world;
  int gridPp = 0, gridDp = 0; ///< --print-grid: no device, no launcher
  /// --comm-timeout: every wait for an operation. The bootstrap, NCCL
  /// initialisation and the splits use --init-timeout (world.timeoutSeconds,
  /// 120 s by default: NCCL's topology detection can take seconds).
  double commTimeout = 60;
  int pp = 0;                  ///< 0: 2 when the world size is even, else 1
  size_t bigCount = 64u << 20; ///< all-reduce elements for the overlap
  bool overlap = true;
  int faultRank = -1;
};

[[noreturn]] void usage(int code) {
  std::fprintf(
      code ? stderr : stdout,
      "usage: lamina-nccl-check [--pp P] [--comm-timeout S] [--init-timeout S] "
      "[--bootstrap auto|mpi|env] [--device D] [--overlap-count N] "
      "[--no-overlap] [--fault-rank R] | --print-grid PP DP\n"
      "Checks lamina_nccl's operations on every rank's GPU (one "
      "rank per GPU; alone, under mpirun, or with torchrun-style "
      "RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT; the id "
      "travels on MASTER_PORT + 1 or LAMINA_CONTROL_PORT).\n"
      "--fault-rank R: after the checks, rank R skips an all-reduce "
      "the others issue; they must report the timeout and exit 1.\n"
      "--print-grid PP DP: prints and checks the communicator "
      "splits of that grid (no GPU needed) and exits.\n");
  std::exit(code);
}

bool parseLong(const char *text, long lo, long hi, long &out) {
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || errno || v < lo || v > hi)
    return false;
  out = v;
  return true;
}

void parse(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char * {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "lamina-nccl-check: error: %s needs a value\n",
                     a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto bad = [&](const char *v) {
      std::fprintf(stderr, "lamina-nccl-check: error: %s %s is not valid\n",
                   a.c_str(), v);
      std::exit(2);
    };
    long n;
    if (a == "--help" || a == "-h")
      usage(0);
    else if (a == "--pp") {
      const char *v = value();
      if (!parseLong(v, 1, 1 << 20, n))
        bad(v);
      o.pp = int(n);
    } else if (a == "--comm-timeout" || a == "--init-timeout") {
      const char *v = value();
      char *end = nullptr;
      double t = std::strtod(v, &end);
      if (!*v || *end || !(t > 0) || !std::isfinite(t))
        bad(v);
      (a == "--comm-timeout" ? o.commTimeout : o.world.timeoutSeconds) = t;
    } else if (a == "--bootstrap") {
      const char *v = value();
      if (!parseBootstrap(v, o.world.bootstrap))
        bad(v);
    } else if (a == "--device") {
      const char *v = value();
      if (!parseLong(v, 0, 1 << 20, n))
        bad(v);
      o.world.device = int(n);
    } else if (a == "--overlap-count") {
      const char *v = value();
      if (!parseLong(v, 1, 1L << 32, n))
        bad(v);
      o.bigCount = size_t(n);
    } else if (a == "--print-grid") {
      const char *v = value();
      const char *w = value();
      long d = 0;
      if (!parseLong(v, 1, 4096, n) || !parseLong(w, 1, 4096, d))
        bad(v);
      o.gridPp = int(n);
      o.gridDp = int(d);
    } else if (a == "--no-overlap")
      o.overlap = false;
    else if (a == "--fault-rank") {
      const char *v = value();
      if (!parseLong(v, 0, 1 << 30, n))
        bad(v);
      o.faultRank = int(n);
    } else {
      std::fprintf(stderr, "lamina-nccl-check: error: unknown flag %s\n",
                   a.c_str());
      usage(2);
    }
  }
}

/// A device allocation freed on scope exit.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (p_)
      (void)cudaFree(p_);
  }
  Status allocate(size_t bytes) {
    cudaError_t e = cudaMalloc(&p_, bytes ? bytes : 1);
    if (e != cudaSuccess) {
      p_ = nullptr;
      return Status::error(cudaText("cudaMalloc", e) + " (" +
                           std::to_string(bytes) + " bytes)");
    }
    return Status::success();
  }
  template <typename T> T *as() const { return static_cast<T *>(p_); }

private:
  void *p_ = nullptr;
};

#define TRY(expr)                                                              \
  do {                                                                         \
    if (Status s_ = (expr); !s_.ok())                                          \
      return s_;                                                               \
  } while (0)

Status cudaTry(const char *call, cudaError_t e) {
  if (e != cudaSuccess)
    return Status::error(cudaText(call, e));
  return Status::success();
}

struct Check {
  NcclGroups &groups;
  CommStreams &streams;
  cudaStream_t compute;
  int rank; ///< world rank
  int size; ///< world size
  /// The ring volumes and p2p bytes the operations run so far should have
  /// counted, per channel (checked against the counters at the end).
  double expectWorldColl = 0, expectDpColl = 0;
  uint64_t expectWorldP2p = 0, expectPipeP2p = 0;

  template <typename T> Status upload(T *dev, const std::vector<T> &host) {
    return cudaTry("cudaMemcpyAsync (host to device)",
                   cudaMemcpyAsync(dev, host.data(), host.size() * sizeof(T),
                                   cudaMemcpyHostToDevice, compute));
  }
  /// Waits for the compute stream (bounded) and copies back.
  template <typename T>
  Status download(std::vector<T> &host, const T *dev, const char *what) {
    TRY(streams.syncStream(compute, what));
    return cudaTry("cudaMemcpy (device to host)",
                   cudaMemcpy(host.data(), dev, host.size() * sizeof(T),
                              cudaMemcpyDeviceToHost));
  }
  Status finishOp(CommHandle &h) { return streams.wait(h, compute); }
};

Status compare(const std::vector<float> &got, const std::vector<float> &expect,
               const std::string &what) {
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != expect[i]) {
      char buf[160];
      std::snprintf(buf, sizeof buf, ": element %zu is %.9g, expected %.9g", i,
                    double(got[i]), double(expect[i]));
      return Status::error(what + buf);
    }
  return Status::success();
}

double ringAllReduce(int n, size_t bytes) {
  return 2.0 * (n - 1) / n * double(bytes);
}
double ringGather(int n, size_t bytes) {
  return double(n - 1) / n * double(bytes);
}

//===----------------------------------------------------------------------===//
// The checks
//===----------------------------------------------------------------------===//

Status allReduceF32(Check &c, Channel &ch, size_t count, bool inPlace) {
  const int n = ch.size, r = ch.rank;
  std::vector<float> in(count), out(count), expect(count);
  for (size_t i = 0; i < count; ++i) {
    in[i] = float(r + 1) + float(i % 13) * 0.5f;
    expect[i] = float(n * (n + 1) / 2) + float(n) * float(i % 13) * 0.5f;
  }
  DeviceBuffer send, recv;
  TRY(send.allocate(count * 4));
  TRY(recv.allocate(count * 4));
  TRY(c.upload(send.as<float>(), in));
  float *dst = inPlace ? send.as<float>() : recv.as<float>();
  CommHandle h;
  TRY(c.streams.allReduce(ch, send.as<float>(), dst, count, DType::F32,
                          c.compute, h));
  TRY(c.finishOp(h));
  TRY(c.download(out, dst, "all-reduce check"));
  (&ch == &c.groups.world ? c.expectWorldColl : c.expectDpColl) +=
      ringAllReduce(n, count * 4);
  return compare(out, expect, "all-reduce f32 on " + ch.name);
}

Status allReduceBf16(Check &c, Channel &ch, size_t count) {
  const int n = ch.size, r = ch.rank;
  // Small integers: every partial sum is exact in bf16 (8 significant bits)
  // for up to 8 ranks, whatever order NCCL adds in.
  std::vector<uint16_t> in(count), out(count);
  std::vector<float> got(count), expect(count);
  for (size_t i = 0; i < count; ++i) {
    in[i] = math::floatToBf16(float((r % 8) + 1 + int(i % 5)));
    double e = 0;
    for (int q = 0; q < n; ++q)
      e += (q % 8) + 1 + int(i % 5);
    expect[i] = math::bf16ToFloat(math::floatToBf16(float(e)));
  }
  DeviceBuffer buf;
  TRY(buf.allocate(count * 2));
  TRY(c.upload(buf.as<uint16_t>(), in));
  CommHandle h;
  TRY(c.streams.allReduce(ch, buf.as<uint16_t>(), buf.as<uint16_t>(), count,
                          DType::BF16, c.compute, h));
  TRY(c.finishOp(h));
  TRY(c.download(out, buf.as<uint16_t>(), "bf16 all-reduce check"));
  (&ch == &c.groups.world ? c.expectWorldColl : c.expectDpColl) +=
      ringAllReduce(n, count * 2);
  for (size_t i = 0; i < count; ++i)
    got[i] = math::bf16ToFloat(out[i]);
  // Exact when n <= 8 (sums below 256 of integers); beyond, one rounding.
  if (n <= 8)
    return compare(got, expect, "all-reduce bf16 on " + ch.name);
  for (size_t i = 0; i < count; ++i)
    if (std::fabs(got[i] - expect[i]) > 0.02f * std::fabs(expect[i]))
      return compare(got, expect, "all-reduce bf16 on " + ch.name);
  return Status::success();
}

Status reduceScatterF32(Check &c, Channel &ch, size_t per, bool inPlace) {
  const int n = ch.size, r = ch.rank;
  size_t total = per * size_t(n);
  std::vector<float> in(total), out(per), expect(per);
  for (size_t j = 0; j < total; ++j)
    in[j] = float(r + 1) * 2.0f + float(j % 11);
  for (size_t i = 0; i < per; ++i) {
    size_t j = size_t(r) * per + i;
    expect[i] = float(n * (n + 1)) + float(n) * float(j % 11);
  }
  DeviceBuffer send, recv;
  TRY(send.allocate(total * 4));
  TRY(recv.allocate(per * 4));
  TRY(c.upload(send.as<float>(), in));
  float *dst = inPlace ? send.as<float>() + size_t(r) * per : recv.as<float>();
  CommHandle h;
  TRY(c.streams.reduceScatter(ch, send.as<float>(), dst, per, DType::F32,
                              c.compute, h));
  TRY(c.finishOp(h));
  TRY(c.download(out, dst, "reduce-scatter check"));
  (&ch == &c.groups.world ? c.expectWorldColl : c.expectDpColl) +=
      ringGather(n, total * 4);
  return compare(out, expect,
                 std::string("reduce-scatter f32 ") +
                     (inPlace ? "in place " : "") + "on " + ch.name);
}

Status allGatherF32(Check &c, Channel &ch, size_t per, bool inPlace) {
  const int n = ch.size, r = ch.rank;
  size_t total = per * size_t(n);
  std::vector<float> mine(per), out(total), expect(total);
  for (size_t i = 0; i < per; ++i)
    mine[i] = float(r) * 10000.0f + float(i % 1000) + 0.5f;
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < per; ++i)
      expect[size_t(q) * per + i] =
          float(q) * 10000.0f + float(i % 1000) + 0.5f;
  DeviceBuffer send, recv;
  TRY(send.allocate(per * 4));
  TRY(recv.allocate(total * 4));
  // Poison the result so stale memory cannot pass.
  TRY(cudaTry("cudaMemsetAsync",
              cudaMemsetAsync(recv.as<float>(), 0xff, total * 4, c.compute)));
  float *src = send.as<float>();
  if (inPlace) {
    src = recv.as<float>() + size_t(r) * per;
    TRY(c.upload(src, mine));
  } else {
    TRY(c.upload(src, mine));
  }
  CommHandle h;
  TRY(c.streams.allGather(ch, src, recv.as<float>(), per, DType::F32, c.compute,
                          h));
  TRY(c.finishOp(h));
  TRY(c.download(out, recv.as<float>(), "all-gather check"));
  (&ch == &c.groups.world ? c.expectWorldColl : c.expectDpColl) +=
      ringGather(n, total * 4);
  return compare(out, expect,
                 std::string("all-gather f32 ") + (inPlace ? "in place " : "") +
                     "on " + ch.name);
}

Status ring(Check &c, size_t count) {
  Channel &ch = c.groups.world;
  const int n = ch.size, r = ch.rank;
  int to = (r + 1) % n, from = (r - 1 + n) % n;
  std::vector<float> mine(count), out(count), expect(count);
  for (size_t i = 0; i < count; ++i) {
    mine[i] = float(r) * 1000.0f + float(i % 1000) + 0.25f;
    expect[i] = float(from) * 1000.0f + float(i % 1000) + 0.25f;
  }
  DeviceBuffer send, recv;
  TRY(send.allocate(count * 4));
  TRY(recv.allocate(count * 4));
  TRY(c.upload(send.as<float>(), mine));
  CommHandle h;
  TRY(c.streams.sendRecv(ch, send.as<float>(), count * 4, to, recv.as<float>(),
                         count * 4, from, c.compute, h));
  TRY(c.finishOp(h));
  TRY(c.download(out, recv.as<float>(), "send/recv ring check"));
  c.expectWorldP2p += count * 4;
  return compare(out, expect,
                 "send/recv ring on world (to rank " + std::to_string(to) +
                     ", from rank " + std::to_string(from) + ")");
}

/// Expert parallelism's exchange: rank r sends (r + q + 1) * unit floats
/// to each rank q (itself included; rank 0 nothing to the last), at q's
/// block of the send buffer, and receives each block at its offset.
Status allToAll(Check &c, size_t unit) {
  Channel &ch = c.groups.world;
  const int n = ch.size, r = ch.rank;
  const size_t block = size_t(2 * n) * unit;
  auto floats = [&](int from, int to) {
    return from == 0 && to == n - 1 && n > 1 ? size_t(0)
                                             : size_t(from + to + 1) * unit;
  };
  auto value = [](int from, int to, size_t i) {
    return float(from) * 1000.0f + float(to) * 100.0f + float(i % 97) + 0.5f;
  };
  const size_t members = static_cast<size_t>(n);
  std::vector<float> mine(members * block, 0.0f), out(members * block),
      expect(members * block, -1.0f);
  std::vector<size_t> sendBytes(members), recvBytes(members), offsets(members);
  for (int q = 0; q < n; ++q) {
    offsets[size_t(q)] = size_t(q) * block * 4;
    sendBytes[size_t(q)] = floats(r, q) * 4;
    recvBytes[size_t(q)] = floats(q, r) * 4;
    for (size_t i = 0; i < floats(r, q); ++i)
      mine[size_t(q) * block + i] = value(r, q, i);
    for (size_t i = 0; i < floats(q, r); ++i)
      expect[size_t(q) * block + i] = value(q, r, i);
  }
  DeviceBuffer send, recv;
  TRY(send.allocate(mine.size() * 4));
  TRY(recv.allocate(out.size() * 4));
  TRY(c.upload(send.as<float>(), mine));
  // -1 everywhere first: a transfer past its count would show.
  TRY(c.upload(recv.as<float>(), std::vector<float>(out.size(), -1.0f)));
  CommHandle h;
  TRY(c.streams.allToAll(ch, send.as<float>(), sendBytes, offsets,
                         recv.as<float>(), recvBytes, offsets, c.compute, h));
  TRY(c.finishOp(h));
  TRY(c.download(out, recv.as<float>(), "all-to-all check"));
  return compare(out, expect, "all-to-all on world");
}

/// Activations to the next stage and gradients to the previous one, at once
/// (as a 1F1B steady state does), each pair on its own communicator and
/// stream.
Status pipeline(Check &c, size_t count) {
  NcclGroups &g = c.groups;
  auto act = [](int worldRank, size_t i) {
    return float(worldRank) * 1000.0f + float(i % 1000);
  };
  auto grad = [](int worldRank, size_t i) {
    return -float(worldRank) * 1000.0f - float(i % 1000) - 0.5f;
  };
  std::vector<float> actOut(count), gradOut(count), actIn(count), gradIn(count);
  for (size_t i = 0; i < count; ++i) {
    actOut[i] = act(c.rank, i);
    gradOut[i] = grad(c.rank, i);
  }
  DeviceBuffer dActOut, dGradOut, dActIn, dGradIn;
  TRY(dActOut.allocate(count * 4));
  TRY(dGradOut.allocate(count * 4));
  TRY(dActIn.allocate(count * 4));
  TRY(dGradIn.allocate(count * 4));
  TRY(c.upload(dActOut.as<float>(), actOut));
  TRY(c.upload(dGradOut.as<float>(), gradOut));
  CommHandle hPrev, hNext;
  if (g.pipePrev.valid())
    TRY(c.streams.sendRecv(g.pipePrev, dGradOut.as<float>(), count * 4,
                           NcclGroups::peerRank(g.pipePrev), dActIn.as<float>(),
                           count * 4, NcclGroups::peerRank(g.pipePrev),
                           c.compute, hPrev));
  if (g.pipeNext.valid())
    TRY(c.streams.sendRecv(g.pipeNext, dActOut.as<float>(), count * 4,
                           NcclGroups::peerRank(g.pipeNext),
                           dGradIn.as<float>(), count * 4,
                           NcclGroups::peerRank(g.pipeNext), c.compute, hNext));
  if (hPrev.valid())
    TRY(c.finishOp(hPrev));
  if (hNext.valid())
    TRY(c.finishOp(hNext));
  if (g.pipePrev.valid()) {
    TRY(c.download(actIn, dActIn.as<float>(), "pipeline check"));
    std::vector<float> expect(count);
    for (size_t i = 0; i < count; ++i)
      expect[i] = act(c.rank - 1, i);
    TRY(compare(actIn, expect, "activation from the previous stage"));
    if (g.pipePrev.p2pBytesSent != count * 4)
      return Status::error(
          "pipe-prev counted " + std::to_string(g.pipePrev.p2pBytesSent) +
          " bytes sent, expected " + std::to_string(count * 4));
  }
  if (g.pipeNext.valid()) {
    TRY(c.download(gradIn, dGradIn.as<float>(), "pipeline check"));
    std::vector<float> expect(count);
    for (size_t i = 0; i < count; ++i)
      expect[i] = grad(c.rank + 1, i);
    TRY(compare(gradIn, expect, "gradient from the next stage"));
    if (g.pipeNext.p2pBytesSent != count * 4)
      return Status::error(
          "pipe-next counted " + std::to_string(g.pipeNext.p2pBytesSent) +
          " bytes sent, expected " + std::to_string(count * 4));
  }
  return Status::success();
}

Status counters(Check &c) {
  auto near = [](double a, double b) {
    return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b));
  };
  NcclGroups &g = c.groups;
  if (!near(g.world.collectiveBytes, c.expectWorldColl))
    return Status::error("world collective bytes " +
                         std::to_string(g.world.collectiveBytes) +
                         ", expected " + std::to_string(c.expectWorldColl));
  if (!near(g.dpGroup.collectiveBytes, c.expectDpColl))
    return Status::error("dp collective bytes " +
                         std::to_string(g.dpGroup.collectiveBytes) +
                         ", expected " + std::to_string(c.expectDpColl));
  if (g.world.p2pBytesSent != c.expectWorldP2p)
    return Status::error("world p2p bytes " +
                         std::to_string(g.world.p2pBytesSent) + ", expected " +
                         std::to_string(c.expectWorldP2p));
  return Status::success();
}

/// A handle is consumed by wait(): a second wait is an error, not a crash.
Status handles(Check &c) {
  DeviceBuffer buf;
  TRY(buf.allocate(1024 * 4));
  TRY(cudaTry("cudaMemsetAsync",
              cudaMemsetAsync(buf.as<float>(), 0, 1024 * 4, c.compute)));
  CommHandle h;
  TRY(c.streams.allReduce(c.groups.world, buf.as<float>(), buf.as<float>(),
                          1024, DType::F32, c.compute, h));
  c.expectWorldColl += ringAllReduce(c.groups.world.size, 1024 * 4);
  CommHandle copy = h;
  TRY(c.streams.waitHost(h));
  if (h.valid())
    return Status::error("waitHost left the handle valid");
  Status again = c.streams.wait(copy, c.compute);
  if (again.ok() ||
      again.message().find("invalid communication handle") == std::string::npos)
    return Status::error("waiting twice for a handle was not refused: " +
                         again.message());
  if (c.streams.outstanding() != 0)
    return Status::error(std::to_string(c.streams.outstanding()) +
                         " operations still outstanding");
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Overlap
//===----------------------------------------------------------------------===//

struct OverlapResult {
  double compute = 0, comm = 0, both = 0;
  int iterations = 0;
};

/// Aligns the ranks (a tiny all-reduce, waited for on the host).
Status align(Check &c, float *scratch) {
  CommHandle h;
  TRY(c.streams.allReduce(c.groups.world, scratch, scratch, 1, DType::F32,
                          c.compute, h));
  c.expectWorldColl += ringAllReduce(c.groups.world.size, 4);
  TRY(c.finishOp(h));
  return c.streams.syncStream(c.compute, "aligning the ranks");
}

Status overlap(Check &c, size_t bigCount, OverlapResult &res) {
  const size_t computeCount = 16u << 20;
  DeviceBuffer big, work, scratch;
  TRY(big.allocate(bigCount * 4));
  TRY(work.allocate(computeCount * 4));
  TRY(scratch.allocate(4));
  TRY(cudaTry("cudaMemsetAsync",
              cudaMemsetAsync(big.as<float>(), 0, bigCount * 4, c.compute)));
  TRY(cudaTry("cudaMemsetAsync", cudaMemsetAsync(work.as<float>(), 0,
                                                 computeCount * 4, c.compute)));
  TRY(cudaTry("cudaMemsetAsync",
              cudaMemsetAsync(scratch.as<float>(), 0, 4, c.compute)));
  Channel &w = c.groups.world;

  auto timeComm = [&](double &t) -> Status {
    TRY(align(c, scratch.as<float>()));
    double t0 = now();
    CommHandle h;
    TRY(c.streams.allReduce(w, big.as<float>(), big.as<float>(), bigCount,
                            DType::F32, c.compute, h));
    c.expectWorldColl += ringAllReduce(w.size, bigCount * 4);
    TRY(c.finishOp(h));
    TRY(c.streams.syncStream(c.compute, "timing the all-reduce"));
    t = now() - t0;
    return Status::success();
  };
  auto timeCompute = [&](int iterations, double &t) -> Status {
    TRY(align(c, scratch.as<float>()));
    double t0 = now();
    TRY(cudaTry("spin kernel launch",
                check::launchSpin(work.as<float>(), computeCount, iterations,
                                  c.compute)));
    TRY(c.streams.syncStream(c.compute, "timing the compute kernel"));
    t = now() - t0;
    return Status::success();
  };
  auto timeBoth = [&](int iterations, double &t) -> Status {
    TRY(align(c, scratch.as<float>()));
    double t0 = now();
    CommHandle h;
    // Issued first: the all-reduce waits only for what precedes it on the
    // compute stream, then runs beside the kernel enqueued after it.
    TRY(c.streams.allReduce(w, big.as<float>(), big.as<float>(), bigCount,
                            DType::F32, c.compute, h));
    c.expectWorldColl += ringAllReduce(w.size, bigCount * 4);
    TRY(cudaTry("spin kernel launch",
                check::launchSpin(work.as<float>(), computeCount, iterations,
                                  c.compute)));
    TRY(c.finishOp(h));
    TRY(c.streams.syncStream(c.compute, "timing compute with all-reduce"));
    t = now() - t0;
    return Status::success();
  };

  // Warm up both (NCCL sets up its rings on first use), then calibrate the
  // kernel to about the all-reduce's time; every rank uses rank-averaged
  // iterations so they run the same kernel.
  double t;
  TRY(timeComm(t));
  TRY(timeCompute(64, t));
  double comm = 1e30, base = 1e30;
  for (int k = 0; k < 3; ++k) {
    TRY(timeComm(t));
    comm = std::min(comm, t);
    TRY(timeCompute(64, t));
    base = std::min(base, t);
  }
  double want = std::max(comm, 0.005);
  double iters = std::clamp(64.0 * want / std::max(base, 1e-6), 1.0, 1.0e6);
  std::vector<float> host(1, float(std::floor(iters)));
  TRY(c.upload(scratch.as<float>(), host));
  {
    CommHandle h;
    TRY(c.streams.allReduce(w, scratch.as<float>(), scratch.as<float>(), 1,
                            DType::F32, c.compute, h));
    c.expectWorldColl += ringAllReduce(w.size, 4);
    TRY(c.finishOp(h));
    TRY(c.download(host, scratch.as<float>(), "sharing the kernel length"));
  }
  res.iterations = std::max(1, int(host[0] / float(w.size)));
  res.comm = comm;
  res.compute = res.both = 1e30;
  for (int k = 0; k < 3; ++k) {
    TRY(timeCompute(res.iterations, t));
    res.compute = std::min(res.compute, t);
    TRY(timeBoth(res.iterations, t));
    res.both = std::min(res.both, t);
  }
  // The all-reduces summed zeros: the buffer must still be zero.
  std::vector<float> sample(std::min<size_t>(bigCount, 1u << 20));
  TRY(c.download(sample, big.as<float>(), "overlap check"));
  for (size_t i = 0; i < sample.size(); ++i)
    if (sample[i] != 0.0f)
      return Status::error("the large all-reduce of zeros gave " +
                           std::to_string(sample[i]) + " at element " +
                           std::to_string(i));
  return Status::success();
}

/// --print-grid: every world rank's place and split colors, and a check
/// that the splits make the intended groups: each dp group is the replicas
/// of one stage in replica order, each pipeline pair is stages e and e+1 of
/// one replica with the lower stage first. No device is touched.
int printGrid(int pp, int dp) {
  const int n = pp * dp;
  std::vector<GridPlace> places;
  for (int g = 0; g < n; ++g)
    places.push_back(gridPlace(g, pp));
  const int splits = pipelineSplits(pp);
  std::printf("grid pp %d x dp %d: %d pipeline split%s\n", pp, dp, splits,
              splits == 1 ? "" : "s");
  for (int g = 0; g < n; ++g) {
    const GridPlace &p = places[size_t(g)];
    std::printf("rank %d: stage %d replica %d; dp color %d key %d", g, p.stage,
                p.replica, p.dpColor, p.dpKey);
    for (int parity = 0; parity < splits; ++parity) {
      if (p.edge[parity] < 0)
        std::printf("; %s: none", parity ? "odd" : "even");
      else
        std::printf("; %s: %s (color %d)", parity ? "odd" : "even",
                    p.edge[parity] == p.stage ? "next" : "prev",
                    p.edgeColor[parity]);
    }
    std::printf("\n");
  }
  // The groups each split forms, members ordered by key as NCCL orders
  // them.
  std::string error;
  for (int g = 0; g < n && error.empty(); ++g) {
    const GridPlace &p = places[size_t(g)];
    std::vector<int> members;
    for (int q = 0; q < n; ++q)
      if (places[size_t(q)].dpColor == p.dpColor)
        members.push_back(q);
    std::sort(members.begin(), members.end(), [&](int a, int b) {
      return places[size_t(a)].dpKey < places[size_t(b)].dpKey;
    });
    if (int(members.size()) != dp)
      error = "the dp group of rank " + std::to_string(g) + " has " +
              std::to_string(members.size()) + " members";
    for (int r = 0; r < int(members.size()) && error.empty(); ++r)
      if (members[size_t(r)] != r * pp + p.stage)
        error = "dp rank " + std::to_string(r) + " of stage " +
                std::to_string(p.stage) + " is world rank " +
                std::to_string(members[size_t(r)]);
    int pairs = 0;
    for (int parity = 0; parity < 2 && error.empty(); ++parity) {
      if (p.edge[parity] < 0)
        continue;
      ++pairs;
      if (parity >= splits) {
        error = "rank " + std::to_string(g) +
                " is in an edge of a split that does not happen";
        break;
      }
      std::vector<int> pair;
      for (int q = 0; q < n; ++q)
        if (places[size_t(q)].edgeColor[parity] == p.edgeColor[parity])
          pair.push_back(q);
      std::sort(pair.begin(), pair.end(), [&](int a, int b) {
        return places[size_t(a)].stage < places[size_t(b)].stage;
      });
      int e = p.edge[parity];
      if (pair.size() != 2 || pair[0] != p.replica * pp + e ||
          pair[1] != p.replica * pp + e + 1)
        error = "the pipeline pair of rank " + std::to_string(g) + " (edge " +
                std::to_string(e) + ") is wrong";
    }
    int expect = (p.stage > 0 ? 1 : 0) + (p.stage + 1 < pp ? 1 : 0);
    if (error.empty() && pairs != expect)
      error = "rank " + std::to_string(g) + " is in " + std::to_string(pairs) +
              " pipeline pairs, not " + std::to_string(expect);
  }
  if (!error.empty()) {
    std::fprintf(stderr, "lamina-nccl-check: error: grid: %s\n", error.c_str());
    return 1;
  }
  std::printf("grid pp %d x dp %d: ok\n", pp, dp);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  o.world.timeoutSeconds = 120;
  parse(argc, argv, o);
  if (o.gridPp)
    return printGrid(o.gridPp, o.gridDp);

  ncclComm_t worldComm = nullptr;
  WorldInfo info;
  if (Status s = ncclWorld(o.world, worldComm, info); !s.ok()) {
    // The rank is known once the launcher was read.
    std::string who = info.bootstrap.empty()
                          ? ""
                          : "rank " + std::to_string(info.rank) + ": ";
    std::fprintf(stderr, "lamina-nccl-check: error: %s%s\n", who.c_str(),
                 s.message().c_str());
    return 1;
  }
  const int rank = info.rank, size = info.size;
  auto fail = [&](const std::string &message) {
    std::fflush(stdout);
    std::fprintf(stderr, "lamina-nccl-check: error: rank %d: %s\n", rank,
                 message.c_str());
    std::fflush(stderr);
    // Exit without tearing down: communicators may be stuck or aborted, and
    // MPI_Finalize would wait for ranks that are not coming.
    std::_Exit(1);
  };

  int pp = o.pp ? o.pp : (size % 2 == 0 ? 2 : 1);
  if (size % pp != 0)
    fail("--pp " + std::to_string(pp) + " does not divide the world of " +
         std::to_string(size) + " ranks");
  if (o.faultRank >= 0 && (size < 2 || o.faultRank >= size))
    fail("--fault-rank " + std::to_string(o.faultRank) +
         " needs a world of at least 2 ranks that contains it");
  int dp = size / pp;

  NcclGroups groups;
  if (Status s =
          NcclGroups::create(worldComm, pp, dp, o.world.timeoutSeconds, groups);
      !s.ok())
    fail(s.message());
  CommStreams streams(groups, o.commTimeout);

  cudaDeviceProp prop;
  std::memset(&prop, 0, sizeof prop);
  if (cudaError_t e = cudaGetDeviceProperties(&prop, info.device);
      e != cudaSuccess)
    fail(cudaText("cudaGetDeviceProperties", e));
  int ncclVersion = 0;
  if (ncclResult_t r = ncclGetVersion(&ncclVersion); r != ncclSuccess)
    fail(ncclText("ncclGetVersion", r, nullptr));
  int least = 0, greatest = 0;
  if (cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
      e != cudaSuccess)
    fail(cudaText("cudaDeviceGetStreamPriorityRange", e));
  if (rank == 0)
    std::printf("nccl-check: %d rank%s (bootstrap %s, launcher %s), pp %d x "
                "dp %d, NCCL %d, rank 0 on device %d (%s); comm streams "
                "priority %d, compute %d\n",
                size, size == 1 ? "" : "s", info.bootstrap.c_str(),
                info.launcher.c_str(), pp, dp, ncclVersion, info.device,
                prop.name, greatest, least);
  std::fflush(stdout);

  cudaStream_t compute = nullptr;
  if (cudaError_t e =
          cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking);
      e != cudaSuccess)
    fail(cudaText("cudaStreamCreateWithFlags (compute)", e));

  Check c{groups, streams, compute, rank, size};
  struct Case {
    const char *name;
    Status (*run)(Check &);
  };
  const Case cases[] = {
      {"all-reduce f32 world, in place",
       [](Check &c) {
         return allReduceF32(c, c.groups.world, (1u << 20) + 3, true);
       }},
      {"all-reduce f32 world, out of place",
       [](Check &c) { return allReduceF32(c, c.groups.world, 65537, false); }},
      {"all-reduce bf16 world",
       [](Check &c) { return allReduceBf16(c, c.groups.world, 65537); }},
      {"all-reduce f32 dp group",
       [](Check &c) {
         return allReduceF32(c, c.groups.dpGroup, 100003, true);
       }},
      {"reduce-scatter f32 world",
       [](Check &c) {
         return reduceScatterF32(c, c.groups.world, 4099, false);
       }},
      {"reduce-scatter f32 dp group, in place",
       [](Check &c) {
         return reduceScatterF32(c, c.groups.dpGroup, 4099, true);
       }},
      {"all-gather f32 world",
       [](Check &c) { return allGatherF32(c, c.groups.world, 4099, false); }},
      {"all-gather f32 dp group, in place",
       [](Check &c) { return allGatherF32(c, c.groups.dpGroup, 4099, true); }},
      {"send/recv ring world", [](Check &c) { return ring(c, 300001); }},
      {"pipeline neighbours", [](Check &c) { return pipeline(c, 250007); }},
      {"all-to-all world", [](Check &c) { return allToAll(c, 1001); }},
      {"handles", [](Check &c) { return handles(c); }},
  };
  for (const Case &k : cases) {
    if (Status s = k.run(c); !s.ok())
      fail(std::string(k.name) + ": " + s.message());
    if (rank == 0)
      std::printf("ok: %s\n", k.name);
    std::fflush(stdout);
  }

  if (o.overlap) {
    OverlapResult res;
    if (Status s = overlap(c, o.bigCount, res); !s.ok())
      fail("overlap: " + s.message());
    if (rank == 0 && size == 1) {
      // One rank's all-reduce moves nothing (the H200 took 6 us for 256
      // MiB): a share of it "hidden" would mean nothing.
      std::printf("overlap: compute %.3f ms, all-reduce %.3f ms, both %.3f "
                  "ms: not measured on 1 rank (the all-reduce moves no "
                  "data)\n",
                  res.compute * 1e3, res.comm * 1e3, res.both * 1e3);
    } else if (rank == 0) {
      double shorter = std::min(res.compute, res.comm);
      double hidden = res.compute + res.comm - res.both;
      double bytes = double(o.bigCount) * 4;
      std::printf(
          "overlap: compute %.3f ms, all-reduce %.3f ms (%.0f MiB f32, %d "
          "rank%s, bus %.1f GB/s), both %.3f ms, sum %.3f ms: %.0f%% of the "
          "shorter hidden\n",
          res.compute * 1e3, res.comm * 1e3, bytes / (1 << 20), size,
          size == 1 ? "" : "s",
          res.comm > 0 ? ringAllReduce(size, size_t(bytes)) / res.comm / 1e9
                       : 0.0,
          res.both * 1e3, (res.compute + res.comm) * 1e3,
          shorter > 0 ? 100.0 * hidden / shorter : 0.0);
    }
  }

  if (Status s = counters(c); !s.ok())
    fail("byte counters: " + s.message());
  if (rank == 0)
    std::printf("ok: byte counters (world %.0f collective bytes, %llu p2p "
                "bytes sent)\n",
                groups.world.collectiveBytes,
                (unsigned long long)groups.world.p2pBytesSent);

  if (o.faultRank >= 0) {
    // Every rank but faultRank issues an all-reduce; faultRank sleeps past
    // the timeout. The others must report it and exit 1.
    if (rank == o.faultRank) {
      std::this_thread::sleep_for(
          std::chrono::duration<double>(o.commTimeout * 2 + 10));
      std::_Exit(0);
    }
    DeviceBuffer buf;
    if (Status s = buf.allocate(4096); !s.ok())
      fail(s.message());
    CommHandle h;
    if (Status s =
            streams.allReduce(groups.world, buf.as<float>(), buf.as<float>(),
                              1024, DType::F32, compute, h);
        !s.ok())
      fail(s.message());
    if (Status s = streams.waitHost(h); !s.ok())
      fail(s.message());
    fail("the all-reduce without rank " + std::to_string(o.faultRank) +
         " completed");
  }

  // Every rank passed every check (a rank that failed has exited, and the
  // others time out here): the sum of ones is the world size.
  {
    DeviceBuffer one;
    std::vector<float> host(1, 1.0f);
    CommHandle h;
    Status s = one.allocate(4);
    if (s.ok())
      s = c.upload(one.as<float>(), host);
    if (s.ok())
      s = streams.allReduce(groups.world, one.as<float>(), one.as<float>(), 1,
                            DType::F32, compute, h);
    if (s.ok())
      s = streams.wait(h, compute);
    if (s.ok())
      s = c.download(host, one.as<float>(), "final agreement");
    if (!s.ok())
      fail("final agreement: " + s.message());
    if (host[0] != float(size))
      fail("final agreement: " + std::to_string(host[0]) + " of " +
           std::to_string(size) + " ranks passed");
  }
  if (Status s = streams.syncStream(compute, "final synchronisation"); !s.ok())
    fail(s.message());
  if (cudaError_t e = cudaStreamDestroy(compute); e != cudaSuccess)
    fail(cudaText("cudaStreamDestroy (compute)", e));
  if (Status s = groups.destroy(); !s.ok())
    fail(s.message());
  finalizeBootstrap(info);
  if (rank == 0)
    std::printf("nccl-check: all ok on %d rank%s\n", size,
                size == 1 ? "" : "s");
  return 0;
}
