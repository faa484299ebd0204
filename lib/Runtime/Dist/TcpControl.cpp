//===- TcpControl.cpp - the host control plane over TCP -------------------===//
//
// ControlPlane.h without MPI, for torchrun-style launches: every rank keeps
// one TCP connection to rank 0 (lamina_launch's connectStar on MASTER_ADDR
// and the control port), and every operation is a few framed messages on
// it -- rank 0 collects one frame from each rank (polling all of them at
// once, so the first dead peer is named, not the first slow one), computes,
// and answers. A star is enough: the control plane moves a few bytes per
// step; --export's parameters travel to rank 0 directly.
//
// Frames and waits are lamina_transport's (lamina/Runtime/Dist/Transport.h:
// a 16-byte header of kind, tag and length, then the payload). The ranks
// call the operations in the same order, so a frame of another kind or tag
// means they are out of step: an error, not a guess.
//
// Failures: a closed connection, a timeout, or a peer's abort frame print
// "error: rank G: <what>: <why>; rank R may have died" and abort, which
// sends an abort frame to the peers (best effort), closes every socket
// (peers blocked on them see it at once) and exits with 1.
//
//===----------------------------------------------------------------------===//

#include "ControlPlane.h"

#include "lamina/Runtime/Dist/Transport.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/socket.h>

using namespace lamina::rt;
using namespace lamina::rt::dist;
using namespace lamina::rt::dist::transport;

namespace {

enum Kind : uint32_t {
  kMin = 1,
  kMinResult,
  kSum,
  kSumResult,
  kGather,
  kBroadcast,
  kBytes,
  kAbort,
};

const char *kindName(uint32_t k) {
  switch (k) {
  case kMin:
  case kMinResult:
    return "all-min";
  case kSum:
  case kSumResult:
    return "all-sum";
  case kGather:
    return "gather";
  case kBroadcast:
    return "broadcast";
  case kBytes:
    return "host transfer";
  case kAbort:
    return "abort";
  }
  return "unknown message";
}

std::string rankText(int r) { return "rank " + std::to_string(r); }

class TcpControl final : public ControlPlane {
public:
  TcpControl(const LaunchEnv &env, int port, std::function<void()> beforeExit)
      : env(env), port(port), beforeExit(std::move(beforeExit)) {}

  int rank() const override { return env.rank; }
  int size() const override { return env.worldSize; }
  const char *name() const override { return "tcp"; }
  std::string launchHint(int n) const override {
    std::string k = std::to_string(n);
    return "launch " + k + " ranks (WORLD_SIZE=" + k +
           ", e.g. torchrun --nproc-per-node=" + k + " --no-python PROGRAM)";
  }

  Status connect(double timeoutSeconds) override {
    Status s =
        connectStar(env, port, kControlPlanePurpose, timeoutSeconds, links);
    if (!s.ok())
      return Status::error("the control plane's rendezvous: " + s.message());
    return s;
  }

  int allMin(int v, const std::string &what, const std::string &) override {
    unsigned char b[8];
    putBE(b, uint64_t(int64_t(v)), 8);
    std::string r = reduce(
        kMin, kMinResult, std::string((char *)b, 8), what,
        [](const std::vector<std::string> &all) {
          int64_t m = INT64_MAX;
          for (const std::string &s : all)
            m = std::min(m, int64_t(getBE((const unsigned char *)s.data(), 8)));
          return m;
        });
    return int(int64_t(getBE((const unsigned char *)r.data(), 8)));
  }

  double allSum(double v, const std::string &what,
                const std::string &) override {
    std::string mine(sizeof v, '\0');
    std::memcpy(mine.data(), &v, sizeof v);
    // Doubles go as host bytes: every rank is the same machine type. The
    // sum runs in rank order, so every run sums alike.
    auto sum = [](const std::vector<std::string> &all) {
      double t = 0;
      for (const std::string &s : all) {
        double x;
        std::memcpy(&x, s.data(), sizeof x);
        t += x;
      }
      int64_t bits;
      std::memcpy(&bits, &t, sizeof t);
      return bits;
    };
    std::string r = reduce(kSum, kSumResult, mine, what, sum);
    int64_t bits = int64_t(getBE((const unsigned char *)r.data(), 8));
    double out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
  }

