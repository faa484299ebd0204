//===- Launch.cpp - launcher variables and the TCP rendezvous -------------===//
//
// See include/lamina/Runtime/Launch.h. Every socket is non-blocking and
// every wait is a poll() bounded by the one deadline of the call.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Launch.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

namespace lamina::rt {

//===----------------------------------------------------------------------===//
// Environment
//===----------------------------------------------------------------------===//

namespace {

/// Reads the integer variable `name` into `value`, in [lo, hi].
Status readInt(const char *name, long lo, long hi, int &value) {
  const char *text = std::getenv(name);
  if (!text)
    return Status::error(std::string(name) + " is not set");
  errno = 0;
  char *end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || errno == ERANGE)
    return Status::error(std::string(name) + "=" + text + " is not a number");
  if (v < lo || v > hi)
    return Status::error(std::string(name) + "=" + text + " is not in [" +
                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
  value = static_cast<int>(v);
  return Status::success();
}

} // namespace

Status readLaunchEnv(LaunchEnv &out) {
  struct Names {
    const char *launcher, *rank, *size, *local;
  };
  static const Names all[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}};
  const Names *names = nullptr;
  for (const Names &candidate : all)
    if (std::getenv(candidate.rank)) {
      names = &candidate;
      break;
    }
  if (!names)
    return Status::error(
        "no launcher variables: RANK, OMPI_COMM_WORLD_RANK and SLURM_PROCID "
        "are all unset (start the program with torchrun-style variables, "
        "mpirun or srun)");

  LaunchEnv env;
  env.launcher = names->launcher;
  const long maxInt = 1 << 30;
  if (Status s = readInt(names->size, 1, maxInt, env.worldSize); !s.ok())
    return s;
  if (Status s = readInt(names->rank, 0, maxInt, env.rank); !s.ok())
    return s;
  if (env.rank >= env.worldSize)
    return Status::error("rank " + std::to_string(env.rank) + " (" +
                         names->rank + ") is not below " + names->size + " " +
                         std::to_string(env.worldSize));
  if (Status s = readInt(names->local, 0, maxInt, env.localRank); !s.ok())
    return s;
  if (env.localRank >= env.worldSize)
    return Status::error("local rank " + std::to_string(env.localRank) + " (" +
                         names->local + ") is not below " + names->size + " " +
                         std::to_string(env.worldSize));

  const char *addr = std::getenv("MASTER_ADDR");
  if (!addr || !*addr)
    return Status::error(std::string("MASTER_ADDR is ") +
                         (addr ? "empty" : "not set") +
                         " (rank 0's rendezvous host; mpirun and srun do not "
                         "set it: export it)");
  env.masterAddr = addr;
  if (!std::getenv("MASTER_PORT"))
    return Status::error("MASTER_PORT is not set (rank 0's rendezvous port; "
                         "mpirun and srun do not set it: export it)");
  if (Status s = readInt("MASTER_PORT", 1, 65535, env.masterPort); !s.ok())
    return s;
  out = std::move(env);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Sockets
//===----------------------------------------------------------------------===//

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

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x4c4d4c31; // "LML1"
constexpr size_t kHelloSize = 16;       // magic, rank (u32), n (u64), big-endian

using Fd = Socket;

std::string errnoText(int err) { return std::strerror(err); }

std::string secondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

/// Milliseconds left until `deadline`, rounded up, 0 when past.
int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(
                  deadline - Clock::now())
                  .count();
  if (left <= 0)
    return 0;
  long long ms = (left + 999) / 1000;
  return ms > 1 << 30 ? 1 << 30 : static_cast<int>(ms);
}

/// Waits for `events` on `fd` until the deadline: true when ready, false on
/// timeout; errors in `err`.
bool waitFor(int fd, short events, Clock::time_point deadline, int &err) {
  err = 0;
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, msLeft(deadline));
    if (r > 0)
      return true;
    if (r == 0)
      return false;
    if (errno != EINTR) {
      err = errno;
      return false;
    }
  }
}

/// Small messages go out at once: without it, Nagle's algorithm and the
/// peer's delayed ACK hold a frame's second write for ~40 ms.
void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Status setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    return Status::error(std::string("fcntl(O_NONBLOCK): ") +
                         errnoText(errno));
  return Status::success();
}

