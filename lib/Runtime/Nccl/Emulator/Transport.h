//===- Transport.h - the NCCL emulator's sockets ----------------*- C++ -*-===//
//
// TCP between the ranks of emulated communicators (NcclApi.cpp). Each process
// has one listener with an accept thread; a connection opens with a hello
// naming the communicator (a 64-bit tag), the connecting rank and the one
// it connects to, and waits,
// parked, until the communicator being built claims it. So ranks may
// connect in any order, and a communicator's connections never mix with
// another's. Every wait polls an abort flag (ncclCommAbort) every 50 ms.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_NCCL_EMULATOR_TRANSPORT_H
#define LAMINA_LIB_RUNTIME_NCCL_EMULATOR_TRANSPORT_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lamina::nccl_emulator {

/// An IPv4 address and port, in network byte order.
struct Address {
  uint32_t ip = 0;
  uint16_t port = 0;
};

/// This process's listener (started on first use): its port, and the
/// address other ranks reach it at (LAMINA_NCCL_EMULATOR_HOST, 127.0.0.1
/// by default: the emulator's ranks share one machine unless told).
bool listenerAddress(Address &out, std::string &err);

using AbortFlag = std::atomic<bool>;

/// Connects to `to` and says hello as rank `from` of communicator `tag`,
/// for its rank `peer` (several ranks may share a process: its threads).
bool connectTo(const Address &to, uint64_t tag, int from, int peer,
               const AbortFlag &abort, int &fd, std::string &err);
/// The connection rank `from` of communicator `tag` made to this
/// process's rank `peer`, once it has arrived.
bool claim(uint64_t tag, int from, int peer, const AbortFlag &abort, int &fd,
           std::string &err);

/// Exactly `n` bytes each way.
bool sendAll(int fd, const void *p, size_t n, const AbortFlag &abort,
             std::string &err);
bool recvAll(int fd, void *p, size_t n, const AbortFlag &abort,
             std::string &err);

/// One message of an exchange: `bytes` to or from the rank at `fd`. Each
/// message travels with its length, so a receive that does not match the
/// peer's send is an error naming both sizes, not misplaced bytes.
struct Message {
  int fd = -1, peer = -1;
  bool send = false;
  void *data = nullptr;
  size_t bytes = 0;
};
/// Runs every message at once (so a ring or an all-to-all cannot deadlock
/// on full socket buffers); between one pair, each direction in order.
bool exchange(std::vector<Message> &messages, const AbortFlag &abort,
              std::string &err);

/// Gathers every rank's `n`-byte `mine` at rank 0 (reached at `root`) and
/// gives all of them, in rank order, to every rank.
bool star(uint64_t tag, int rank, int size, const Address &root,
          const void *mine, size_t n, std::vector<unsigned char> &all,
          const AbortFlag &abort, std::string &err);

/// Connections to every other rank of `addresses` (`fds[rank]` is -1):
/// a rank connects to the lower ranks and claims the higher ones'.
bool mesh(uint64_t tag, int rank, const std::vector<Address> &addresses,
          std::vector<int> &fds, const AbortFlag &abort, std::string &err);

void closeAll(std::vector<int> &fds);

} // namespace lamina::nccl_emulator

#endif // LAMINA_LIB_RUNTIME_NCCL_EMULATOR_TRANSPORT_H
