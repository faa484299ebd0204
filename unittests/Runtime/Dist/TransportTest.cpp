//===- TransportTest.cpp - the distributed runtime's TCP transport --------===//
//
// lamina_transport on loopback connections inside one process: hellos,
// frames, the many-socket exchange (large frames both ways at once, a
// header that does not match, a timeout naming the silent peer, a cancel
// flag) and the errors that name a stranger, a refused connection and a
// peer that closes early.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Dist/Transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <vector>

using namespace lamina::rt::dist::transport;
using lamina::Status;

namespace {

/// Both ends of one loopback connection.
void connectedPair(Socket &a, Socket &b) {
  Socket listener;
  ASSERT_TRUE(listen("127.0.0.1", 0, listener).ok());
  int port = localPort(listener);
  ASSERT_GT(port, 0);
  ASSERT_TRUE(
      connect("127.0.0.1", port, Deadline::after(5), false, "listener", a)
          .ok());
  std::string from;
  ASSERT_TRUE(accept(listener, Deadline::after(5), b, from).ok());
  ASSERT_TRUE(b.valid());
  EXPECT_EQ(from.rfind("peer 127.0.0.1:", 0), 0u) << from;
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Transport, HelloAndFrames) {
  Socket a, b;
  connectedPair(a, b);
  Deadline d = Deadline::after(5);
  ASSERT_TRUE(sendHello(a, {3, 1, 0x123456789abcull}, d, "b").ok());
  Hello h;
  ASSERT_TRUE(recvHello(b, d, "a", h).ok());
  EXPECT_EQ(h.from, 3u);
  EXPECT_EQ(h.to, 1u);
  EXPECT_EQ(h.purpose, 0x123456789abcull);

  // A small frame goes in one write, a large one after its header.
  for (size_t n : {size_t(5), size_t(1) << 20}) {
    std::vector<unsigned char> out(n), in(n);
    std::iota(out.begin(), out.end(), 7);
    std::thread sender([&] {
      EXPECT_TRUE(sendFrame(a, {4, 9, n}, out.data(), d, "b").ok());
    });
    FrameHeader fh;
    ASSERT_TRUE(recvHeader(b, fh, d, "a").ok());
    EXPECT_EQ(fh.kind, 4u);
    EXPECT_EQ(fh.tag, 9u);
    EXPECT_EQ(fh.length, n);
    ASSERT_TRUE(recvAll(b, in.data(), n, d, "a").ok());
    sender.join();
    EXPECT_EQ(in, out);
  }
}

TEST(Transport, ExchangeMovesLargeFramesBothWaysAtOnce) {
  // Each side sends 16 MiB before it receives: more than the socket
  // buffers hold, so this deadlocks unless both directions move together.
  Socket a, b;
  connectedPair(a, b);
  const size_t n = size_t(16) << 20;
  std::vector<char> fromA(n, 'a'), fromB(n, 'b'), atA(n), atB(n);
  fromA[n - 1] = 'z';
  std::string small;
  char hello[] = "hello";
  auto side = [&](const Socket &s, int peer, std::vector<char> &out,
                  std::vector<char> &in, bool withSmall) {
    std::vector<Transfer> ts(2);
    ts[0] = {s.fd(), peer, true, 1, 0, out.data(), n, nullptr};
    ts[1] = {s.fd(), peer, false, 1, 0, in.data(), n, nullptr};
    if (withSmall) // then a frame of any length, into a string
      ts.push_back({s.fd(), peer, false, 2, 5, nullptr, kAnyLength, &small});
    else
      ts.push_back({s.fd(), peer, true, 2, 5, hello, 5, nullptr});
    return exchangeFrames(ts, Deadline::after(30));
  };
  Status sa, sb;
  std::thread ta([&] { sa = side(a, 1, fromA, atA, false); });
  sb = side(b, 0, fromB, atB, true);
  ta.join();
  ASSERT_TRUE(sa.ok()) << sa.message();
  ASSERT_TRUE(sb.ok()) << sb.message();
  EXPECT_EQ(atA, fromB);
  EXPECT_EQ(atB, fromA);
  EXPECT_EQ(small, "hello");
}

TEST(Transport, ExchangeChecksTheHeaderFirst) {
  Socket a, b;
  connectedPair(a, b);
  char eight[8] = {}, four[4];
  std::vector<Transfer> send = {{a.fd(), 1, true, 1, 0, eight, 8, nullptr}};
  ASSERT_TRUE(exchangeFrames(send, Deadline::after(5)).ok());
  std::vector<Transfer> recv = {{b.fd(), 0, false, 1, 0, four, 4, nullptr}};
  ExchangeFailure why;
  Status s = exchangeFrames(recv, Deadline::after(5), &why);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(why.reason, ExchangeFailure::BadHeader);
  EXPECT_EQ(why.peer, 0);
  EXPECT_EQ(why.transfer, &recv[0]);
  EXPECT_EQ(why.header.length, 8u);
  EXPECT_NE(s.message().find("rank 0 sent a frame of kind 1, tag 0, 8 bytes"),
            std::string::npos)
      << s.message();
}

TEST(Transport, ExchangeTimesOutNamingTheSilentPeers) {
  Socket a1, b1, a2, b2;
  connectedPair(a1, b1);
  connectedPair(a2, b2);
  char one = 1, x, y;
  std::vector<Transfer> send = {{a1.fd(), 0, true, 1, 0, &one, 1, nullptr}};
  ASSERT_TRUE(exchangeFrames(send, Deadline::after(5)).ok());
  // Rank 2 has sent, rank 3 never does.
  std::vector<Transfer> recv = {{b1.fd(), 2, false, 1, 0, &x, 1, nullptr},
                                {b2.fd(), 3, false, 1, 0, &y, 1, nullptr}};
  ExchangeFailure why;
  auto start = Clock::now();
  Status s = exchangeFrames(recv, Deadline::after(0.2), &why);
  EXPECT_GE(secondsSince(start), 0.19);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(why.reason, ExchangeFailure::TimedOut);
  EXPECT_EQ(why.pending, std::vector<int>{3});
  EXPECT_EQ(s.message(), "timed out after 0.2 s waiting for rank 3");
  EXPECT_EQ(x, 1);
}

TEST(Transport, ACancelFlagEndsEveryWait) {
  Socket a, b;
  connectedPair(a, b);
  std::atomic<bool> cancel{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
  });
  Deadline d = Deadline().orCancelled(cancel);
  char c;
  std::vector<Transfer> recv = {{b.fd(), 0, false, 1, 0, &c, 1, nullptr}};
  ExchangeFailure why;
  auto start = Clock::now();
  EXPECT_FALSE(exchangeFrames(recv, d, &why).ok());
  EXPECT_EQ(why.reason, ExchangeFailure::Cancelled);
  Status s = recvAll(b, &c, 1, d, "rank 0");
  EXPECT_EQ(s.message(),
            "reading from rank 0 was cancelled (0 of 1 bytes read)");
  EXPECT_LT(secondsSince(start), 5);
  setter.join();
}

