//===- Transport.h - the distributed runtime's TCP transport ----*- C++ -*-===//
//
// The one socket layer of the distributed runtime: the launcher's
// rendezvous (Launch.h), the host control plane without MPI
// (lib/Runtime/Dist/TcpControl.cpp) and the NCCL emulator's communicators
// (lib/Runtime/Dist/Nccl/Emulator) all talk through it, with one hello and
// one frame format. Sockets are non-blocking and close-on-exec, with
// TCP_NODELAY; every wait is a poll bounded by a Deadline (a time, a cancel
// flag, or both), so nothing hangs on a dead peer. Failures are Status
// errors naming the peer.
//
// Wire formats, big-endian. A hello opens every connection: magic (u32),
// the connecting rank (u32), the rank it is for (u32), zero (u32) and a
// purpose (u64: what the connection is for). A frame is a 16-byte header
// -- kind (u32), tag (u32), payload length (u64) -- and its payload.
//
// Plain POSIX sockets and C++17 (library lamina_transport).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_DIST_TRANSPORT_H
#define LAMINA_RUNTIME_DIST_TRANSPORT_H

#include "lamina/Runtime/Status.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lamina::rt::dist::transport {

using Clock = std::chrono::steady_clock;

/// When a blocking call gives up: at a time (Deadline::after), once a flag
/// is set (orCancelled; polled every 50 ms), or never (the default).
class Deadline {
public:
  Deadline() = default;
  static Deadline after(double seconds);
  /// The same deadline that also ends when `flag` becomes true.
  Deadline orCancelled(const std::atomic<bool> &flag) const;

  bool passed() const { return Clock::now() >= at; }
  bool cancelled() const { return flag && flag->load(); }
  /// The timeout it was made with, for messages ("timed out after 1 s").
  double seconds() const { return timeout; }
  /// Milliseconds the next poll may block: what is left (rounded up), at
  /// most 50 with a flag to watch; -1 for ever.
  int pollMs() const;

private:
  Clock::time_point at = Clock::time_point::max();
  double timeout = 0;
  const std::atomic<bool> *flag = nullptr;
};

/// A socket, closed when destroyed.
class Socket {
public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket &&other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Socket &operator=(Socket &&other) noexcept;
  Socket(const Socket &) = delete;
  Socket &operator=(const Socket &) = delete;
  ~Socket() { close(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();

private:
  int fd_ = -1;
};

//===----------------------------------------------------------------------===//
// Connections
//===----------------------------------------------------------------------===//

/// A listening socket on `host`:`port` (IPv4 or IPv6, the first address
/// that binds; port 0: any free port). Errors: "cannot listen on H:P
/// (bind: ...)".
Status listen(const std::string &host, int port, Socket &out);
/// The port `s` is bound to, 0 on error.
int localPort(const Socket &s);
/// One connection from `listener`; `from` names its address ("peer
/// 127.0.0.1:4321"). When the deadline passes first, `out` stays invalid
/// and the result is success.
Status accept(const Socket &listener, const Deadline &deadline, Socket &out,
              std::string &from);
/// Connects to `host`:`port`. With `retry`, a failed attempt is tried again
/// every 100 ms until the deadline (the listener may not be up yet): "could
/// not connect to <peer> within 1 s (last error: Connection refused)";
/// without, the first failure is the error.
Status connect(const std::string &host, int port, const Deadline &deadline,
               bool retry, const std::string &peer, Socket &out);

/// Exactly `n` bytes each way, before the deadline. `peer` names the other
/// end: "<peer> closed the connection after K of N bytes", "reading from
/// <peer> timed out after 1 s (K of N bytes read)", "... was cancelled".
Status sendAll(const Socket &s, const void *data, size_t n,
               const Deadline &deadline, const std::string &peer);
Status recvAll(const Socket &s, void *data, size_t n, const Deadline &deadline,
               const std::string &peer);

/// What a connection says first.
struct Hello {
  uint32_t from = 0, to = 0;
  uint64_t purpose = 0;
};
Status sendHello(const Socket &s, const Hello &h, const Deadline &deadline,
                 const std::string &peer);
/// Reads a hello. The magic is checked before the rest is awaited, so a
/// stranger is named at once: "<who> sent magic 0x47455420, not a Lamina
/// launch peer (is another program using 127.0.0.1:29501?)".
Status recvHello(const Socket &s, const Deadline &deadline,
                 const std::string &who, Hello &out);

//===----------------------------------------------------------------------===//
// Frames
//===----------------------------------------------------------------------===//

struct FrameHeader {
  uint32_t kind = 0, tag = 0;
  uint64_t length = 0;
};
constexpr size_t kFrameHeaderSize = 16;
/// The longest payload a frame may announce (anything longer is garbage).
constexpr uint64_t kMaxFrameLength = uint64_t(1) << 40;

void packHeader(const FrameHeader &h, unsigned char *out);
FrameHeader unpackHeader(const unsigned char *in);

/// One frame, header then `h.length` bytes of `payload` (small frames in
/// one write, so in one segment).
Status sendFrame(const Socket &s, const FrameHeader &h, const void *payload,
                 const Deadline &deadline, const std::string &peer);
/// The next frame's header; the caller checks it and reads the payload.
Status recvHeader(const Socket &s, FrameHeader &out, const Deadline &deadline,
                  const std::string &peer);

/// One frame of an exchange, to or from rank `peer` on `fd`.
struct Transfer {
  int fd = -1, peer = -1;
  bool send = false;
  /// Sent in the header; a receive expects them.
  uint32_t kind = 0, tag = 0;
  /// The payload (a receive: exactly `bytes` must arrive).
  void *data = nullptr;
  size_t bytes = 0;
  /// A receive of any length up to kMaxFrameLength (`bytes` kAnyLength) or
  /// of exactly `bytes`, into this string instead of `data`.
  std::string *into = nullptr;
};
constexpr size_t kAnyLength = SIZE_MAX;

/// Why an exchange stopped, for callers that word it themselves.
struct ExchangeFailure {
  enum Reason { None, TimedOut, Cancelled, Closed, SystemError, BadHeader };
  Reason reason = None;
  /// The transfer at fault and its peer (Closed, SystemError on a socket,
  /// BadHeader); null and -1 otherwise.
  const Transfer *transfer = nullptr;
  int peer = -1;
  /// BadHeader: what arrived where the transfer expected otherwise.
  FrameHeader header;
  /// TimedOut: the peers of the transfers not done, each once, in order.
  std::vector<int> pending;
};

/// Moves every transfer at once, polling all their sockets, so that a ring
/// or an all-to-all cannot deadlock on full socket buffers and the first
/// dead peer is named, not the first slow one. Per socket, each direction
/// runs its transfers in order. A header that does not match its receive
/// (kind, tag, length) is an error before any of its payload is read.
Status exchangeFrames(std::vector<Transfer> &transfers,
                      const Deadline &deadline, ExchangeFailure *why = nullptr);

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// `bytes` bytes of `v`, big-endian.
void putBE(unsigned char *out, uint64_t v, int bytes);
uint64_t getBE(const unsigned char *in, int bytes);
/// "1 s", "0.5 s": a timeout in messages.
std::string secondsText(double seconds);

} // namespace lamina::rt::dist::transport

#endif // LAMINA_RUNTIME_DIST_TRANSPORT_H