  std::vector<std::string> gather(const std::string &mine) override {
    const std::string what =
        "gathering the ranks' reports to rank 0 did not complete";
    if (env.rank != 0) {
      sendFrame(0, {kGather, 0, mine.size()}, mine.data(), what);
      return {};
    }
    std::vector<std::string> all = collect(kGather, 0, what);
    all[0] = mine;
    return all;
  }

  void broadcast(void *data, size_t n, const std::string &what) override {
    if (env.rank == 0) {
      for (int r = 1; r < env.worldSize; ++r)
        sendFrame(r, {kBroadcast, 0, n}, data, what);
      return;
    }
    recvFrame(0, kBroadcast, 0, data, n, what);
  }

  void send(int to, int tag, const void *data, size_t n,
            const std::string &what) override {
    checkPair(to, what);
    sendFrame(to, {kBytes, uint32_t(tag), n}, data, what);
  }
  void recv(int from, int tag, void *data, size_t n,
            const std::string &what) override {
    checkPair(from, what);
    recvFrame(from, kBytes, uint32_t(tag), data, n, what);
  }

  void barrier() override { allMin(0, "the barrier did not complete", ""); }

  [[noreturn]] void abort(const std::string &message) override {
    std::fflush(stdout);
    std::fprintf(stderr, "error: rank %d: %s\n", env.rank, message.c_str());
    std::fflush(stderr);
    // Tell the peers why their connection ends (best effort: a frame that
    // does not fit the socket buffer now is dropped), then close, so every
    // rank blocked on this one sees it at once.
    unsigned char head[kFrameHeaderSize];
    packHeader({kAbort, uint32_t(env.rank), 0}, head);
    for (Socket &s : links)
      if (s.valid()) {
        (void)::send(s.fd(), head, kFrameHeaderSize,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(s.fd(), SHUT_RDWR);
        s.close();
      }
    if (beforeExit)
      beforeExit();
    std::_Exit(1);
  }

private:
  /// The socket to `peer` (rank 0: any other rank; others: rank 0 only).
  const Socket &link(int peer) const {
    return env.rank == 0 ? links[size_t(peer)] : links[0];
  }

  void checkPair(int peer, const std::string &what) {
    if (peer < 0 || peer >= env.worldSize || peer == env.rank ||
        (env.rank != 0 && peer != 0))
      abort(what +
            ": the TCP control plane connects every rank with rank 0 "
            "only, not rank " +
            std::to_string(env.rank) + " with rank " + std::to_string(peer));
  }

  /// Ends the job for a failure talking to `peer`.
  [[noreturn]] void failed(const std::string &what, int peer,
                           const std::string &why) {
    abort(what + ": " + why + "; " + rankText(peer) + " may have died");
  }

  void sendFrame(int peer, const FrameHeader &h, const void *data,
                 const std::string &what) {
    Status s = transport::sendFrame(link(peer), h, data,
                                    Deadline::after(timeout), rankText(peer));
    if (!s.ok())
      failed(what, peer, s.message());
  }

  /// Reads `peer`'s next frame, which must be (kind, tag) with `n` bytes,
  /// into `data`.
  void recvFrame(int peer, uint32_t kind, uint32_t tag, void *data, size_t n,
                 const std::string &what) {
    // Rank 0 reports a dead peer within the timeout; the others wait a
    // little longer for its answer, so that its message, which names the
    // dead rank, comes first.
    Deadline deadline = Deadline::after(env.rank == 0 ? timeout : timeout + 5);
    FrameHeader h;
    Status s = recvHeader(link(peer), h, deadline, rankText(peer));
    if (!s.ok())
      failed(what, peer, s.message());
    checkHeader(peer, h, kind, tag, n, what);
    if (n) {
      s = recvAll(link(peer), data, n, deadline, rankText(peer));
      if (!s.ok())
        failed(what, peer, s.message());
    }
  }

  void checkHeader(int peer, const FrameHeader &h, uint32_t kind, uint32_t tag,
                   uint64_t n, const std::string &what) {
    if (h.kind == kAbort)
      abort(what + ": " + rankText(peer) + " ended the job (see its error)");
    if (h.kind != kind || h.tag != tag)
      abort(what + ": " + rankText(peer) + " sent a " + kindName(h.kind) +
            " (tag " + std::to_string(h.tag) + ") where a " + kindName(kind) +
            " (tag " + std::to_string(tag) +
            ") was expected: the ranks are out of step");
    if (n != UINT64_MAX && h.length != n)
      abort(what + ": " + rankText(peer) + " sent " + std::to_string(h.length) +
            " bytes where " + std::to_string(n) + " were expected");
    if (h.length > kMaxFrameLength)
      abort(what + ": " + rankText(peer) + " announced " +
            std::to_string(h.length) + " bytes");
  }

  /// Rank 0: one frame of `kind` (`n` bytes, any when 0) from every other
  /// rank, read as they come under one deadline, so that the first dead
  /// peer is named, not the first slow one. By rank; [0] is empty.
  std::vector<std::string> collect(uint32_t kind, uint64_t n,
                                   const std::string &what) {
    std::vector<std::string> out(size_t(env.worldSize));
    std::vector<Transfer> in;
    for (int r = 1; r < env.worldSize; ++r) {
      Transfer t;
      t.fd = links[size_t(r)].fd();
      t.peer = r;
      t.kind = kind;
      t.bytes = n ? size_t(n) : kAnyLength;
      t.into = &out[size_t(r)];
      in.push_back(t);
    }
    ExchangeFailure why;
    Status s = exchangeFrames(in, Deadline::after(timeout), &why);
    if (s.ok())
      return out;
    switch (why.reason) {
    case ExchangeFailure::TimedOut: {
      std::string missing;
      for (int r : why.pending)
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      abort(what + " after " + secondsText(timeout) + ": nothing from rank" +
            (why.pending.size() > 1 ? "s " : " ") + missing + "; " +
            rankText(why.pending[0]) + " may have died");
    }
    case ExchangeFailure::BadHeader:
      checkHeader(why.peer, why.header, kind, 0, n ? n : UINT64_MAX, what);
      break;
    case ExchangeFailure::Closed:
    case ExchangeFailure::SystemError:
      if (why.peer >= 0)
        failed(what, why.peer, s.message());
      break;
    default:
      break;
    }
    abort(what + ": " + s.message());
  }

  /// An all-reduce of 8-byte values through rank 0: `op` combines every
  /// rank's payload (by rank) into the 8-byte answer.
  template <typename Op>
  std::string reduce(uint32_t kind, uint32_t answer, const std::string &mine,
                     const std::string &what, Op op) {
    unsigned char b[8];
    if (env.rank != 0) {
      sendFrame(0, {kind, 0, mine.size()}, mine.data(), what);
      recvFrame(0, answer, 0, b, 8, what);
      return std::string((char *)b, 8);
    }
    std::vector<std::string> all = collect(kind, mine.size(), what);
    all[0] = mine;
    putBE(b, uint64_t(op(all)), 8);
    for (int r = 1; r < env.worldSize; ++r)
      sendFrame(r, {answer, 0, 8}, b, what);
    return std::string((char *)b, 8);
  }

  LaunchEnv env;
  int port;
  std::function<void()> beforeExit;
  std::vector<Socket> links;
};

} // namespace

std::unique_ptr<ControlPlane>
lamina::rt::dist::makeTcpControl(const LaunchEnv &env, int port,
                                 std::function<void()> beforeExit) {
  return std::make_unique<TcpControl>(env, port, std::move(beforeExit));
}
