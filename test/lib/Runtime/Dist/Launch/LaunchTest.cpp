//===- LaunchTest.cpp - launcher variables and rendezvous, forked ranks ---===//
//
// `lamina-launch-test --world N --port P [--timeout S]` forks N ranks with
// torchrun-style, then mpirun-style, then Slurm-style variables; rank 0
// broadcasts 128 random bytes (an ncclUniqueId's size) and every rank checks
// it got them ("ok: ..." lines). Then the failures, each printed as
// "<case>: <the error>": variables missing or malformed, a rank that never
// arrives, a rank 0 that never starts, a size mismatch, a duplicate rank and
// a stranger on the port -- each must fail, and the timeouts within 1 s plus
// slack. Port 0 picks a free port per case (retried if another program
// takes it first). Exits non-zero when an expectation fails
// (test/Runtime/Dist/launch.test).
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Dist/Launch.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <random>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

using lamina::rt::Status;
using lamina::rt::dist::LaunchEnv;

namespace {

constexpr size_t kBytes = 128;
using Vars = std::vector<std::pair<std::string, std::string>>;

/// One forked process: its variables, how many bytes it expects, and
/// whether it is a stranger that sends junk instead of the hello.
struct Child {
  Vars vars;
  size_t n = kBytes;
  bool stranger = false;
};

struct Outcome {
  std::vector<std::string> errors; // per child, empty when it succeeded
  double seconds = 0;
};

const char *const kAllVars[] = {"RANK",
                                "WORLD_SIZE",
                                "LOCAL_RANK",
                                "OMPI_COMM_WORLD_RANK",
                                "OMPI_COMM_WORLD_SIZE",
                                "OMPI_COMM_WORLD_LOCAL_RANK",
                                "SLURM_PROCID",
                                "SLURM_NTASKS",
                                "SLURM_LOCALID",
                                "MASTER_ADDR",
                                "MASTER_PORT",
                                "LAMINA_CONTROL_PORT"};

/// Connects to 127.0.0.1:port (retrying for a second) and sends junk.
std::string beStranger(int port) {
  for (int i = 0; i < 100; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0) {
      const char junk[] = "GET / HTTP/1.0\r\n";
      ssize_t w = ::write(fd, junk, sizeof junk - 1);
      char c;
      ssize_t r = ::read(fd, &c, 1); // until rank 0 closes
      ::close(fd);
      return w == sizeof junk - 1 && r <= 0 ? "" : "stranger: unexpected";
    }
    ::close(fd);
    ::usleep(10000);
  }
  return "stranger: could not connect";
}

/// The child's work: read the variables, take part in the broadcast,
/// compare. Returns the error text, empty on success.
std::string runChild(const Child &c, const unsigned char *expected,
                     double timeout, int port) {
  if (c.stranger)
    return beStranger(port);
  LaunchEnv env;
  if (Status s = lamina::rt::dist::readLaunchEnv(env); !s.ok())
    return s.message();
  std::vector<unsigned char> buf(c.n, 0);
  if (env.rank == 0)
    std::memcpy(buf.data(), expected, std::min(c.n, kBytes));
  if (Status s =
          lamina::rt::dist::broadcastBytes(env, buf.data(), c.n, timeout);
      !s.ok())
    return s.message();
  if (c.n != kBytes || std::memcmp(buf.data(), expected, kBytes) != 0)
    return "rank " + std::to_string(env.rank) + ": wrong bytes received";
  return "";
}