TEST(Transport, NamesAStrangerARefusalAndAnEarlyClose) {
  Socket a, b;
  connectedPair(a, b);
  const char junk[] = "GET / HTTP/1.0\r\n";
  ASSERT_TRUE(sendAll(a, junk, sizeof junk - 1, Deadline::after(5), "b").ok());
  Hello h;
  Status s = recvHello(b, Deadline::after(5), "peer X", h);
  EXPECT_EQ(s.message().rfind("peer X sent magic 0x47455420, not a Lamina "
                              "launch peer (is another program using "
                              "127.0.0.1:",
                              0),
            0u)
      << s.message();

  ASSERT_TRUE(sendAll(a, "abc", 3, Deadline::after(5), "b").ok());
  ::shutdown(a.fd(), SHUT_WR);
  char buf[8];
  std::string rest(12, '\0'); // the junk recvHello left unread
  ASSERT_TRUE(
      recvAll(b, rest.data(), rest.size(), Deadline::after(5), "a").ok());
  s = recvAll(b, buf, 8, Deadline::after(5), "rank 1");
  EXPECT_EQ(s.message(), "rank 1 closed the connection after 3 of 8 bytes");

  // A port nobody listens on: retried until the deadline, then named.
  Socket l;
  ASSERT_TRUE(listen("127.0.0.1", 0, l).ok());
  int port = localPort(l);
  l.close();
  Socket c;
  auto start = Clock::now();
  s = connect("127.0.0.1", port, Deadline::after(0.3), true, "rank 0", c);
  EXPECT_GE(secondsSince(start), 0.29);
  EXPECT_EQ(s.message(), "could not connect to rank 0 within 0.3 s (last "
                         "error: Connection refused)");
  s = connect("127.0.0.1", port, Deadline::after(5), false, "rank 0", c);
  EXPECT_EQ(s.message(), "could not connect to rank 0 (Connection refused)");
}

} // namespace
