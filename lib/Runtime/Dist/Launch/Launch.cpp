//===- Launch.cpp - launcher variables and the TCP rendezvous -------------===//
//
// See include/lamina/Runtime/Dist/Launch.h. Every wait of a call is bounded by
// its one deadline (lamina_transport's Deadline).
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Dist/Launch.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace lamina::rt::dist {

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
// The star
//===----------------------------------------------------------------------===//

using namespace transport;

namespace {

std::string masterText(const LaunchEnv &env, int port) {
  return env.masterAddr + ":" + std::to_string(port);
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
                  const Deadline &deadline, std::vector<Socket> &peers) {
  const std::string where = masterText(env, port);
  Socket listener;
  if (Status s = listen(env.masterAddr, port, listener); !s.ok())
    return Status::error("rank 0: " + s.message());
  peers.clear();
  peers.resize(size_t(env.worldSize));
  int arrived = 0;
  while (arrived < env.worldSize - 1) {
    Socket conn;
    std::string who;
    if (Status s = accept(listener, deadline, conn, who); !s.ok())
      return Status::error("rank 0: on " + where + ": " + s.message());
    if (!conn.valid()) {
      std::string missing;
      for (int r = 1; r < env.worldSize; ++r)
        if (!peers[size_t(r)].valid())
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return Status::error(
          "rank 0: " + std::to_string(env.worldSize - 1 - arrived) + " of " +
          std::to_string(env.worldSize - 1) + " ranks did not connect to " +
          where + " within " + secondsText(deadline.seconds()) +
          " (missing: " + missing + ")");
    }
    Hello hello;
    if (Status s = recvHello(conn, deadline, who, hello); !s.ok())
      return Status::error("rank 0: " + s.message());
    uint64_t rank = hello.from;
    if (rank == 0 || rank >= uint64_t(env.worldSize))
      return Status::error("rank 0: " + who + " says it is rank " +
                           std::to_string(rank) + ", not in [1, " +
                           std::to_string(env.worldSize) + ")");
    if (peers[rank].valid())
      return Status::error("rank 0: " + who + " says it is rank " +
                           std::to_string(rank) +
                           ", which already connected (duplicate rank)");
    if (hello.purpose != purpose) {
      std::string head =
          "rank 0: rank " + std::to_string(rank) + " (" + who + ") ";
      if (!(hello.purpose >> 63) && !(purpose >> 63))
        return Status::error(head + "expects " + std::to_string(hello.purpose) +
                             " bytes, rank 0 broadcasts " +
                             std::to_string(purpose));
      return Status::error(head + "connected for " +
                           purposeText(hello.purpose) +
                           ", rank 0 listens for " + purposeText(purpose) +
                           " (is another program using " + where + "?)");
    }
    peers[rank] = std::move(conn);
    ++arrived;
  }
  return Status::success();
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
  Deadline deadline = Deadline::after(timeoutSeconds);
  if (env.rank == 0)
    return rootAccept(env, port, purpose, deadline, links);

  std::string prefix = "rank " + std::to_string(env.rank) + ": ";
  std::string root = "rank 0 at " + masterText(env, port);
  Socket s;
  Status st = connect(env.masterAddr, port, deadline, /*retry=*/true, root, s);
  if (st.ok())
    st = sendHello(s, {uint32_t(env.rank), 0, purpose}, deadline, root);
  if (!st.ok())
    return Status::error(prefix + st.message());
  links.resize(1);
  links[0] = std::move(s);
  return Status::success();
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
  Deadline deadline = Deadline::after(timeoutSeconds);
  int port = 0;
  if (Status s = rendezvousPort(env, port); !s.ok())
    return s;
  std::vector<Socket> links;
  if (Status s = connectStar(env, port, n, timeoutSeconds, links); !s.ok())
    return s;
  // The bytes go out under what is left of the one deadline.
  if (env.rank == 0) {
    for (int r = 1; r < env.worldSize; ++r)
      if (Status s = sendAll(links[size_t(r)], data, n, deadline,
                             "rank " + std::to_string(r));
          !s.ok())
        return Status::error("rank 0: " + s.message());
    return Status::success();
  }
  std::string root = "rank 0 at " + masterText(env, port);
  if (Status s = recvAll(links[0], data, n, deadline, root); !s.ok())
    return Status::error("rank " + std::to_string(env.rank) + ": " +
                         s.message());
  return Status::success();
}

int freeLoopbackPort() {
  Socket s;
  if (!listen("127.0.0.1", 0, s).ok())
    return 0;
  return localPort(s);
}

} // namespace lamina::rt::dist
