//===- DistCheckpoint.h - checkpoints and export of a distributed run -*- C++ -*-===//
//
// Every rank writes its own file DIR/step-<12 digits>/rank-<G>.ckpt (its
// parameters or shards, optimizer state, step, sampler state; the
// Checkpoint.h format, written atomically); after all ranks wrote, rank 0
// writes DIR/step-N/COMPLETE (the configuration line) atomically. Resume
// takes the newest step with COMPLETE whose files all pass their checksums
// (agreed by an all-reduce). docs/distributed.md. Private to lamina_dist.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_DISTCHECKPOINT_H
#define LAMINA_LIB_RUNTIME_DIST_DISTCHECKPOINT_H

#include "Executor.h"

namespace lamina::rt::dist {

/// "pp=2 dp=2 zero=1 schedule=1f1b micro-batches=4 modules=4": what a
/// checkpoint can only be resumed with.
std::string configLine(const DistSpec &spec);

/// All ranks agree: the lowest rank whose `s` failed prints its message
/// ("error: rank G: ..."); every rank gets an error back. Collective.
Status agree(ControlPlane &control, const Status &s);

/// Collective. Writes this rank's file, then rank 0 the COMPLETE marker,
/// and removes all but the newest two complete checkpoints.
Status saveDistCheckpoint(Executor &ex, int64_t step);

/// Collective. `step` is the step resumed from (0 and found = false when
/// DIR holds no complete checkpoint).
Status resumeDistCheckpoint(Executor &ex, int64_t &step, bool &found);

/// Collective: gathers the trained parameters to rank 0, which writes the
/// ONNX model.
Status exportDist(Executor &ex, const std::string &path);

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_DISTCHECKPOINT_H
