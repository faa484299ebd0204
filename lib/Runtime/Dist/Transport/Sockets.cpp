//===- Sockets.cpp - deadlines, connections and whole transfers -----------===//
//
// See include/lamina/Runtime/Dist/Transport.h. Every socket is
// non-blocking; every wait is a poll() bounded by the caller's Deadline.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Dist/Transport.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace lamina::rt::dist::transport {

//===----------------------------------------------------------------------===//
// Deadlines and sockets
//===----------------------------------------------------------------------===//

Deadline Deadline::after(double seconds) {
  Deadline d;
  d.timeout = seconds;
  // Beyond a year is for ever (and would overflow the clock).
  if (seconds < 365.0 * 24 * 3600)
    d.at = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(seconds));
  return d;
}

Deadline Deadline::orCancelled(const std::atomic<bool> &cancel) const {
  Deadline d = *this;
  d.flag = &cancel;
  return d;
}

int Deadline::pollMs() const {
  constexpr int kFlagMs = 50;
  int ms = -1;
  if (at != Clock::time_point::max()) {
    auto left =
        std::chrono::duration_cast<std::chrono::microseconds>(at - Clock::now())
            .count();
    long long rounded = left <= 0 ? 0 : (left + 999) / 1000;
    ms = rounded > (1 << 30) ? 1 << 30 : int(rounded);
  }
  if (flag)
    ms = ms < 0 ? kFlagMs : std::min(ms, kFlagMs);
  return ms;
}

Socket &Socket::operator=(Socket &&other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0)
    ::close(fd_);
  fd_ = -1;
}

namespace {

enum class Waited { Ready, TimedOut, Cancelled, Failed };

/// Polls `fd` for `events` until ready, the deadline passes or its flag is
/// set; Failed leaves poll's errno in `err`.
Waited waitFor(int fd, short events, const Deadline &deadline, int &err) {
  err = 0;
  for (;;) {
    if (deadline.cancelled())
      return Waited::Cancelled;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, deadline.pollMs());
    if (r > 0)
      return Waited::Ready;
    if (r < 0 && errno != EINTR) {
      err = errno;
      return Waited::Failed;
    }
    if (r == 0 && deadline.passed())
      return Waited::TimedOut;
  }
}

std::string errnoText(int err) { return std::strerror(err); }

/// Small messages go out at once: without it, Nagle's algorithm and the
/// peer's delayed ACK hold a frame's second write for ~40 ms.
void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string sockaddrText(const sockaddr *sa) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  socklen_t len =
      sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return sa->sa_family == AF_INET6 ? "[" + std::string(host) + "]:" + serv
                                   : std::string(host) + ":" + serv;
}

/// `host`:`port` resolved (TCP, IPv4 or IPv6); `passive` for a listener.
Status resolve(const std::string &host, int port, bool passive,
               addrinfo *&result) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(),
                         &hints, &result);
  if (rc != 0)
    return Status::error("cannot resolve " + host + ": " + ::gai_strerror(rc));
  return Status::success();
}

std::string hostPort(const std::string &host, int port) {
  return host + ":" + std::to_string(port);
}

/// Sends (`sending`) or receives exactly `n` bytes at `p` before the
/// deadline, across partial transfers and EINTR.
Status transferAll(int fd, char *p, size_t n, bool sending,
                   const Deadline &deadline, const std::string &peer) {
  const std::string verb = sending ? "sending to " : "reading from ";
  size_t done = 0;
  while (done < n) {
    ssize_t k =
        sending ? ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                : ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (k > 0) {
      done += size_t(k);
      continue;
    }
    if (k == 0 && !sending)
      return Status::error(peer + " closed the connection after " +
                           std::to_string(done) + " of " + std::to_string(n) +
                           " bytes");
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::error(verb + peer + ": " + errnoText(errno));
    int err;
    std::string progress = " (" + std::to_string(done) + " of " +
                           std::to_string(n) +
                           (sending ? " bytes sent)" : " bytes read)");
    switch (waitFor(fd, sending ? POLLOUT : POLLIN, deadline, err)) {
    case Waited::Ready:
      break;
    case Waited::Failed:
      return Status::error("waiting for " + peer + ": " + errnoText(err));
    case Waited::Cancelled:
      return Status::error(verb + peer + " was cancelled" + progress);
    case Waited::TimedOut:
      return Status::error(verb + peer + " timed out after " +
                           secondsText(deadline.seconds()) + progress);
    }
  }
  return Status::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Connections
//===----------------------------------------------------------------------===//

Status listen(const std::string &host, int port, Socket &out) {
  addrinfo *addrs = nullptr;
  if (Status s = resolve(host, port, /*passive=*/true, addrs); !s.ok())
    return s;
  Socket listener;
  std::string error = "no address";
  for (addrinfo *a = addrs; a && !listener.valid(); a = a->ai_next) {
    Socket s(::socket(a->ai_family,
                      a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                      a->ai_protocol));
    if (!s.valid()) {
      error = "socket: " + errnoText(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.fd(), a->ai_addr, a->ai_addrlen) != 0) {
      error = "bind: " + errnoText(errno);
      continue;
    }
    if (::listen(s.fd(), SOMAXCONN) != 0) {
      error = "listen: " + errnoText(errno);
      continue;
    }
    listener = std::move(s);
  }
  ::freeaddrinfo(addrs);
  if (!listener.valid())
    return Status::error("cannot listen on " + hostPort(host, port) + " (" +
                         error + ")");
  out = std::move(listener);
  return Status::success();
}

int localPort(const Socket &s) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(s.fd(), reinterpret_cast<sockaddr *>(&a), &len) != 0)
    return 0;
  if (a.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<sockaddr_in6 *>(&a)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in *>(&a)->sin_port);
}

