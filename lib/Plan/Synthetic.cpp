//===- Synthetic.cpp - a GPT's costs from its shape -----------------------===//
//
// Per layer, b samples of s tokens, width h, a heads, 2-byte values:
//   GEMMs: QKV 6bsh^2, scores 2bs^2h, context 2bs^2h, projection 2bsh^2,
//          MLP 16bsh^2  -> 24bsh^2 + 4bs^2h FLOPs
//   GEMM I/O: weights 12h^2 plus 20bsh + 2bas^2 activations read/written
//   other kernels (Megatron's fused ones): two layer norms 4bsh, two
//          bias-dropout-add 7bsh, bias-gelu 8bsh, QKV bias and transposes
//          6bsh, scale-mask-softmax 2bas^2, attention dropout 2.5bas^2
//   stored for the backward (Korthikanti et al. 2022, no sequence
//          parallelism): sbh(34 + 5as/h) bytes
//
//===----------------------------------------------------------------------===//

#include "lamina/Plan/Synthetic.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace lamina::plan {

double gptParams(const GptShape &g) {
  const double L = g.layers, h = g.hidden, V = g.vocab, s = g.seqLen;
  return 12 * L * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * L * h));
}

double gptMegatronFlopsPerSample(const GptShape &g) {
  const double L = g.layers, h = g.hidden, V = g.vocab, s = g.seqLen;
  return 96 * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
}

ModelDesc syntheticGpt(const GptShape &g) {
  const double b = g.microBatchSize, s = g.seqLen, h = g.hidden,
               a = g.heads, V = g.vocab;
  const double bsh = b * s * h, bas2 = b * a * s * s;
  constexpr double B = 2; // bytes per bf16 value
  ModelDesc d;
  d.name = "gpt-l" + std::to_string(g.layers) + "-h" +
           std::to_string(g.hidden);
  d.microBatchSize = g.microBatchSize;
  d.seqLen = g.seqLen;
  d.hidden = g.hidden;
  d.discovery = "synthetic";

  ModuleDesc emb;
  emb.name = "embedding";
  emb.role = ModuleRole::Embedding;
  emb.params = static_cast<int64_t>(V * h + s * h);
  emb.paramBytes = emb.params * 2;
  emb.forwardFlops = bsh;                  // token + position add
  emb.forwardBytes = (3 * bsh + b * s) * B; // two gathers, add, dropout
  emb.outputBytes = static_cast<int64_t>(bsh * B);
  emb.inputBytes = static_cast<int64_t>(b * s * 8); // int64 token ids
  emb.activationBytes = static_cast<int64_t>(bsh * B + bsh);
  emb.peakTransientBytes = static_cast<int64_t>(bsh * B);
  d.modules.push_back(emb);

  for (int64_t l = 0; l < g.layers; ++l) {
    ModuleDesc m;
    m.name = "layer." + std::to_string(l);
    m.role = ModuleRole::Layer;
    m.body = 0;
    m.params = static_cast<int64_t>(12 * h * h + 13 * h);
    m.paramBytes = m.params * 2;
    m.matmulFlops = 24 * bsh * h + 4 * b * s * s * h;
    m.forwardFlops = m.matmulFlops + 30 * bsh + 5 * bas2;
    m.matmulBytes = (12 * h * h + 20 * bsh + 2 * bas2) * B;
    m.forwardBytes = m.matmulBytes + (25 * bsh + 4.5 * bas2) * B;
    m.outputBytes = m.inputBytes = static_cast<int64_t>(bsh * B);
    m.activationBytes = static_cast<int64_t>(bsh * (34 + 5 * a * s / h));
    m.peakTransientBytes = static_cast<int64_t>(std::max(bas2, 4 * bsh) * B);
    d.modules.push_back(m);
  }

  ModuleDesc head;
  head.name = "head";
  head.role = ModuleRole::Head;
  head.params = static_cast<int64_t>(2 * h); // final norm; the matrix is tied
  head.paramBytes = head.params * 2;
  head.matmulFlops = 2 * bsh * V;
  head.forwardFlops = head.matmulFlops + 5 * b * s * V + 5 * bsh;
  head.matmulBytes = (V * h + bsh + b * s * V) * B;
  // Norm 2bsh; cross-entropy reads the logits, writes fp32 softmax.
  head.forwardBytes = head.matmulBytes + (2 * bsh + b * s * V * 3) * B;
  head.inputBytes = static_cast<int64_t>(bsh * B);
  head.outputBytes = 0;
  head.activationBytes = static_cast<int64_t>(bsh * B + b * s * V * 4);
  head.peakTransientBytes = static_cast<int64_t>(b * s * V * 4);
  d.modules.push_back(head);
  return d;
}

schedule::Expected<GptShape> parseGptSpec(std::string_view spec) {
  using schedule::Status;
  if (spec.substr(0, 4) != "gpt:")
    return Status::error("a synthetic model is written 'gpt:layers=L,hidden=H,"
                         "heads=A,seq=S,vocab=V[,batch=B]'");
  GptShape g;
  std::string_view rest = spec.substr(4);
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    size_t eq = item.find('=');
    std::string key(item.substr(0, eq));
    std::string value(eq == std::string_view::npos ? "" : item.substr(eq + 1));
    char *end = nullptr;
    long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end || v < 1)
      return Status::error("synthetic model: '" + std::string(item) +
                           "' needs a positive integer value");
    if (key == "layers")
      g.layers = v;
    else if (key == "hidden")
      g.hidden = v;
    else if (key == "heads")
      g.heads = v;
    else if (key == "seq")
      g.seqLen = v;
    else if (key == "vocab")
      g.vocab = v;
    else if (key == "batch")
      g.microBatchSize = v;
    else
      return Status::error("synthetic model: unknown key '" + key +
                           "' (layers, hidden, heads, seq, vocab, batch)");
  }
  return g;
}

} // namespace lamina::plan
