//===- Bootstrap.h - how the NCCL emulator's ranks connect ------*- C++ -*-===//
//
// The connections of emulated communicators (NcclApi.cpp), over
// lamina_transport (lamina/Runtime/Dist/Transport.h). Each process has one
// listener with an accept thread; a connection opens with the transport's
// hello naming the communicator (the purpose: a 64-bit tag), the
// connecting rank and the one it is for, and waits, parked, until the
// communicator being built claims it. So ranks may connect in any order,
// several ranks may share a process (its threads), and a communicator's
// connections never mix with another's. Every wait ends when the
// communicator's abort flag is set (ncclCommAbort).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_NCCL_EMULATOR_BOOTSTRAP_H
#define LAMINA_LIB_RUNTIME_DIST_NCCL_EMULATOR_BOOTSTRAP_H

#include "lamina/Runtime/Dist/Transport.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lamina::rt::dist::nccl::emulator {

using transport::Socket;
using AbortFlag = std::atomic<bool>;

/// An IPv4 address and port, in network byte order (as the unique id
/// carries it).
struct Address {
  uint32_t ip = 0;
  uint16_t port = 0;
};

/// This process's listener (started on first use): its port, and the
/// address other ranks reach it at (LAMINA_NCCL_EMULATOR_HOST, 127.0.0.1
/// by default: the emulator's ranks share one machine unless told).
Status listenerAddress(Address &out);

/// Gathers every rank's `n`-byte `mine` at rank 0 (reached at `root`) and
/// gives all of them, in rank order, to every rank.
Status star(uint64_t tag, int rank, int size, const Address &root,
            const void *mine, size_t n, std::vector<unsigned char> &all,
            const AbortFlag &abort);

/// Connections to every other rank of `addresses` (`links[rank]` stays
/// empty): a rank connects to the lower ranks and claims the higher ones'.
Status mesh(uint64_t tag, int rank, const std::vector<Address> &addresses,
            std::vector<Socket> &links, const AbortFlag &abort);

} // namespace lamina::rt::dist::nccl::emulator

#endif // LAMINA_LIB_RUNTIME_DIST_NCCL_EMULATOR_BOOTSTRAP_H