/// Sends (`sending`) or receives exactly `n` bytes at `p` before the
/// deadline, across partial transfers and EINTR. `what` names the peer.
Status transferAll(int fd, char *p, size_t n, bool sending,
                   Clock::time_point deadline, const std::string &what,
                   double timeout) {
  const std::string verb = sending ? "sending to " : "reading from ";
  size_t done = 0;
  while (done < n) {
    ssize_t k = sending ? ::send(fd, p + done, n - done, MSG_NOSIGNAL)
                        : ::recv(fd, p + done, n - done, 0);
    if (k > 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    if (k == 0 && !sending)
      return Status::error(what + " closed the connection after " +
                           std::to_string(done) + " of " + std::to_string(n) +
                           " bytes");
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
      return Status::error(verb + what + ": " + errnoText(errno));
    int err;
    if (!waitFor(fd, sending ? POLLOUT : POLLIN, deadline, err))
      return Status::error(
          err ? "waiting for " + what + ": " + errnoText(err)
              : verb + what + " timed out after " + secondsText(timeout) +
                    " (" + std::to_string(done) + " of " + std::to_string(n) +
                    (sending ? " bytes sent)" : " bytes read)"));
  }
  return Status::success();
}

Status writeAll(int fd, const void *data, size_t n, Clock::time_point deadline,
                const std::string &what, double timeout) {
  return transferAll(fd, static_cast<char *>(const_cast<void *>(data)), n,
                     true, deadline, what, timeout);
}

Status readAll(int fd, void *data, size_t n, Clock::time_point deadline,
               const std::string &what, double timeout) {
  return transferAll(fd, static_cast<char *>(data), n, false, deadline, what,
                     timeout);
}

void putU32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<unsigned char>(v >> (24 - 8 * i));
}
void putU64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<unsigned char>(v >> (56 - 8 * i));
}
uint64_t getBE(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v = v << 8 | p[i];
  return v;
}

std::string sockaddrText(const sockaddr *sa) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6)
                                            : sizeof(sockaddr_in);
  if (::getnameinfo(sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return sa->sa_family == AF_INET6
             ? "[" + std::string(host) + "]:" + serv
             : std::string(host) + ":" + serv;
}

/// MASTER_ADDR:MASTER_PORT resolved (TCP, IPv4 or IPv6).
Status resolve(const LaunchEnv &env, int masterPort, addrinfo *&result) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  std::string port = std::to_string(masterPort);
  int rc = ::getaddrinfo(env.masterAddr.c_str(), port.c_str(), &hints, &result);
  if (rc != 0)
    return Status::error("cannot resolve MASTER_ADDR " + env.masterAddr +
                         ": " + ::gai_strerror(rc));
  return Status::success();
}

std::string masterText(const LaunchEnv &env, int port) {
  return env.masterAddr + ":" + std::to_string(port);
}

