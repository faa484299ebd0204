//===- Executor.h - one rank of a distributed training step -----*- C++ -*-===//
//
// The state one rank holds (its modules' parameters, gradients, optimizer,
// the activations in flight) and the interpreter of its action list
// (DistProgram.h, Schedule.h). DistTrain.cpp drives it; DistCheckpoint.cpp
// saves, restores and exports its parameters. docs/distributed.md.
//
// Parameters: per module a flat f32 layout of the trainable parameters it
// alone reads (forward arg order); a parameter read by more than one module
// ("shared", e.g. tied embeddings) has its own buffer on every holder, is
// never sharded, and its gradient is summed with one all-reduce over all of
// its holders (every pipeline rank reading it, every replica) before the
// optimizer.
//
// Private to lamina_dist.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_EXECUTOR_H
#define LAMINA_LIB_RUNTIME_DIST_EXECUTOR_H

#include "Comm.h"

#include "../Program/TrainCommon.h"

#include "lamina/Runtime/Checkpoint.h"
#include "lamina/Runtime/DistProgram.h"
#include "lamina/Runtime/Optimizer.h"
#include "lamina/Runtime/TensorIO.h"
#include "lamina/Runtime/TokenData.h"

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace lamina::rt::dist {

/// 64-byte aligned bytes.
struct Buffer {
  std::unique_ptr<char, FreeDeleter> data;
  size_t bytes = 0;
  static Buffer make(size_t bytes);
  char *get() const { return data.get(); }
};

/// Tensors packed in one buffer (a boundary's values, 64-byte aligned each).
struct Packed {
  struct Item {
    DType dtype;
    int rank;
    const int64_t *shape;
    size_t offset, bytes;
  };
  std::vector<Item> items;
  size_t bytes = 0;
  void add(DType dtype, int rank, const int64_t *shape);
  /// What travels between ranks: up to the end of the last item (the
  /// padding after it is not sent, nor counted).
  size_t wireBytes() const {
    return items.empty() ? 0 : items.back().offset + items.back().bytes;
  }
  Tensor view(const Buffer &b, size_t i) const {
    const Item &it = items[i];
    return Tensor{b.get() + it.offset, it.dtype, it.rank, it.shape};
  }
};

/// A parameter (or constant) some local module reads.
struct Param {
  std::string name;
  const ArgSpec *arg = nullptr;
  bool trainable = false;
  bool shared = false; ///< read by more than one module
  int module = -1;     ///< the module reading it (not shared)
  int64_t flatOffset = 0, size = 0;
  std::vector<float> own, ownGrad; ///< shared parameters
  OwnedTensor constant;            ///< constants
  MPI_Comm holders = MPI_COMM_NULL; ///< shared: all holders, all replicas
  bool countsForNorm = false;       ///< shared: this rank counts it in --clip
};

struct ModuleState {
  int index = -1;
  std::vector<int> params; ///< non-shared trainables, forward arg order
  int64_t size = 0;        ///< elements of the flat layout
  std::vector<int> counts, offsets; ///< shards over the replicas
  std::vector<float> flatParam, flatGrad, shardParam, shardGrad;
  MPI_Request gradReq = MPI_REQUEST_NULL, paramReq = MPI_REQUEST_NULL;
  // Level 3.
  struct Gather {
    std::vector<float> full;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  std::deque<Gather> gathers;
  std::vector<float> active; ///< the full weights of the current run
  int64_t shardLen = 0;      ///< this rank's part of the flat layout
  struct Scatter {
    std::vector<float> full, part;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  std::vector<Scatter> scatters;
};

/// An optimizer "parameter": a whole parameter or a piece of a shard.
struct Segment {
  std::string name;
  std::vector<int64_t> shape;
  float *param = nullptr, *grad = nullptr;
  bool countsForNorm = true;
};

struct TraceEvent {
  const char *cat;
  std::string name;
  double start, dur; ///< seconds, relative to the trace start
};

class Executor {
public:
  Executor(const DistSpec &spec, const TrainOptions &options, Comm &comm)
      : spec(spec), o(options), comm(comm) {}

  /// Checks the spec, creates the communicators (collective over the
  /// world), loads this rank's weights, builds the optimizer.
  Status setup();
  /// One training step: samples the global batch, runs the action list,
  /// applies the optimizer. `loss` is the global loss (every rank).
  Status step(int64_t stepIndex, double &loss);

  // Configuration.
  const DistSpec &spec;
  const TrainOptions &o;
  Comm &comm;
  int rank = 0, pp = 0, dp = 0, zero = 0; ///< zero: effective level
  MPI_Comm dpComm = MPI_COMM_NULL;
  int64_t microBatch = 0, seq = 0, globalBatch = 0, vocab = 0;
  DType tokenType = DType::I64;
  std::string modelPath;

  // State.
  std::vector<Param> params;
  std::map<std::string, int> paramIndex;
  std::vector<ModuleState> modules; ///< indexed by module; local ones used
  std::vector<int> localModules;
  std::vector<Segment> segments;
  Optimizer opt;
  LrSchedule sched;
  TokenData data;
  SplitMix64 rng;
  OwnedTensor tokens, labels; ///< the global batch
  Buffer arena;
  size_t arenaBytes = 0;

  /// Views of what a checkpoint of this rank holds.
  std::vector<NamedView> stateViews();

  // Statistics and trace.
  double busySeconds = 0, traceStart = 0;
  size_t heldBytes = 0, peakHeldBytes = 0;
  bool tracing = false;
  std::vector<TraceEvent> events;

private:
  Status setupModules();
  Status setupParams();
  void setupSegments();
  void zeroGrads();
  const FunctionSpec &fn(int module, bool backward) const {
    return backward ? spec.modules[module].backward
                    : spec.modules[module].forward;
  }
  void bindForwardArgs(int module, int mb, std::vector<Tensor> &args);
  void runFunction(const FunctionSpec &f, std::vector<Tensor> &args,
                   const char *cat, std::string name);
  void forward(int module, int mb);
  void backward(int module, int mb);
  void ensureRun(int module, bool backward);
  void endRun();
  void send(const ActionSpec &a);
  void recv(const ActionSpec &a);
  void collective(const ActionSpec &a);
  Status optimizerStep(int64_t stepIndex);
  void progressSends(bool wait);
  void hold(const Buffer &b) {
    heldBytes += b.bytes;
    if (heldBytes > peakHeldBytes)
      peakHeldBytes = heldBytes;
  }
  void release(const Buffer &b) { heldBytes -= b.bytes; }
  void record(const char *cat, std::string name, double t0, double t1) {
    if (tracing)
      events.push_back({cat, std::move(name), t0 - traceStart, t1 - t0});
  }

  std::vector<Packed> actLayout, gradLayout; ///< per boundary
  std::map<int, Packed> resLayout;           ///< per local module
  std::map<std::pair<int, int>, Buffer> acts, grads, residuals;
  struct SendRecord {
    Buffer buffer;
    MPI_Request req;
    std::string what;
    int peer = -1;
  };
  std::vector<SendRecord> sends;
  std::vector<float> lossOf; ///< per micro-batch of this replica
  std::vector<float> weightOf;
  double lossSum = 0;
  int runModule = -1;
  bool runBackward = false;
};

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_EXECUTOR_H
