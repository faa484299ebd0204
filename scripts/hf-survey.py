#!/usr/bin/env python3
"""Hugging Face architectures trained by lamina against PyTorch.

    python3 scripts/hf-survey.py [--lamina build/bin/lamina] [--work DIR]
        [--pp P --micro-batches M] [ARCH ...]

Needs torch, transformers and onnxscript (PyPI; not needed by CI). For each
architecture, a tiny randomly initialised causal LM (2 layers, hidden 32,
vocab 64, eager attention) is exported with the TorchScript and the dynamo
exporter (python/lamina/export_real_models.py), trained in PyTorch for 10
SGD steps (lr 0.1) on the batches a compiled `run --data --seed 1` draws,
then compiled with `lamina compile --mode train` and trained the same way.
Prints one line per export: whether attention fused (and as causal), what
the compile restored, and the worst relative difference of the losses.
With --pp P --micro-batches M the program is a P-rank pipeline (1F1B) of
M micro-batches of batch/M rows, run under mpirun: the same losses.
The committed reference of this kind is test/e2e/hf-training-reference.test
(GPT-2 and LLaMA); this survey covers more architectures, by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import warnings

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "python"))

from lamina import export_real_models as E  # noqa: E402

V = 64
CHECK = os.path.join(SRC, "test", "e2e", "Inputs", "hf_reference.py")


def configs(tf):
    c = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)
    return {
        "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel, E.GPT2),
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, E.LLAMA),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM,
                  dict(c, num_key_value_heads=2, tie_word_embeddings=True)),
        "mistral": (tf.MistralConfig, tf.MistralForCausalLM,
                    dict(c, num_key_value_heads=2, sliding_window=None)),
        # pad_token_id 0 (the default), which the corpus holds: PyTorch's
        # padding_idx keeps token 0's embedding row untrained.
        "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM,
                  dict(c, num_key_value_heads=1, head_dim=8)),
        "phi": (tf.PhiConfig, tf.PhiForCausalLM, dict(c)),
        "gpt_neox": (tf.GPTNeoXConfig, tf.GPTNeoXForCausalLM, dict(c)),
        "opt": (tf.OPTConfig, tf.OPTForCausalLM,
                dict(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, ffn_dim=64,
                     max_position_embeddings=64, word_embed_proj_dim=32)),
        "bloom": (tf.BloomConfig, tf.BloomForCausalLM,
                  dict(vocab_size=V, hidden_size=32, n_layer=2, n_head=4)),
        "falcon": (tf.FalconConfig, tf.FalconForCausalLM,
                   dict(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, new_decoder_architecture=False,
                        multi_query=True, alibi=False)),
        "gpt_bigcode": (tf.GPTBigCodeConfig, tf.GPTBigCodeForCausalLM,
                        dict(vocab_size=V, n_embd=32, n_layer=2, n_head=4,
                             n_positions=64, multi_query=True)),
        "gptj": (tf.GPTJConfig, tf.GPTJForCausalLM,
                 dict(vocab_size=V, n_embd=32, n_layer=2, n_head=4,
                      n_positions=64, rotary_dim=4)),
    }


def make(arch):
    import torch
    import transformers as tf

    config_cls, model_cls, kw = configs(tf)[arch]
    torch.manual_seed(0)
    return E.logits_only(model_cls(E.eager(config_cls(**kw))))


def reference(arch, tokens, steps=10, lr=0.1):
    losses = E.train_losses(make(arch), tokens, "sgd", lr, steps, vocab=V)
    return dict(batch=E.BATCH, seq=E.SEQ, seed=E.SEED, vocab=V, tokens=tokens,
                runs=dict(sgd=dict(lr=lr, steps=steps, losses=losses)))


def survey(arch, lamina, work, pp=1, micro=1):
    import torch

    out = os.path.join(work, arch)
    os.makedirs(out, exist_ok=True)
    model = make(arch)
    ids = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(0))
    ref = os.path.join(out, "ref.json")
    with open(ref, "w") as f:
        json.dump(reference(arch, E.corpus()), f)
    data = os.path.join(out, "data.bin")
    subprocess.run([sys.executable, CHECK, "data", ref, data], check=True)
    args = subprocess.run([sys.executable, CHECK, "args", ref, "sgd"], check=True,
                          capture_output=True, text=True).stdout.split()
    for exporter, export in (("torchscript", E.export_torchscript),
                             ("dynamo", E.export_dynamo)):
        path = os.path.join(out, f"{exporter}.onnx")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                export(model, ids, path)
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{arch:12} {exporter:11} export failed: {type(e).__name__}")
            continue
        prog = os.path.join(out, f"train-{exporter}")
        dist = (["--pp", str(pp), "--micro-batches", str(micro), "--schedule",
                 "1f1b"] if pp > 1 else [])
        # TorchScript exports carry no padding_idx (dynamo's metadata does).
        pad = getattr(model.inner.get_input_embeddings(), "padding_idx", None)
        if exporter == "torchscript" and pad is not None:
            table = next(n for n, p in model.named_parameters()
                         if p is model.inner.get_input_embeddings().weight)
            dist += ["--padding-idx", f"{table}={pad}"]
        c = subprocess.run([lamina, "compile", path, "--mode", "train", "--loss",
                            "causal-lm", "--logits", "logits", "--dim",
                            f"batch={E.BATCH // micro}", "--dim", f"seq={E.SEQ}",
                            "-o", prog, *dist],
                           capture_output=True, text=True)
        if c.returncode:
            print(f"{arch:12} {exporter:11} compile failed: "
                  f"{(c.stderr.strip().splitlines() or ['?'])[0][:150]}")
            continue
        cpp = open(os.path.join(prog, "model.cpp")).read()
        launch = (["mpirun", "--oversubscribe", "--allow-run-as-root", "-np",
                   str(pp)] if pp > 1 else [])
        fused = len(re.findall(r"gen::attention\(", cpp))
        causal = len(re.findall(r"gen::attention\(.*, true, lamina", cpp))
        m = re.search(r"(\d+) split off .*?(\d+) tied back, (\d+) zero biases", c.stdout)
        restored = f"split {m.group(1)} tied {m.group(2)} biases {m.group(3)}" if m else "nothing"
        log = os.path.join(out, f"{exporter}.log")
        with open(log, "w") as f:
            r = subprocess.run([*launch, os.path.join(prog, "run"), "--data", data, *args],
                               stdout=f, stderr=subprocess.STDOUT)
        if r.returncode:
            print(f"{arch:12} {exporter:11} run failed (see {log})")
            continue
        chk = subprocess.run([sys.executable, CHECK, "check", ref, "sgd", log, "1e-5"],
                             capture_output=True, text=True)
        worst = re.search(r"worst rel difference (\S+)", chk.stderr)
        print(f"{arch:12} {exporter:11} attention {fused} (causal {causal}), "
              f"{restored:25} worst {worst.group(1) if worst else '?':9} "
              f"{chk.stdout.strip()}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("arch", nargs="*")
    p.add_argument("--lamina", default=os.path.join(SRC, "build", "bin", "lamina"))
    p.add_argument("--work", default="/tmp/lamina-hf-survey")
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=1)
    a = p.parse_args()
    try:
        import transformers as tf
    except ImportError as e:
        print(f"needs torch, transformers and onnxscript: {e}", file=sys.stderr)
        return 2
    for arch in a.arch or list(configs(tf)):
        survey(arch, a.lamina, a.work, a.pp, a.micro_batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
