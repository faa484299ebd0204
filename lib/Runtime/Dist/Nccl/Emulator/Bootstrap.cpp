//===- Bootstrap.cpp - how the NCCL emulator's ranks connect --------------===//
//
// See Bootstrap.h.
//
//===----------------------------------------------------------------------===//

#include "Bootstrap.h"

#include <arpa/inet.h>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

namespace lamina::rt::dist::nccl::emulator {

using namespace transport;

namespace {

constexpr int kPollMs = 50;

struct Listener {
  Socket socket;
  uint16_t port = 0; ///< network byte order
  std::string error;
  std::mutex m;
  std::condition_variable cv;
  /// Connections that said hello, by (tag, from, to), until claimed.
  std::map<std::tuple<uint64_t, int, int>, Socket> parked;
};

/// Reads the hello of a new connection (5 s at most) and parks it; a
/// connection without one is dropped.
void admit(Listener &l, Socket c, std::string who) {
  Hello h;
  if (!recvHello(c, Deadline::after(5), who, h).ok())
    return;
  std::lock_guard<std::mutex> lock(l.m);
  l.parked[std::make_tuple(h.purpose, int(h.from), int(h.to))] = std::move(c);
  l.cv.notify_all();
}

void acceptLoop(Listener *l) {
  for (;;) {
    Socket c;
    std::string who;
    if (!accept(l->socket, Deadline(), c, who).ok() || !c.valid()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kPollMs));
      continue;
    }
    std::thread(admit, std::ref(*l), std::move(c), std::move(who)).detach();
  }
}

/// Never destroyed: the accept thread runs until the process ends.
Listener &listener() {
  static Listener *l = [] {
    auto *l = new Listener;
    if (Status s = listen("0.0.0.0", 0, l->socket); !s.ok()) {
      l->error = s.message();
      return l;
    }
    l->port = htons(uint16_t(localPort(l->socket)));
    std::thread(acceptLoop, l).detach();
    return l;
  }();
  return *l;
}

/// Connects to `to` and says hello as rank `from` of communicator `tag`,
/// for its rank `peer`.
Status connectTo(const Address &to, uint64_t tag, int from, int peer,
                 const AbortFlag &abort, Socket &out) {
  char ip[INET_ADDRSTRLEN] = "?";
  in_addr a{};
  a.s_addr = to.ip;
  inet_ntop(AF_INET, &a, ip, sizeof ip);
  int port = ntohs(to.port);
  std::string who =
      "rank " + std::to_string(peer) + " at " + ip + ":" + std::to_string(port);
  Deadline d = Deadline().orCancelled(abort);
  Status s = connect(ip, port, d, /*retry=*/false, who, out);
  if (s.ok())
    s = sendHello(out, {uint32_t(from), uint32_t(peer), tag}, d, who);
  if (!s.ok())
    out.close();
  return s;
}

/// The connection rank `from` of communicator `tag` made to this
/// process's rank `peer`, once it has arrived.
Status claim(uint64_t tag, int from, int peer, const AbortFlag &abort,
             Socket &out) {
  Listener &l = listener();
  std::unique_lock<std::mutex> lock(l.m);
  auto key = std::make_tuple(tag, from, peer);
  for (;;) {
    if (auto it = l.parked.find(key); it != l.parked.end()) {
      out = std::move(it->second);
      l.parked.erase(it);
      return Status::success();
    }
    if (abort.load())
      return Status::error("aborted while waiting for rank " +
                           std::to_string(from) + " to connect");
    l.cv.wait_for(lock, std::chrono::milliseconds(kPollMs));
  }
}

} // namespace

Status listenerAddress(Address &out) {
  Listener &l = listener();
  if (!l.error.empty())
    return Status::error("the emulator's listener: " + l.error);
  const char *host = std::getenv("LAMINA_NCCL_EMULATOR_HOST");
  in_addr ip{};
  if (inet_pton(AF_INET, host && *host ? host : "127.0.0.1", &ip) != 1)
    return Status::error(std::string("LAMINA_NCCL_EMULATOR_HOST=") + host +
                         " is not an IPv4 address");
  out.ip = ip.s_addr;
  out.port = l.port;
  return Status::success();
}

Status star(uint64_t tag, int rank, int size, const Address &root,
            const void *mine, size_t n, std::vector<unsigned char> &all,
            const AbortFlag &abort) {
  all.assign(n * size_t(size), 0);
  std::memcpy(all.data() + n * size_t(rank), mine, n);
  if (size == 1)
    return Status::success();
  Deadline d = Deadline().orCancelled(abort);
  if (rank != 0) {
    Socket s;
    Status st = connectTo(root, tag, rank, 0, abort, s);
    if (st.ok())
      st = sendAll(s, mine, n, d, "rank 0");
    if (st.ok())
      st = recvAll(s, all.data(), all.size(), d, "rank 0");
    return st;
  }
  std::vector<Socket> links(static_cast<size_t>(size));
  for (int r = 1; r < size; ++r) {
    std::string who = "rank " + std::to_string(r);
    Status st = claim(tag, r, 0, abort, links[size_t(r)]);
    if (st.ok())
      st = recvAll(links[size_t(r)], all.data() + n * size_t(r), n, d, who);
    if (!st.ok())
      return st;
  }
  for (int r = 1; r < size; ++r)
    if (Status st = sendAll(links[size_t(r)], all.data(), all.size(), d,
                            "rank " + std::to_string(r));
        !st.ok())
      return st;
  return Status::success();
}

Status mesh(uint64_t tag, int rank, const std::vector<Address> &addresses,
            std::vector<Socket> &links, const AbortFlag &abort) {
  links.clear();
  links.resize(addresses.size());
  for (int j = 0; j < rank; ++j)
    if (Status s = connectTo(addresses[size_t(j)], tag, rank, j, abort,
                             links[size_t(j)]);
        !s.ok()) {
      links.clear();
      return Status::error("connecting to rank " + std::to_string(j) + ": " +
                           s.message());
    }
  for (size_t j = size_t(rank) + 1; j < addresses.size(); ++j)
    if (Status s = claim(tag, int(j), rank, abort, links[j]); !s.ok()) {
      links.clear();
      return s;
    }
  return Status::success();
}

} // namespace lamina::rt::dist::nccl::emulator