Clock::time_point deadlineAfter(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

/// What a hello's purpose field asks for, for the mismatch message.
std::string purposeText(uint64_t purpose) {
  if (purpose == kControlPlanePurpose)
    return "the control plane";
  if (purpose >> 63)
    return "an unknown purpose";
  return "a broadcast of " + std::to_string(purpose) + " bytes";
}

/// Rank 0's half of connectStar: listens, accepts and checks every hello.
Status rootAccept(const LaunchEnv &env, int port, uint64_t purpose,
                  Clock::time_point deadline, double timeout,
                  std::vector<Fd> &peers) {
  addrinfo *addrs = nullptr;
  if (Status s = resolve(env, port, addrs); !s.ok())
    return s;
  Fd listener;
  std::string bindError;
  for (addrinfo *a = addrs; a && listener.fd() < 0; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC,
                   a->ai_protocol));
    if (fd.fd() < 0) {
      bindError = "socket: " + errnoText(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.fd(), a->ai_addr, a->ai_addrlen) != 0) {
      bindError = "bind: " + errnoText(errno);
      continue;
    }
    if (::listen(fd.fd(), SOMAXCONN) != 0) {
      bindError = "listen: " + errnoText(errno);
      continue;
    }
    listener = std::move(fd);
  }
  ::freeaddrinfo(addrs);
  if (listener.fd() < 0)
    return Status::error("rank 0: cannot listen on " + masterText(env, port) +
                         " (" + bindError + ")");
  if (Status s = setNonBlocking(listener.fd()); !s.ok())
    return s;

  peers.clear();
  peers.resize(static_cast<size_t>(env.worldSize));
  int arrived = 0;
  while (arrived < env.worldSize - 1) {
    int err;
    if (!waitFor(listener.fd(), POLLIN, deadline, err)) {
      if (err)
        return Status::error("rank 0: waiting for connections on " +
                             masterText(env, port) + ": " + errnoText(err));
      std::string missing;
      for (int r = 1; r < env.worldSize; ++r)
        if (peers[r].fd() < 0)
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return Status::error(
          "rank 0: " + std::to_string(env.worldSize - 1 - arrived) + " of " +
          std::to_string(env.worldSize - 1) + " ranks did not connect to " +
          masterText(env, port) + " within " + secondsText(timeout) +
          " (missing: " + missing + ")");
    }
    sockaddr_storage from{};
    socklen_t fromLen = sizeof from;
    Fd conn(::accept4(listener.fd(), reinterpret_cast<sockaddr *>(&from),
                      &fromLen, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (conn.fd() < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK ||
          errno == ECONNABORTED)
        continue;
      return Status::error("rank 0: accept on " + masterText(env, port) + ": " +
                           errnoText(errno));
    }
    std::string who =
        "peer " + sockaddrText(reinterpret_cast<sockaddr *>(&from));
    unsigned char hello[kHelloSize];
    if (Status s = readAll(conn.fd(), hello, kHelloSize, deadline, who,
                           timeout);
        !s.ok())
      return Status::error("rank 0: " + s.message());
    uint32_t magic = static_cast<uint32_t>(getBE(hello, 4));
    uint64_t rank = getBE(hello + 4, 4), peerPurpose = getBE(hello + 8, 8);
    if (magic != kMagic) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0x%08x", magic);
      return Status::error("rank 0: " + who + " sent magic " + buf +
                           ", not a Lamina launch peer (is another program "
                           "using " + masterText(env, port) + "?)");
    }
    if (rank == 0 || rank >= static_cast<uint64_t>(env.worldSize))
      return Status::error("rank 0: " + who + " says it is rank " +
                           std::to_string(rank) + ", not in [1, " +
                           std::to_string(env.worldSize) + ")");
    if (peers[rank].fd() >= 0)
      return Status::error("rank 0: " + who + " says it is rank " +
                           std::to_string(rank) +
                           ", which already connected (duplicate rank)");
    if (peerPurpose != purpose) {
      std::string head = "rank 0: rank " + std::to_string(rank) + " (" + who +
                         ") ";
      if (!(peerPurpose >> 63) && !(purpose >> 63))
        return Status::error(head + "expects " + std::to_string(peerPurpose) +
                             " bytes, rank 0 broadcasts " +
                             std::to_string(purpose));
      return Status::error(head + "connected for " +
                           purposeText(peerPurpose) + ", rank 0 listens for " +
                           purposeText(purpose) +
                           " (is another program using " +
                           masterText(env, port) + "?)");
    }
    setNoDelay(conn.fd());
    peers[rank] = std::move(conn);
    ++arrived;
  }
  return Status::success();
}

/// Connects to MASTER_ADDR:MASTER_PORT, retrying until the deadline.
Status connectToRoot(const LaunchEnv &env, int port,
                     Clock::time_point deadline, double timeout, Fd &out) {
  std::string prefix = "rank " + std::to_string(env.rank) + ": ";
  std::string lastError = "no attempt";
  for (;;) {
    addrinfo *addrs = nullptr;
    if (Status s = resolve(env, port, addrs); !s.ok())
      return Status::error(prefix + s.message());
    for (addrinfo *a = addrs; a; a = a->ai_next) {
      Fd fd(::socket(a->ai_family,
                     a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                     a->ai_protocol));
      if (fd.fd() < 0) {
        lastError = "socket: " + errnoText(errno);
        continue;
      }
      // Non-blocking: EINPROGRESS (or EINTR) means the connection goes on
      // in the background; poll for it.
      int rc = ::connect(fd.fd(), a->ai_addr, a->ai_addrlen);
      int err = rc == 0 ? 0 : errno;
      if (err == EINPROGRESS || err == EINTR) {
        int pollErr;
        if (!waitFor(fd.fd(), POLLOUT, deadline, pollErr)) {
          lastError = pollErr ? errnoText(pollErr) : "connect timed out";
          continue;
        }
        socklen_t len = sizeof err;
        if (::getsockopt(fd.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0)
          err = errno;
      }
      if (err == 0) {
        ::freeaddrinfo(addrs);
        setNoDelay(fd.fd());
        out = std::move(fd);
        return Status::success();
      }
      lastError = errnoText(err);
    }
    ::freeaddrinfo(addrs);
    int left = msLeft(deadline);
    if (left == 0)
      return Status::error(prefix + "could not connect to rank 0 at " +
                           masterText(env, port) + " within " +
                           secondsText(timeout) + " (last error: " +
                           lastError + ")");
    // Rank 0 may not be listening yet: wait a little and try again.
    ::usleep(static_cast<useconds_t>(std::min(left, 100)) * 1000);
  }
}

} // namespace