Outcome runChildren(const std::vector<Child> &children,
                    const unsigned char *expected, double timeout, int port) {
  Outcome out;
  auto start = std::chrono::steady_clock::now();
  std::vector<std::pair<pid_t, int>> procs;
  for (const Child &c : children) {
    int fds[2];
    if (::pipe(fds) != 0) {
      std::perror("pipe");
      std::exit(2);
    }
    std::fflush(stdout);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      ::alarm(static_cast<unsigned>(timeout) + 10); // never hang the test
      for (const char *v : kAllVars)
        ::unsetenv(v);
      for (const auto &[k, v] : c.vars)
        ::setenv(k.c_str(), v.c_str(), 1);
      std::string err = runChild(c, expected, timeout, port);
      ssize_t w = ::write(fds[1], err.data(), err.size());
      (void)w;
      ::_exit(err.empty() ? 0 : 1);
    }
    ::close(fds[1]);
    procs.push_back({pid, fds[0]});
  }
  for (auto &[pid, fd] : procs) {
    std::string text;
    char buf[512];
    ssize_t r;
    while ((r = ::read(fd, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
      if (r > 0)
        text.append(buf, static_cast<size_t>(r));
    ::close(fd);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (text.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      text = "child died (status " + std::to_string(status) + ")";
    out.errors.push_back(text);
  }
  out.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return out;
}

Vars varsFor(const std::string &style, int rank, int world, int port) {
  Vars v;
  std::string r = std::to_string(rank), w = std::to_string(world);
  if (style == "torchrun")
    v = {{"RANK", r}, {"WORLD_SIZE", w}, {"LOCAL_RANK", r}};
  else if (style == "mpirun")
    v = {{"OMPI_COMM_WORLD_RANK", r},
         {"OMPI_COMM_WORLD_SIZE", w},
         {"OMPI_COMM_WORLD_LOCAL_RANK", r}};
  else
    v = {{"SLURM_PROCID", r}, {"SLURM_NTASKS", w}, {"SLURM_LOCALID", r}};
  v.push_back({"MASTER_ADDR", "127.0.0.1"});
  // broadcastBytes listens on MASTER_PORT + 1 (rendezvousPort, Launch.h).
  v.push_back({"MASTER_PORT", std::to_string(port - 1)});
  return v;
}

int failures = 0;
int fixedPort = 0;
unsigned char expected[kBytes];

/// Runs `make(port)`'s children on a port (a fresh free one per attempt
/// when --port is 0), retrying when the port turned out to be taken.
template <typename Make> Outcome onPort(Make make, double timeout) {
  Outcome o;
  for (int attempt = 0; attempt < 3; ++attempt) {
    int port = fixedPort ? fixedPort : lamina::rt::dist::freeLoopbackPort();
    o = runChildren(make(port), expected, timeout, port);
    bool taken = false;
    for (const std::string &e : o.errors)
      taken |= e.find("Address already in use") != std::string::npos;
    if (!taken || fixedPort)
      break;
  }
  return o;
}

/// With `controlPort`, the port comes from LAMINA_CONTROL_PORT and
/// MASTER_PORT points elsewhere (as under torchrun, whose store holds it).
void expectSuccess(const std::string &style, int world, double timeout,
                   bool controlPort = false) {
  Outcome o = onPort(
      [&](int port) {
        std::vector<Child> cs(static_cast<size_t>(world));
        for (int r = 0; r < world; ++r) {
          cs[r].vars = varsFor(style, r, world, port);
          if (controlPort) {
            for (auto &kv : cs[r].vars)
              if (kv.first == "MASTER_PORT")
                kv.second = "9";
            cs[r].vars.push_back({"LAMINA_CONTROL_PORT", std::to_string(port)});
          }
        }
        return cs;
      },
      timeout);
  bool ok = true;
  for (size_t r = 0; r < o.errors.size(); ++r)
    if (!o.errors[r].empty()) {
      std::printf("FAIL: %s, child %zu: %s\n", style.c_str(), r,
                  o.errors[r].c_str());
      ok = false;
    }
  if (ok)
    std::printf("ok: %s%s broadcast of %zu bytes to %d ranks\n", style.c_str(),
                controlPort ? " (LAMINA_CONTROL_PORT)" : "", kBytes, world);
  else
    ++failures;
}

/// Prints child `which`'s error as "<name>: <error>"; it must have failed,
/// within `maxSeconds` when that is positive.
void expectFailure(const char *name, const Outcome &o, size_t which,
                   double maxSeconds = 0) {
  const std::string &e = o.errors[which];
  std::printf("%s: %s\n", name, e.empty() ? "(no error)" : e.c_str());
  if (e.empty()) {
    std::printf("FAIL: %s succeeded\n", name);
    ++failures;
  }
  if (maxSeconds > 0 && o.seconds > maxSeconds) {
    std::printf("FAIL: %s took %.1f s, more than %.1f s\n", name, o.seconds,
                maxSeconds);
    ++failures;
  }
}

/// One child with `vars` (readLaunchEnv fails before any socket).
void expectEnvError(const char *name, Vars vars) {
  Child c;
  c.vars = std::move(vars);
  expectFailure(name, runChildren({c}, expected, 1, 0), 0);
}

} // namespace

int main(int argc, char **argv) {
  int world = 4;
  double timeout = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--world")
      world = std::atoi(argv[i + 1]);
    else if (a == "--port")
      fixedPort = std::atoi(argv[i + 1]);
    else if (a == "--timeout")
      timeout = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--world N] [--port P] [--timeout S]\n",
                   argv[0]);
      return 2;
    }
  }
  if (world < 2) {
    std::fprintf(stderr, "--world must be at least 2\n");
    return 2;
  }
  std::random_device rd;
  for (unsigned char &b : expected)
    b = static_cast<unsigned char>(rd());

  for (const char *style : {"torchrun", "mpirun", "slurm"})
    expectSuccess(style, world, timeout);
  expectSuccess("torchrun", world, timeout, /*controlPort=*/true);

  // Variables.
  Vars good = varsFor("torchrun", 1, 4, 1234);
  auto without = [&](const char *name) {
    Vars v;
    for (const auto &kv : good)
      if (kv.first != name)
        v.push_back(kv);
    return v;
  };
  auto with = [&](const char *name, const char *value) {
    Vars v = without(name);
    v.push_back({name, value});
    return v;
  };
  expectEnvError("missing MASTER_PORT", without("MASTER_PORT"));
  expectEnvError("missing MASTER_ADDR", without("MASTER_ADDR"));
  expectEnvError("malformed RANK", with("RANK", "abc"));
  expectEnvError("rank too large", with("RANK", "5"));
  expectEnvError("missing WORLD_SIZE", without("WORLD_SIZE"));
  expectEnvError("malformed MASTER_PORT", with("MASTER_PORT", "70000"));
  expectEnvError("no launcher", {});
  Vars slurm = varsFor("slurm", 0, 2, 1234);
  slurm.erase(slurm.begin() + 2); // SLURM_LOCALID
  expectEnvError("missing SLURM_LOCALID", slurm);
  expectEnvError(
      "malformed OMPI_COMM_WORLD_SIZE",
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4x"}});

  // The rendezvous, with a 1 s deadline.
  const double slack = 1 + 2.0;
  Outcome o = onPort(
      [](int port) {
        std::vector<Child> cs(2);
        for (int r = 0; r < 2; ++r)
          cs[r].vars = varsFor("torchrun", r, 3, port);
        return cs;
      },
      1);
  expectFailure("rank never arrives", o, 0, slack);
  expectFailure("rank never arrives", o, 1, slack);

  o = onPort(
      [](int port) {
        std::vector<Child> cs(1);
        cs[0].vars = varsFor("torchrun", 1, 2, port);
        return cs;
      },
      1);
  expectFailure("rank 0 never starts", o, 0, slack);

  o = onPort(
      [](int port) {
        std::vector<Child> cs(2);
        for (int r = 0; r < 2; ++r)
          cs[r].vars = varsFor("torchrun", r, 2, port);
        cs[1].n = 64;
        return cs;
      },
      1);
  expectFailure("size mismatch", o, 0, slack);

  o = onPort(
      [](int port) {
        std::vector<Child> cs(3);
        cs[0].vars = varsFor("torchrun", 0, 3, port);
        cs[1].vars = cs[2].vars = varsFor("torchrun", 1, 3, port);
        return cs;
      },
      1);
  expectFailure("duplicate rank", o, 0, slack);

  o = onPort(
      [](int port) {
        std::vector<Child> cs(2);
        cs[0].vars = varsFor("torchrun", 0, 2, port);
        cs[1].stranger = true;
        return cs;
      },
      1);
  expectFailure("stranger", o, 0, slack);

  if (failures) {
    std::printf("launch: %d failures\n", failures);
    return 1;
  }
  std::printf("launch: all ok\n");
  return 0;
}
