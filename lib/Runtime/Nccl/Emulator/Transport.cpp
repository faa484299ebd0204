//===- Transport.cpp - the NCCL emulator's sockets ------------------------===//
//
// See Transport.h.
//
//===----------------------------------------------------------------------===//

#include "Transport.h"

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <thread>
#include <tuple>
#include <unistd.h>

namespace lamina::nccl_emulator {
namespace {

constexpr uint64_t kMagic = 0x4c414d494e41454dull; // "LAMINAEM"
constexpr int kPollMs = 50;

struct Hello {
  uint64_t magic, tag;
  int32_t from, peer;
};

std::string sysText(const char *call) {
  return std::string(call) + ": " + std::strerror(errno);
}

void noDelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Waits for `events` on fd, checking `abort` every kPollMs. 1 ready, 0
/// aborted, -1 error.
int waitFor(int fd, short events, const AbortFlag &abort, std::string &err) {
  for (;;) {
    if (abort.load())
      return 0;
    pollfd p = {fd, events, 0};
    int r = ::poll(&p, 1, kPollMs);
    if (r < 0 && errno != EINTR) {
      err = sysText("poll");
      return -1;
    }
    if (r > 0)
      return 1;
  }
}

struct Listener {
  int fd = -1;
  uint16_t port = 0;
  std::string error;
  std::mutex m;
  std::condition_variable cv;
  std::map<std::tuple<uint64_t, int, int>, int> parked; ///< tag, from, peer
};

/// Reads the hello of a new connection (5 s at most) and parks it.
void admit(Listener &l, int c) {
  Hello h{};
  size_t got = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got < sizeof h && std::chrono::steady_clock::now() < until) {
    pollfd p = {c, POLLIN, 0};
    if (::poll(&p, 1, kPollMs) <= 0)
      continue;
    ssize_t n =
        ::recv(c, reinterpret_cast<char *>(&h) + got, sizeof h - got, 0);
    if (n <= 0)
      break;
    got += size_t(n);
  }
  if (got != sizeof h || h.magic != kMagic) {
    ::close(c);
    return;
  }
  std::lock_guard<std::mutex> lock(l.m);
  auto key = std::make_tuple(h.tag, int(h.from), int(h.peer));
  if (auto it = l.parked.find(key); it != l.parked.end())
    ::close(it->second);
  l.parked[key] = c;
  l.cv.notify_all();
}

void acceptLoop(Listener *l) {
  for (;;) {
    int c = ::accept(l->fd, nullptr, nullptr);
    if (c < 0) {
      if (errno != EINTR)
        std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      continue;
    }
    noDelay(c);
    std::thread(admit, std::ref(*l), c).detach();
  }
}

/// Never destroyed: the accept thread runs until the process ends.
Listener &listener() {
  static Listener *l = [] {
    auto *l = new Listener;
    l->fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    if (l->fd < 0)
      l->error = sysText("socket");
    else if (::bind(l->fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0)
      l->error = sysText("bind");
    else if (::listen(l->fd, 512) != 0)
      l->error = sysText("listen");
    else if (::getsockname(l->fd, reinterpret_cast<sockaddr *>(&a), &len) != 0)
      l->error = sysText("getsockname");
    if (!l->error.empty())
      return l;
    l->port = a.sin_port;
    std::thread(acceptLoop, l).detach();
    return l;
  }();
  return *l;
}

} // namespace

bool listenerAddress(Address &out, std::string &err) {
  Listener &l = listener();
  if (!l.error.empty()) {
    err = "the emulator's listener: " + l.error;
    return false;
  }
  const char *host = std::getenv("LAMINA_NCCL_EMULATOR_HOST");
  in_addr ip{};
  if (inet_pton(AF_INET, host && *host ? host : "127.0.0.1", &ip) != 1) {
    err = std::string("LAMINA_NCCL_EMULATOR_HOST=") + host +
          " is not an IPv4 address";
    return false;
  }
  out.ip = ip.s_addr;
  out.port = l.port;
  return true;
}

bool connectTo(const Address &to, uint64_t tag, int from, int peer,
               const AbortFlag &abort, int &fd, std::string &err) {
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = sysText("socket");
    return false;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = to.ip;
  a.sin_port = to.port;
  if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    char ip[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    err = sysText("connect") + " (" + ip + ":" +
          std::to_string(ntohs(to.port)) + ")";
    ::close(fd);
    fd = -1;
    return false;
  }
  noDelay(fd);
  Hello h{kMagic, tag, from, peer};
  if (!sendAll(fd, &h, sizeof h, abort, err)) {
    ::close(fd);
    fd = -1;
    return false;
  }
  return true;
}

bool claim(uint64_t tag, int from, int peer, const AbortFlag &abort, int &fd,
           std::string &err) {
  Listener &l = listener();
  std::unique_lock<std::mutex> lock(l.m);
  auto key = std::make_tuple(tag, from, peer);
  for (;;) {
    if (auto it = l.parked.find(key); it != l.parked.end()) {
      fd = it->second;
      l.parked.erase(it);
      return true;
    }
    if (abort.load()) {
      err = "aborted while waiting for rank " + std::to_string(from) +
            " to connect";
      return false;
    }
    l.cv.wait_for(lock, std::chrono::milliseconds(kPollMs));
  }
}

namespace {
/// Exactly `n` bytes to (send) or from `fd`, polling `abort`.
bool moveAll(int fd, char *c, size_t n, bool send, const AbortFlag &abort,
             std::string &err) {
  while (n) {
    int w = waitFor(fd, send ? POLLOUT : POLLIN, abort, err);
    if (w <= 0) {
      if (w == 0)
        err = "aborted";
      return false;
    }
    ssize_t k = send ? ::send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT)
                     : ::recv(fd, c, n, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (k <= 0) {
      err = k == 0 && !send
                ? "the peer closed its connection (it may have died)"
                : sysText(send ? "send" : "recv") + " (the peer may have died)";
      return false;
    }
    c += k;
    n -= size_t(k);
  }
  return true;
}
} // namespace

bool sendAll(int fd, const void *p, size_t n, const AbortFlag &abort,
             std::string &err) {
  return moveAll(fd, static_cast<char *>(const_cast<void *>(p)), n, true, abort,
                 err);
}

bool recvAll(int fd, void *p, size_t n, const AbortFlag &abort,
             std::string &err) {
  return moveAll(fd, static_cast<char *>(p), n, false, abort, err);
}

namespace {
/// One direction of one connection in an exchange: its messages in order,
/// each a length header then the payload.
struct Lane {
  std::vector<Message *> queue;
  size_t next = 0, done = 0; ///< message index; bytes of header + payload
  uint64_t header = 0;
  static constexpr size_t H = sizeof(uint64_t);
  bool busy() const { return next < queue.size(); }
  Message &message() { return *queue[next]; }
  /// Where the current message's next bytes go or come from (at most 1
  /// MiB at a time), header first.
  char *cursor(size_t &left) {
    Message &m = message();
    left = std::min<size_t>(done < H ? H - done : m.bytes + H - done, 1 << 20);
    return done < H ? reinterpret_cast<char *>(&header) + done
                    : static_cast<char *>(m.data) + (done - H);
  }
  /// Counts `k` bytes moved; true when the message is complete.
  bool advance(size_t k) {
    if ((done += k) != message().bytes + H)
      return false;
    done = 0;
    ++next;
    return true;
  }
};
} // namespace

bool exchange(std::vector<Message> &messages, const AbortFlag &abort,
              std::string &err) {
  std::map<int, Lane> sends, recvs;
  for (Message &m : messages)
    (m.send ? sends : recvs)[m.fd].queue.push_back(&m);
  auto busy = [](std::map<int, Lane> &lanes) {
    for (auto &[fd, lane] : lanes)
      if (lane.busy())
        return true;
    return false;
  };
  while (busy(sends) || busy(recvs)) {
    if (abort.load()) {
      err = "aborted";
      return false;
    }
    std::vector<pollfd> polls;
    std::map<int, short> want;
    for (auto &[fd, lane] : sends)
      if (lane.busy())
        want[fd] |= POLLOUT;
    for (auto &[fd, lane] : recvs)
      if (lane.busy())
        want[fd] |= POLLIN;
    for (auto &[fd, ev] : want)
      polls.push_back({fd, ev, 0});
    int r = ::poll(polls.data(), polls.size(), kPollMs);
    if (r < 0 && errno != EINTR) {
      err = sysText("poll");
      return false;
    }
    if (r <= 0)
      continue;
    for (pollfd &p : polls) {
      if (p.revents & (POLLOUT | POLLERR | POLLHUP)) {
        auto it = sends.find(p.fd);
        if (it != sends.end() && it->second.busy()) {
          Lane &lane = it->second;
          lane.header = lane.message().bytes;
          size_t left;
          char *src = lane.cursor(left);
          ssize_t k = ::send(p.fd, src, left, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (k < 0 && errno != EAGAIN && errno != EINTR) {
            err = sysText("send") + " to rank " +
                  std::to_string(lane.message().peer) +
                  " of the communicator (it may have died)";
            return false;
          }
          if (k > 0)
            lane.advance(size_t(k));
        }
      }
      if (p.revents & (POLLIN | POLLERR | POLLHUP)) {
        auto it = recvs.find(p.fd);
        if (it == recvs.end() || !it->second.busy())
          continue;
        Lane &lane = it->second;
        Message &m = lane.message();
        size_t left;
        char *dst = lane.cursor(left);
        ssize_t k = ::recv(p.fd, dst, left, MSG_DONTWAIT);
        if (k == 0) {
          err = "rank " + std::to_string(m.peer) +
                " of the communicator closed its connection (it may have "
                "died)";
          return false;
        }
        if (k < 0 && errno != EAGAIN && errno != EINTR) {
          err = sysText("recv") + " from rank " + std::to_string(m.peer);
          return false;
        }
        if (k <= 0)
          continue;
        bool headerDone =
            lane.done < Lane::H && lane.done + size_t(k) >= Lane::H;
        lane.advance(size_t(k));
        if (headerDone && lane.header != m.bytes) {
          err = "rank " + std::to_string(m.peer) + " sent " +
                std::to_string(lane.header) + " bytes where this rank " +
                "receives " + std::to_string(m.bytes) +
                " (mismatched operations)";
          return false;
        }
      }
    }
  }
  return true;
}

bool star(uint64_t tag, int rank, int size, const Address &root,
          const void *mine, size_t n, std::vector<unsigned char> &all,
          const AbortFlag &abort, std::string &err) {
  all.assign(n * size_t(size), 0);
  std::memcpy(all.data() + n * size_t(rank), mine, n);
  if (size == 1)
    return true;
  if (rank != 0) {
    int fd = -1;
    bool ok = connectTo(root, tag, rank, 0, abort, fd, err) &&
              sendAll(fd, mine, n, abort, err) &&
              recvAll(fd, all.data(), all.size(), abort, err);
    if (fd >= 0)
      ::close(fd);
    return ok;
  }
  std::vector<int> fds(size_t(size), -1);
  bool ok = true;
  for (int r = 1; r < size && ok; ++r)
    ok = claim(tag, r, 0, abort, fds[size_t(r)], err) &&
         recvAll(fds[size_t(r)], all.data() + n * size_t(r), n, abort, err);
  for (int r = 1; r < size && ok; ++r)
    ok = sendAll(fds[size_t(r)], all.data(), all.size(), abort, err);
  closeAll(fds);
  return ok;
}

bool mesh(uint64_t tag, int rank, const std::vector<Address> &addresses,
          std::vector<int> &fds, const AbortFlag &abort, std::string &err) {
  fds.assign(addresses.size(), -1);
  for (int j = 0; j < rank; ++j)
    if (!connectTo(addresses[size_t(j)], tag, rank, j, abort, fds[size_t(j)],
                   err)) {
      err = "connecting to rank " + std::to_string(j) + ": " + err;
      closeAll(fds);
      return false;
    }
  for (size_t j = size_t(rank) + 1; j < addresses.size(); ++j)
    if (!claim(tag, int(j), rank, abort, fds[j], err)) {
      closeAll(fds);
      return false;
    }
  return true;
}

void closeAll(std::vector<int> &fds) {
  for (int &fd : fds)
    if (fd >= 0) {
      ::close(fd);
      fd = -1;
    }
}

} // namespace lamina::nccl_emulator