Status connectStar(const LaunchEnv &env, int port, uint64_t purpose,
                   double timeoutSeconds, std::vector<Socket> &links) {
  links.clear();
  if (env.worldSize <= 1) {
    links.resize(1);
    return Status::success();
  }
  if (env.rank < 0 || env.rank >= env.worldSize)
    return Status::error("rank " + std::to_string(env.rank) +
                         " is not below the world size " +
                         std::to_string(env.worldSize));
  if (!(timeoutSeconds > 0))
    return Status::error("the rendezvous timeout must be positive");
  if (port < 1 || port > 65535)
    return Status::error("rendezvous port " + std::to_string(port) +
                         " is not in [1, 65535]");
  auto deadline = deadlineAfter(timeoutSeconds);
  if (env.rank == 0)
    return rootAccept(env, port, purpose, deadline, timeoutSeconds, links);

  Fd fd;
  if (Status s = connectToRoot(env, port, deadline, timeoutSeconds, fd);
      !s.ok())
    return s;
  std::string prefix = "rank " + std::to_string(env.rank) + ": ";
  std::string root = "rank 0 at " + masterText(env, port);
  unsigned char hello[kHelloSize];
  putU32(hello, kMagic);
  putU32(hello + 4, static_cast<uint32_t>(env.rank));
  putU64(hello + 8, purpose);
  if (Status s = writeAll(fd.fd(), hello, kHelloSize, deadline, root,
                          timeoutSeconds);
      !s.ok())
    return Status::error(prefix + s.message());
  links.resize(1);
  links[0] = std::move(fd);
  return Status::success();
}

Status sendAll(const Socket &s, const void *data, size_t n,
               double timeoutSeconds, const std::string &peer) {
  return writeAll(s.fd(), data, n, deadlineAfter(timeoutSeconds), peer,
                  timeoutSeconds);
}

Status recvAll(const Socket &s, void *data, size_t n, double timeoutSeconds,
               const std::string &peer) {
  return readAll(s.fd(), data, n, deadlineAfter(timeoutSeconds), peer,
                 timeoutSeconds);
}

Status rendezvousPort(const LaunchEnv &env, int &port) {
  const char *text = std::getenv("LAMINA_CONTROL_PORT");
  if (!text || !*text) {
    if (env.masterPort >= 65535)
      return Status::error("MASTER_PORT=" + std::to_string(env.masterPort) +
                           ": Lamina's rendezvous listens on MASTER_PORT + 1, "
                           "which is not a port; set LAMINA_CONTROL_PORT");
    port = env.masterPort + 1;
    return Status::success();
  }
  char *end = nullptr;
  errno = 0;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || v < 1 || v > 65535)
    return Status::error(std::string("LAMINA_CONTROL_PORT=") + text +
                         " is not a port in [1, 65535]");
  port = int(v);
  return Status::success();
}

Status broadcastBytes(const LaunchEnv &env, void *data, size_t n,
                      double timeoutSeconds) {
  if (env.worldSize <= 1)
    return Status::success();
  if (n >> 63)
    return Status::error("broadcastBytes: " + std::to_string(n) +
                         " bytes is too large");
  if (!(timeoutSeconds > 0))
    return Status::error("broadcastBytes: the timeout must be positive");
  auto deadline = deadlineAfter(timeoutSeconds);
  int port = 0;
  if (Status s = rendezvousPort(env, port); !s.ok())
    return s;
  std::vector<Socket> links;
  if (Status s = connectStar(env, port, n, timeoutSeconds, links); !s.ok())
    return s;
  // The bytes go out under what is left of the one deadline.
  if (env.rank == 0) {
    for (int r = 1; r < env.worldSize; ++r)
      if (Status s = writeAll(links[size_t(r)].fd(), data, n, deadline,
                              "rank " + std::to_string(r), timeoutSeconds);
          !s.ok())
        return Status::error("rank 0: " + s.message());
    return Status::success();
  }
  std::string root = "rank 0 at " + masterText(env, port);
  if (Status s = readAll(links[0].fd(), data, n, deadline, root,
                         timeoutSeconds);
      !s.ok())
    return Status::error("rank " + std::to_string(env.rank) + ": " +
                         s.message());
  return Status::success();
}

int freeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0)
    ::close(fd);
  return port;
}

} // namespace lamina::rt
