#!/usr/bin/env python3
"""Export tiny Hugging Face mixture-of-experts models as users do, and train
them in PyTorch for reference (issue 33).

    python3 python/lamina/export_moe_models.py [OUTDIR]   (default /tmp/lamina-moe-exports)

Needs ``torch`` and ``transformers`` (PyPI). Mixtral, Qwen2-MoE (with its
shared expert) and OLMoE, randomly initialised (seed 0): 1 layer, hidden
32, 4 query and 2 key/value heads, 4 experts of width 48, top-2, vocab 64;
and Mixtral with 2 layers (``mixtral2``), for pipelines of MoE stages.
The library's default experts code exports with neither PyTorch exporter
(TorchScript: ``aten::histc``; dynamo: ``grouped_mm_fallback``), so users
pick ``experts_implementation="eager"``: its per-expert Python loop, which
TorchScript unrolls over the experts the tracing batch hits. The dynamo
exporter cannot export that loop either (torch.export: a data-dependent
trip count, ``GuardOnDataDependentSymNode`` at ``for expert_idx in
expert_hit``); its users pick ``experts_implementation="batched_mm"``
(every token's experts' weights gathered, batched GEMMs), the same
weights. Written:

  <model>_moe_torchscript_opset17.onnx  torch.onnx.export(dynamo=False),
                                        eager experts, symbolic batch/seq
  <model>_moe_dynamo_opset18.onnx       torch.onnx.export(dynamo=True),
                                        batched_mm experts, symbolic
                                        batch/seq (also needs onnxscript)
  hf-<model>-moe-training.json          PyTorch training it on the batches
                                        a compiled ``run --data`` draws
                                        (export_real_models' corpus and
                                        sampler): 10 SGD and 10 AdamW steps,
                                        and 10 SGD steps with the routers'
                                        load-balancing loss (coefficient
                                        0.02, --moe-aux-loss)

The files are committed in test/Inputs/models/ (of the dynamo exports,
Mixtral's) and test/Inputs/reference/ (test/e2e/moe-training.test); the
references train the eager model, whose weights the dynamo export shares.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

from lamina.export_real_models import (BATCH, POSITIONS, SEED, SEQ, VOCAB,
                                       corpus, describe, eager, logits_only,
                                       run_exports, train_losses)

COMMON = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=VOCAB,
              max_position_embeddings=POSITIONS, tie_word_embeddings=False,
              bos_token_id=0, eos_token_id=0,
              experts_implementation="eager")
MODELS = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(intermediate_size=48, num_local_experts=4,
                     num_experts_per_tok=2)),
    "qwen2": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
              dict(moe_intermediate_size=48, num_experts=4,
                   num_experts_per_tok=2, shared_expert_intermediate_size=40,
                   intermediate_size=64, norm_topk_prob=False,
                   decoder_sparse_step=1, mlp_only_layers=[])),
    # Two layers: a pipeline of MoE stages (--ep 2 --pp 2, moe-ep.test).
    "mixtral2": ("MixtralConfig", "MixtralForCausalLM",
                 dict(intermediate_size=48, num_local_experts=4,
                      num_experts_per_tok=2, num_hidden_layers=2)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM",
              dict(intermediate_size=48, num_experts=4,
                   num_experts_per_tok=2, norm_topk_prob=False)),
}
RUNS = {"sgd": dict(lr=0.1, steps=10), "adamw": dict(lr=1e-2, steps=10)}
# With the routers' load-balancing loss (lamina compile --moe-aux-loss).
AUX = dict(optimizer="sgd", lr=0.1, steps=10, aux_coef=0.02)


def tiny(kind: str, experts: str = "eager"):
    import torch
    import transformers as tf

    config, model, extra = MODELS[kind]
    torch.manual_seed(0)
    cfg = eager(getattr(tf, config)(**{**COMMON, **extra,
                                       "experts_implementation": experts}))
    return logits_only(getattr(tf, model)(cfg))


def export_dynamo(kind: str, ids, path: str) -> None:
    """The dynamo export, with the batched experts (the eager loop does not
    export: torch.export cannot trace its data-dependent trip count)."""
    import torch

    from lamina.export_real_models import POSITIONS

    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=POSITIONS)
    prog = torch.onnx.export(tiny(kind, "batched_mm"), (ids,), dynamo=True,
                             opset_version=18, input_names=["input_ids"],
                             output_names=["logits"],
                             dynamic_shapes={"input_ids": {0: batch, 1: seq}})
    prog.save(path)


def train_aux_losses(kind: str, tokens, run) -> list[float]:
    """SGD on the causal-LM loss plus run["aux_coef"] times Transformers'
    load_balancing_loss_func of the routers (output_router_logits)."""
    import torch

    from lamina.export_real_models import batches

    net = tiny(kind).inner
    opt = torch.optim.SGD(net.parameters(), lr=run["lr"])
    losses = []
    for ids in batches(tokens, run["steps"]):
        ids = torch.from_numpy(ids)
        out = net(input_ids=ids, attention_mask=torch.ones_like(ids),
                  use_cache=False, output_router_logits=True)
        loss = torch.nn.functional.cross_entropy(
            out.logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss = loss + run["aux_coef"] * out.aux_loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def export(kind: str, out: str) -> None:
    import torch

    model = tiny(kind)
    # A tracing batch that routes tokens to every expert.
    ids = torch.randint(0, VOCAB, (BATCH, SEQ),
                        generator=torch.Generator().manual_seed(0))
    path = os.path.join(out, f"{kind}_moe_torchscript_opset17.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (ids,), path, dynamo=False, opset_version=17,
                          input_names=["input_ids"], output_names=["logits"],
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "logits": {0: "batch", 1: "seq"}})
    print(describe(path))
    dynamo = os.path.join(out, f"{kind}_moe_dynamo_opset18.onnx")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            export_dynamo(kind, ids, dynamo)
        print(describe(dynamo))
    except Exception as e:  # noqa: BLE001 - report, keep the TorchScript one
        print(f"{dynamo}: export failed: {type(e).__name__}: {str(e)[:300]}")
    tokens = corpus()
    runs = {name: dict(run, losses=train_losses(tiny(kind), tokens,
                                                 name, run["lr"], run["steps"]))
            for name, run in RUNS.items()}
    runs["sgd_aux"] = dict(AUX, losses=train_aux_losses(kind, tokens, AUX))
    ref = dict(models=[os.path.basename(path)], torch=torch.__version__,
               batch=BATCH, seq=SEQ, seed=SEED, vocab=VOCAB, runs=runs,
               tokens=tokens)
    ref_path = os.path.join(out, f"hf-{kind}-moe-training.json")
    with open(ref_path, "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    for name, run in runs.items():
        print(f"{ref_path}: {name} {run['losses'][0]:.6f} -> "
              f"{run['losses'][-1]:.6f}")


def main(argv=None) -> int:
    return run_exports(argv, "/tmp/lamina-moe-exports", export, MODELS)


if __name__ == "__main__":
    sys.exit(main())
