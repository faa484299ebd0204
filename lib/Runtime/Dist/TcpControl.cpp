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
// Frame: kind (u32), tag (u32), length (u64), big-endian, then the payload.
// The ranks call the operations in the same order, so a frame of another
// kind or tag means they are out of step: an error, not a guess.
//
// Failures: a closed connection, a timeout, or a peer's abort frame print
// "error: rank G: <what>: <why>; rank R may have died" and abort, which
// sends an abort frame to the peers (best effort), closes every socket
// (peers blocked on them see it at once) and exits with 1.
//
//===----------------------------------------------------------------------===//

#include "ControlPlane.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace lamina::rt;
using namespace lamina::rt::dist;

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

constexpr size_t kHeader = 16;
/// The largest frame accepted: a trace or a parameter, not garbage.
constexpr uint64_t kMaxFrame = uint64_t(1) << 40;

void putBE(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    p[i] = static_cast<unsigned char>(v >> (8 * (bytes - 1 - i)));
}
uint64_t getBE(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v = v << 8 | p[i];
  return v;
}

struct Header {
  uint32_t kind = 0, tag = 0;
  uint64_t length = 0;
};

void packHeader(const Header &h, unsigned char *p) {
  putBE(p, h.kind, 4);
  putBE(p + 4, h.tag, 4);
  putBE(p + 8, h.length, 8);
}
Header unpackHeader(const unsigned char *p) {
  return Header{uint32_t(getBE(p, 4)), uint32_t(getBE(p + 4, 4)),
                getBE(p + 8, 8)};
}

std::string secondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string rankText(int r) { return "rank " + std::to_string(r); }