Status accept(const Socket &listener, const Deadline &deadline, Socket &out,
              std::string &from) {
  for (;;) {
    int err;
    Waited w = waitFor(listener.fd(), POLLIN, deadline, err);
    if (w == Waited::TimedOut || w == Waited::Cancelled)
      return Status::success();
    if (w == Waited::Failed)
      return Status::error("waiting for connections: " + errnoText(err));
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    Socket conn(::accept4(listener.fd(), reinterpret_cast<sockaddr *>(&addr),
                          &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn.valid()) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK ||
          errno == ECONNABORTED)
        continue;
      return Status::error("accept: " + errnoText(errno));
    }
    setNoDelay(conn.fd());
    from = "peer " + sockaddrText(reinterpret_cast<sockaddr *>(&addr));
    out = std::move(conn);
    return Status::success();
  }
}

Status connect(const std::string &host, int port, const Deadline &deadline,
               bool retry, const std::string &peer, Socket &out) {
  std::string lastError = "no attempt";
  for (;;) {
    addrinfo *addrs = nullptr;
    if (Status s = resolve(host, port, /*passive=*/false, addrs); !s.ok())
      return s;
    for (addrinfo *a = addrs; a; a = a->ai_next) {
      Socket s(::socket(a->ai_family,
                        a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        a->ai_protocol));
      if (!s.valid()) {
        lastError = "socket: " + errnoText(errno);
        continue;
      }
      // Non-blocking: EINPROGRESS (or EINTR) means the connection goes on
      // in the background; poll for it.
      int err = ::connect(s.fd(), a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
      if (err == EINPROGRESS || err == EINTR) {
        int pollErr;
        Waited w = waitFor(s.fd(), POLLOUT, deadline, pollErr);
        if (w != Waited::Ready) {
          lastError = w == Waited::Failed      ? errnoText(pollErr)
                      : w == Waited::Cancelled ? "cancelled"
                                               : "connect timed out";
          continue;
        }
        socklen_t len = sizeof err;
        if (::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
          err = errno;
      }
      if (err == 0) {
        ::freeaddrinfo(addrs);
        setNoDelay(s.fd());
        out = std::move(s);
        return Status::success();
      }
      lastError = errnoText(err);
    }
    ::freeaddrinfo(addrs);
    if (!retry)
      return Status::error("could not connect to " + peer + " (" + lastError +
                           ")");
    if (deadline.cancelled())
      return Status::error("connecting to " + peer +
                           " was cancelled (last error: " + lastError + ")");
    if (deadline.passed())
      return Status::error("could not connect to " + peer + " within " +
                           secondsText(deadline.seconds()) +
                           " (last error: " + lastError + ")");
    // The listener may not be up yet: wait a little and try again.
    int ms = deadline.pollMs();
    ::usleep(useconds_t(ms < 0 || ms > 100 ? 100 : ms) * 1000);
  }
}

Status sendAll(const Socket &s, const void *data, size_t n,
               const Deadline &deadline, const std::string &peer) {
  return transferAll(s.fd(), static_cast<char *>(const_cast<void *>(data)), n,
                     true, deadline, peer);
}

Status recvAll(const Socket &s, void *data, size_t n, const Deadline &deadline,
               const std::string &peer) {
  return transferAll(s.fd(), static_cast<char *>(data), n, false, deadline,
                     peer);
}

//===----------------------------------------------------------------------===//
// Hellos
//===----------------------------------------------------------------------===//

namespace {
constexpr uint32_t kHelloMagic = 0x4c4d4c32; // "LML2"
constexpr size_t kHelloSize = 24;
} // namespace

Status sendHello(const Socket &s, const Hello &h, const Deadline &deadline,
                 const std::string &peer) {
  unsigned char b[kHelloSize] = {};
  putBE(b, kHelloMagic, 4);
  putBE(b + 4, h.from, 4);
  putBE(b + 8, h.to, 4);
  putBE(b + 16, h.purpose, 8);
  return sendAll(s, b, kHelloSize, deadline, peer);
}

Status recvHello(const Socket &s, const Deadline &deadline,
                 const std::string &who, Hello &out) {
  unsigned char b[kHelloSize];
  if (Status st = recvAll(s, b, 4, deadline, who); !st.ok())
    return st;
  if (uint32_t magic = uint32_t(getBE(b, 4)); magic != kHelloMagic) {
    char text[16];
    std::snprintf(text, sizeof text, "0x%08x", magic);
    // The socket's own address is the one the stranger found.
    sockaddr_storage self{};
    socklen_t len = sizeof self;
    std::string where =
        ::getsockname(s.fd(), reinterpret_cast<sockaddr *>(&self), &len) == 0
            ? sockaddrText(reinterpret_cast<sockaddr *>(&self))
            : "this port";
    return Status::error(who + " sent magic " + text +
                         ", not a Lamina launch peer (is another program "
                         "using " +
                         where + "?)");
  }
  if (Status st = recvAll(s, b + 4, kHelloSize - 4, deadline, who); !st.ok())
    return st;
  out.from = uint32_t(getBE(b + 4, 4));
  out.to = uint32_t(getBE(b + 8, 4));
  out.purpose = getBE(b + 16, 8);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

void putBE(unsigned char *out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out[i] = static_cast<unsigned char>(v >> (8 * (bytes - 1 - i)));
}

uint64_t getBE(const unsigned char *in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v = v << 8 | in[i];
  return v;
}

std::string secondsText(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", seconds);
  return buf;
}

} // namespace lamina::rt::dist::transport
