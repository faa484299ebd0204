//===- Frames.cpp - frames, one at a time or many at once -----------------===//
//
// See include/lamina/Runtime/Dist/Transport.h. exchangeFrames() keeps, per
// socket and direction, a lane of transfers in order and moves at most 1 MiB
// per lane per poll round, so every socket gets its turn; a send writes the
// header and the payload in one call (sendmsg).
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Dist/Transport.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

namespace lamina::rt::dist::transport {

void packHeader(const FrameHeader &h, unsigned char *out) {
  putBE(out, h.kind, 4);
  putBE(out + 4, h.tag, 4);
  putBE(out + 8, h.length, 8);
}

FrameHeader unpackHeader(const unsigned char *in) {
  return FrameHeader{uint32_t(getBE(in, 4)), uint32_t(getBE(in + 4, 4)),
                     getBE(in + 8, 8)};
}

Status sendFrame(const Socket &s, const FrameHeader &h, const void *payload,
                 const Deadline &deadline, const std::string &peer) {
  // Small frames in one write (one segment); large ones after the header.
  constexpr uint64_t kWhole = 65536;
  std::vector<unsigned char> frame(kFrameHeaderSize);
  packHeader(h, frame.data());
  bool whole = h.length <= kWhole;
  if (whole && h.length)
    frame.insert(frame.end(), static_cast<const unsigned char *>(payload),
                 static_cast<const unsigned char *>(payload) + h.length);
  Status st = sendAll(s, frame.data(), frame.size(), deadline, peer);
  if (st.ok() && !whole)
    st = sendAll(s, payload, size_t(h.length), deadline, peer);
  return st;
}

Status recvHeader(const Socket &s, FrameHeader &out, const Deadline &deadline,
                  const std::string &peer) {
  unsigned char head[kFrameHeaderSize];
  if (Status st = recvAll(s, head, kFrameHeaderSize, deadline, peer); !st.ok())
    return st;
  out = unpackHeader(head);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// exchange
//===----------------------------------------------------------------------===//

namespace {

constexpr size_t kH = kFrameHeaderSize;
/// Bytes a lane may move per poll round.
constexpr size_t kRoundBytes = size_t(1) << 20;

std::string rankText(int peer) { return "rank " + std::to_string(peer); }

std::string errnoText(int err) { return std::strerror(err); }

/// One direction of one socket: its transfers in order, and how far the
/// current one is (bytes of header + payload).
struct Lane {
  std::vector<Transfer *> queue;
  size_t next = 0, done = 0;
  /// The current frame's payload length (a receive: once its header is in).
  uint64_t length = 0;
  unsigned char head[kH];
  bool busy() const { return next < queue.size(); }
  Transfer &current() { return *queue[next]; }
  /// Counts `k` more bytes; true when the current frame is complete.
  bool advance(size_t k) {
    done += k;
    if (done < kH || done != kH + length)
      return false;
    done = 0;
    ++next;
    return true;
  }
};

/// What stopped an exchange: the Status, with the reason when asked for.
Status fail(ExchangeFailure *why, ExchangeFailure::Reason reason,
            const Transfer *t, const std::string &text) {
  if (why) {
    why->reason = reason;
    why->transfer = t;
    why->peer = t ? t->peer : -1;
  }
  return Status::error(text);
}

/// Writes what `fd` takes of `lane`'s frames (header and payload together).
Status pump(int fd, Lane &lane, ExchangeFailure *why) {
  size_t budget = kRoundBytes;
  while (lane.busy() && budget) {
    Transfer &t = lane.current();
    if (lane.done == 0) {
      lane.length = t.bytes;
      packHeader({t.kind, t.tag, t.bytes}, lane.head);
    }
    iovec iov[2];
    int pieces = 0;
    size_t offset = 0;
    if (lane.done < kH)
      iov[pieces++] = {lane.head + lane.done, kH - lane.done};
    else
      offset = lane.done - kH;
    size_t payload = std::min<size_t>(t.bytes - offset, budget);
    if (payload)
      iov[pieces++] = {static_cast<char *>(t.data) + offset, payload};
    size_t want = payload + (lane.done < kH ? kH - lane.done : 0);
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = size_t(pieces);
    ssize_t k = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return Status::success();
      return fail(why, ExchangeFailure::SystemError, &t,
                  "sending to " + rankText(t.peer) + ": " + errnoText(errno));
    }
    budget -= std::min(budget, size_t(k));
    if (!lane.advance(size_t(k)) && size_t(k) < want)
      return Status::success(); // the socket is full
  }
  return Status::success();
}

/// Reads what `fd` has of `lane`'s frames, checking each header first.
Status drain(int fd, Lane &lane, ExchangeFailure *why) {
  size_t budget = kRoundBytes;
  while (lane.busy() && budget) {
    Transfer &t = lane.current();
    char *dst;
    size_t want;
    if (lane.done < kH) {
      dst = reinterpret_cast<char *>(lane.head) + lane.done;
      want = kH - lane.done;
    } else {
      size_t offset = lane.done - kH;
      dst = (t.into ? t.into->data() : static_cast<char *>(t.data)) + offset;
      want = std::min<size_t>(size_t(lane.length) - offset, budget);
    }
    ssize_t k = ::recv(fd, dst, want, MSG_DONTWAIT);
    if (k == 0)
      return fail(why, ExchangeFailure::Closed, &t,
                  rankText(t.peer) + " closed the connection");
    if (k < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return Status::success();
      return fail(why, ExchangeFailure::SystemError, &t,
                  "reading from " + rankText(t.peer) + ": " + errnoText(errno));
    }
    bool headerIn = lane.done < kH && lane.done + size_t(k) == kH;
    if (lane.done >= kH)
      budget -= std::min(budget, size_t(k));
    if (headerIn) {
      FrameHeader h = unpackHeader(lane.head);
      bool any = t.into && t.bytes == kAnyLength;
      if (h.kind != t.kind || h.tag != t.tag || (!any && h.length != t.bytes) ||
          h.length > kMaxFrameLength) {
        if (why)
          why->header = h;
        return fail(
            why, ExchangeFailure::BadHeader, &t,
            rankText(t.peer) + " sent a frame of kind " +
                std::to_string(h.kind) + ", tag " + std::to_string(h.tag) +
                ", " + std::to_string(h.length) + " bytes where kind " +
                std::to_string(t.kind) + ", tag " + std::to_string(t.tag) +
                (any ? "" : ", " + std::to_string(t.bytes) + " bytes") +
                " was expected");
      }
      lane.length = h.length;
      if (t.into)
        t.into->resize(size_t(h.length));
    }
    if (!lane.advance(size_t(k)) && size_t(k) < want)
      return Status::success(); // nothing more there yet
  }
  return Status::success();
}

} // namespace

Status exchangeFrames(std::vector<Transfer> &transfers,
                      const Deadline &deadline, ExchangeFailure *why) {
  std::map<int, Lane> sends, recvs;
  for (Transfer &t : transfers)
    (t.send ? sends : recvs)[t.fd].queue.push_back(&t);
  std::vector<pollfd> polls;
  for (;;) {
    std::map<int, short> want;
    for (auto &[fd, lane] : sends)
      if (lane.busy())
        want[fd] |= POLLOUT;
    for (auto &[fd, lane] : recvs)
      if (lane.busy())
        want[fd] |= POLLIN;
    if (want.empty())
      return Status::success();
    if (deadline.cancelled())
      return fail(why, ExchangeFailure::Cancelled, nullptr, "cancelled");
    polls.clear();
    for (auto &[fd, events] : want)
      polls.push_back({fd, events, 0});
    int r = ::poll(polls.data(), polls.size(), deadline.pollMs());
    if (r < 0 && errno != EINTR)
      return fail(why, ExchangeFailure::SystemError, nullptr,
                  "poll: " + errnoText(errno));
    if (r == 0 && deadline.passed()) {
      std::vector<int> pending;
      for (Transfer &t : transfers) {
        Lane &lane = (t.send ? sends : recvs)[t.fd];
        bool done = false;
        for (size_t i = 0; i < lane.next; ++i)
          done |= lane.queue[i] == &t;
        if (!done &&
            std::find(pending.begin(), pending.end(), t.peer) == pending.end())
          pending.push_back(t.peer);
      }
      std::string names;
      for (int p : pending)
        names += (names.empty() ? "" : ", ") + std::to_string(p);
      if (why)
        why->pending = pending;
      return fail(why, ExchangeFailure::TimedOut, nullptr,
                  "timed out after " + secondsText(deadline.seconds()) +
                      " waiting for rank" + (pending.size() > 1 ? "s " : " ") +
                      names);
    }
    if (r <= 0)
      continue;
    for (const pollfd &p : polls) {
      if (p.revents & (POLLOUT | POLLERR | POLLHUP))
        if (auto it = sends.find(p.fd); it != sends.end())
          if (Status s = pump(p.fd, it->second, why); !s.ok())
            return s;
      if (p.revents & (POLLIN | POLLERR | POLLHUP))
        if (auto it = recvs.find(p.fd); it != recvs.end())
          if (Status s = drain(p.fd, it->second, why); !s.ok())
            return s;
    }
  }
}

} // namespace lamina::rt::dist::transport
