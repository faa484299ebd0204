//===- ControlTest.cpp - the TCP control plane on forked ranks ------------===//
//
// `lamina-control-test --world N [--timeout S]` forks N ranks with
// torchrun-style variables on 127.0.0.1 (a free port per case) and runs the
// TCP control plane (TcpControl.cpp) without MPI: every operation on known
// values (all-min, all-sum, gather, broadcast, host transfers to and from
// rank 0, barrier), then the failures -- a rank killed before an all-min,
// a rank that never joins the operation, a rank that aborts, a rank that
// never starts -- each of which must end every other rank with exit code 1
// and a message naming the peer (never a hang: every wait is bounded by
// --timeout, 1 s by default).
// Prints one line per case with the first error line of rank 0 and of the
// last rank (test/Runtime/Dist/control-tcp.test).
//
//===----------------------------------------------------------------------===//

#include "ControlPlane.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::dist;

namespace {

int world = 4;
double timeoutSeconds = 1;

[[noreturn]] void fail(const std::string &what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  std::_Exit(3);
}

/// Every operation on known values; rank 0 prints "ok: ..." for each.
void allOps(ControlPlane &c) {
  int r = c.rank(), n = c.size();
  if (c.allMin(10 - r, "all-min", "") != 10 - (n - 1))
    fail("all-min");
  double sum = c.allSum(0.5 * r, "all-sum", "");
  if (sum != 0.25 * n * (n - 1))
    fail("all-sum: " + std::to_string(sum));
  std::vector<std::string> all = c.gather(std::string(size_t(r) * 1000, 'a' + char(r)));
  if (r == 0) {
    if (int(all.size()) != n)
      fail("gather size");
    for (int i = 0; i < n; ++i)
      if (all[size_t(i)] != std::string(size_t(i) * 1000, 'a' + char(i)))
        fail("gather of rank " + std::to_string(i));
  } else if (!all.empty()) {
    fail("gather on a rank other than 0");
  }
  unsigned char id[129];
  for (int i = 0; i < 129; ++i)
    id[i] = r == 0 ? static_cast<unsigned char>(i * 7 + 1) : 0;
  c.broadcast(id, sizeof id, "broadcast");
  for (int i = 0; i < 129; ++i)
    if (id[i] != static_cast<unsigned char>(i * 7 + 1))
      fail("broadcast byte " + std::to_string(i));
  // Host transfers: every rank sends rank 0 a 1 MiB block (larger than a
  // socket buffer) and gets an answer back, tags checked.
  std::vector<int> block(1 << 18);
  if (r == 0) {
    for (int from = 1; from < n; ++from) {
      c.recv(from, from, block.data(), block.size() * sizeof(int), "recv");
      for (size_t i = 0; i < block.size(); ++i)
        if (block[i] != int(i) * from)
          fail("transfer from rank " + std::to_string(from));
      int answer = from * 100;
      c.send(from, 7, &answer, sizeof answer, "send");
    }
  } else {
    for (size_t i = 0; i < block.size(); ++i)
      block[i] = int(i) * r;
    c.send(0, r, block.data(), block.size() * sizeof(int), "send");
    int answer = 0;
    c.recv(0, 7, &answer, sizeof answer, "recv");
    if (answer != r * 100)
      fail("answer from rank 0");
  }
  c.barrier();
  if (r == 0)
    std::printf("ok: all-min, all-sum, gather, broadcast, host transfers, "
                "barrier on %d ranks\n", n);
}

enum class Fault { None, Killed, Silent, Aborts, NeverStarts };

/// One rank of a case: the control plane from the environment.
[[noreturn]] void rankMain(int rank, int port, Fault fault) {
  int last = world - 1;
  if (fault == Fault::NeverStarts && rank == last)
    std::_Exit(0);
  LaunchEnv env;
  if (Status s = readLaunchEnv(env); !s.ok())
    fail(s.message());
  std::unique_ptr<ControlPlane> c = makeTcpControl(env, port, nullptr);
  c->timeout = timeoutSeconds;
  if (Status s = c->connect(timeoutSeconds); !s.ok()) {
    std::fprintf(stderr, "error: rank %d: %s\n", rank, s.message().c_str());
    std::_Exit(1);
  }
  if (fault == Fault::None) {
    allOps(*c);
    std::fflush(stdout);
    std::_Exit(0);
  }
  c->allMin(rank, "the first agreement did not complete", "");
  if (rank == last) {
    if (fault == Fault::Killed)
      std::raise(SIGKILL);
    if (fault == Fault::Silent)
      ::pause(); // alive, never answers (the parent kills it)
    if (fault == Fault::Aborts)
      c->abort("this rank gives up");
  }
  c->allMin(rank, "the second agreement did not complete", "");
  fail("rank " + std::to_string(rank) + " passed the faulty agreement");
}

struct Result {
  std::vector<int> codes;
  std::vector<std::string> firstError;
};

Result runCase(Fault fault) {
  int port = lamina::rt::dist::freeLoopbackPort();
  Result res;
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (::pipe(fds) != 0)
      fail("pipe");
    std::fflush(stdout);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      ::dup2(fds[1], 2);
      for (const char *v : {"OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                            "LAMINA_CONTROL_PORT"})
        ::unsetenv(v);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
      rankMain(r, port, fault);
    }
    ::close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  // The silent rank never exits on its own: once every other rank has
  // ended, it is killed.
  res.codes.assign(size_t(world), -1);
  int left = world;
  while (left > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0)
      break;
    for (int r = 0; r < world; ++r)
      if (pids[size_t(r)] == pid) {
        res.codes[size_t(r)] = WIFEXITED(status) ? WEXITSTATUS(status)
                                                 : 128 + WTERMSIG(status);
        --left;
      }
    if (fault == Fault::Silent && left == 1 && res.codes[size_t(world - 1)] < 0)
      ::kill(pids[size_t(world - 1)], SIGKILL);
  }
  for (int r = 0; r < world; ++r) {
    std::string text;
    char buf[4096];
    ssize_t k;
    while ((k = ::read(pipes[size_t(r)], buf, sizeof buf)) > 0)
      text.append(buf, size_t(k));
    ::close(pipes[size_t(r)]);
    size_t e = text.find("error: ");
    std::string line = e == std::string::npos ? "" : text.substr(e);
    line = line.substr(0, line.find('\n'));
    res.firstError.push_back(line);
    if (text.find("FAIL: ") != std::string::npos)
      std::printf("%s", text.c_str());
  }
  return res;
}

} // namespace

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--world")
      world = std::atoi(argv[i + 1]);
    else if (a == "--timeout")
      timeoutSeconds = std::atof(argv[i + 1]);
  }
  if (world < 3) {
    std::fprintf(stderr, "usage: lamina-control-test --world N (N >= 3) "
                         "[--timeout S]\n");
    return 2;
  }
  bool ok = true;
  Result r = runCase(Fault::None);
  for (int c : r.codes)
    ok &= c == 0;
  if (!ok)
    std::printf("FAIL: the operations (exit codes %d...)\n", r.codes[0]);

  struct Case {
    const char *name;
    Fault fault;
  } cases[] = {{"killed rank", Fault::Killed},
               {"silent rank", Fault::Silent},
               {"aborting rank", Fault::Aborts},
               {"rank never starts", Fault::NeverStarts}};
  for (const Case &c : cases) {
    Result res = runCase(c.fault);
    std::printf("%s: rank 0: %s\n", c.name, res.firstError[0].c_str());
    std::printf("%s: rank 1: %s\n", c.name, res.firstError[1].c_str());
    for (int i = 0; i + 1 < world; ++i)
      if (res.codes[size_t(i)] != 1) {
        std::printf("FAIL: %s: rank %d exited with %d, not 1\n", c.name, i,
                    res.codes[size_t(i)]);
        ok = false;
      }
  }
  std::printf("control: %s\n", ok ? "all ok" : "FAILED");
  return ok ? 0 : 1;
}