/// One peer's frame being read by rank 0's poll loop.
struct Incoming {
  unsigned char head[kHeader];
  size_t got = 0; ///< bytes of header + payload read so far
  Header h;
  std::string payload;
  bool done = false;
};

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
    Status s = connectStar(env, port, kControlPlanePurpose, timeoutSeconds,
                           links);
    if (!s.ok())
      return Status::error("the control plane's rendezvous: " + s.message());
    return s;
  }

  int allMin(int v, const std::string &what, const std::string &) override {
    unsigned char b[8];
    putBE(b, uint64_t(int64_t(v)), 8);
    std::string r = reduce(kMin, kMinResult, std::string((char *)b, 8), what,
                           [](const std::vector<std::string> &all) {
                             int64_t m = INT64_MAX;
                             for (const std::string &s : all)
                               m = std::min(
                                   m, int64_t(getBE(
                                          (const unsigned char *)s.data(), 8)));
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

  void barrier() override {
    allMin(0, "the barrier did not complete", "");
  }

  [[noreturn]] void abort(const std::string &message) override {
    std::fflush(stdout);
    std::fprintf(stderr, "error: rank %d: %s\n", env.rank, message.c_str());
    std::fflush(stderr);
    // Tell the peers why their connection ends (best effort: a frame that
    // does not fit the socket buffer now is dropped), then close, so every
    // rank blocked on this one sees it at once.
    unsigned char head[kHeader];
    packHeader({kAbort, uint32_t(env.rank), 0}, head);
    for (Socket &s : links)
      if (s.valid()) {
        (void)::send(s.fd(), head, kHeader, MSG_NOSIGNAL | MSG_DONTWAIT);
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
      abort(what + ": the TCP control plane connects every rank with rank 0 "
                   "only, not rank " +
            std::to_string(env.rank) + " with rank " + std::to_string(peer));
  }

  /// Ends the job for a failure talking to `peer`.
  [[noreturn]] void failed(const std::string &what, int peer,
                           const std::string &why) {
    abort(what + ": " + why + "; " + rankText(peer) + " may have died");
  }

  void sendFrame(int peer, const Header &h, const void *data,
                 const std::string &what) {
    // Small frames in one write (one segment); large ones after the header.
    std::vector<unsigned char> frame(kHeader);
    packHeader(h, frame.data());
    bool whole = h.length <= 65536;
    if (whole && h.length)
      frame.insert(frame.end(), static_cast<const unsigned char *>(data),
                   static_cast<const unsigned char *>(data) + h.length);
    Status s =
        sendAll(link(peer), frame.data(), frame.size(), timeout, rankText(peer));
    if (s.ok() && !whole)
      s = sendAll(link(peer), data, size_t(h.length), timeout, rankText(peer));
    if (!s.ok())
      failed(what, peer, s.message());
  }

  /// Reads `peer`'s next frame, which must be (kind, tag) with `n` bytes,
  /// into `data`.
  void recvFrame(int peer, uint32_t kind, uint32_t tag, void *data, size_t n,
                 const std::string &what) {
    unsigned char head[kHeader];
    // Rank 0 reports a dead peer within the timeout; the others wait a
    // little longer for its answer, so that its message, which names the
    // dead rank, comes first.
    double t = env.rank == 0 ? timeout : timeout + 5;
    Status s = recvAll(link(peer), head, kHeader, t, rankText(peer));
    if (!s.ok())
      failed(what, peer, s.message());
    Header h = unpackHeader(head);
    checkHeader(peer, h, kind, tag, n, what);
    if (n) {
      s = recvAll(link(peer), data, n, t, rankText(peer));
      if (!s.ok())
        failed(what, peer, s.message());
    }
  }

  void checkHeader(int peer, const Header &h, uint32_t kind, uint32_t tag,
                   uint64_t n, const std::string &what) {
    if (h.kind == kAbort)
      abort(what + ": " + rankText(peer) + " ended the job (see its error)");
    if (h.kind != kind || h.tag != tag)
      abort(what + ": " + rankText(peer) + " sent a " + kindName(h.kind) +
            " (tag " + std::to_string(h.tag) + ") where a " + kindName(kind) +
            " (tag " + std::to_string(tag) +
            ") was expected: the ranks are out of step");
    if (n != UINT64_MAX && h.length != n)
      abort(what + ": " + rankText(peer) + " sent " +
            std::to_string(h.length) + " bytes where " + std::to_string(n) +
            " were expected");
    if (h.length > kMaxFrame)
      abort(what + ": " + rankText(peer) + " announced " +
            std::to_string(h.length) + " bytes");
  }

  /// Rank 0: one frame of `kind` from every other rank, read as they come
  /// (poll over all of them under one deadline). By rank; [0] is empty.
  std::vector<std::string> collect(uint32_t kind, uint64_t n,
                                   const std::string &what) {
    std::vector<Incoming> in(size_t(env.worldSize));
    in[0].done = true;
    int pending = env.worldSize - 1;
    double deadline = now() + timeout;
    while (pending > 0) {
      std::vector<pollfd> fds;
      std::vector<int> who;
      for (int r = 1; r < env.worldSize; ++r)
        if (!in[size_t(r)].done) {
          fds.push_back({links[size_t(r)].fd(), POLLIN, 0});
          who.push_back(r);
        }
      double left = deadline - now();
      int ms = left <= 0 ? 0 : int(std::min(left * 1000 + 1, 1e9));
      int k = ::poll(fds.data(), fds.size(), ms);
      if (k < 0 && errno == EINTR)
        continue;
      if (k < 0)
        abort(what + ": poll: " + std::strerror(errno));
      if (k == 0) {
        std::string missing;
        for (int r : who)
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        abort(what + " after " + secondsText(timeout) + ": nothing from rank" +
              (who.size() > 1 ? "s " : " ") + missing + "; " +
              rankText(who[0]) + " may have died");
      }
      for (size_t i = 0; i < fds.size(); ++i)
        if (fds[i].revents)
          if (readSome(who[i], in[size_t(who[i])], kind, n, what))
            --pending;
    }
    std::vector<std::string> out(size_t(env.worldSize));
    for (int r = 1; r < env.worldSize; ++r)
      out[size_t(r)] = std::move(in[size_t(r)].payload);
    return out;
  }

  /// What a readable socket has of `r`'s frame; true once it is complete.
  bool readSome(int r, Incoming &m, uint32_t kind, uint64_t n,
                const std::string &what) {
    for (;;) {
      bool inHeader = m.got < kHeader;
      size_t want = inHeader ? kHeader - m.got
                             : size_t(m.h.length) - (m.got - kHeader);
      if (want == 0) {
        m.done = true;
        return true;
      }
      char *dst = inHeader ? reinterpret_cast<char *>(m.head) + m.got
                           : m.payload.data() + (m.got - kHeader);
      ssize_t k = ::recv(links[size_t(r)].fd(), dst, want, 0);
      if (k == 0)
        failed(what, r, rankText(r) + " closed the connection");
      if (k < 0) {
        if (errno == EINTR)
          continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
          return false;
        failed(what, r, "reading from " + rankText(r) + ": " +
                            std::strerror(errno));
      }
      m.got += size_t(k);
      if (inHeader && m.got == kHeader) {
        m.h = unpackHeader(m.head);
        checkHeader(r, m.h, kind, 0, n ? n : UINT64_MAX, what);
        m.payload.resize(size_t(m.h.length));
      }
    }
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

