//===- OnnxExport.h - trained weights back into the ONNX model --*- C++ -*-===//
//
// After training, the original graph with its initializers replaced by the
// trained values is written as a new ONNX model that onnxruntime (or any
// ONNX tool) loads. Reading goes through the program driver's initializer
// reader, so the source model's external data is subject to the same rules
// (inside the model's folder only, ranges checked).
//
// Implemented in lib/Runtime/Program (library lamina_program).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_ONNXEXPORT_H
#define LAMINA_RUNTIME_ONNXEXPORT_H

#include "lamina/Runtime/Checkpoint.h"
#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/TensorIO.h"

#include <map>
#include <set>
#include <stdint.h>
#include <string>
#include <vector>

namespace lamina::rt {

/// Writes `destPath`: the model at `sourcePath` with every initializer named
/// in `replacements` set to that tensor (as little-endian raw_data; its
/// dtype and shape must equal the initializer's, or nothing is written).
/// Initializers the source keeps in external files are copied in, so the
/// result does not depend on the source's folder. When all initializer data
/// together exceeds `inlineLimit` (default: a little under protobuf's 2 GiB
/// message limit), every initializer of 1 KiB or more goes instead to a
/// sibling file `<destPath>.data` (ONNX external data, offsets 64-byte
/// aligned) and only the rest stays inline. Every file is written
/// atomically; the data file before the model that names it. A
/// `destPath` ending in `.safetensors` gets exportSafetensors instead.
Status exportOnnx(const std::string &sourcePath, const std::string &destPath,
                  const NamedView *replacements, int n,
                  uint64_t inlineLimit = (uint64_t(1) << 31) - (64u << 20));

/// Writes `destPath` in the safetensors format: every initializer of the
/// model at `sourcePath` whose dtype safetensors has, under its name, with
/// the value in `replacements` where one is given (same dtype and shape, or
/// nothing is written); atomically (lib/Runtime/Program/SafetensorsExport.cpp).
/// exportOnnx calls it for a destination ending in `.safetensors`.
Status exportSafetensors(const std::string &sourcePath,
                         const std::string &destPath,
                         const NamedView *replacements, int n);

/// Reads every initializer of the model at `path` (main graph first, then
/// subgraphs) whose element type Lamina supports, under the program
/// driver's rules for external data. With `only`, just the initializers it
/// names are read (a pipeline rank loads only its modules' weights).
Status readInitializers(const std::string &path,
                        std::map<std::string, OwnedTensor> &out,
                        const std::set<std::string> *only = nullptr);

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_ONNXEXPORT_H
