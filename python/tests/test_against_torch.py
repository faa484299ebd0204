#!/usr/bin/env python3
"""Optional: compare lamina.models against Hugging Face's PyTorch models.

    python3 python/tests/test_against_torch.py

Loads each built model's initializers into the matching transformers model
(the names are the state_dict names, the shapes the state_dict shapes) and
checks that onnxruntime and PyTorch agree. Skips, exit 0, without torch or
transformers.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lamina.models import build  # noqa: E402
from lamina.models.llama import intermediate_size  # noqa: E402

try:
    import torch
    import transformers as tf
except ImportError as e:
    print(f"SKIP: {e}")
    print("0 passed, 0 failed, 1 skipped")
    sys.exit(0)

CFG = dict(layers=2, hidden=32, heads=4, seq=8, vocab=64, batch=2, seed=11)


def hf_model(arch, cfg):
    common = dict(vocab_size=cfg["vocab"], num_hidden_layers=cfg["layers"],
                  num_attention_heads=cfg["heads"], hidden_size=cfg["hidden"])
    if arch == "gpt2":
        c = tf.GPT2Config(n_embd=cfg["hidden"], n_layer=cfg["layers"], n_head=cfg["heads"],
                          n_positions=cfg["seq"], vocab_size=cfg["vocab"],
                          activation_function="gelu_new", layer_norm_epsilon=1e-5,
                          bos_token_id=0, eos_token_id=0)
        return tf.GPT2LMHeadModel(c), ""
    if arch == "bert":
        c = tf.BertConfig(intermediate_size=4 * cfg["hidden"], hidden_act="gelu",
                          max_position_embeddings=cfg["seq"], type_vocab_size=2,
                          layer_norm_eps=1e-12, **common)
        return tf.BertModel(c, add_pooling_layer=False), "bert."
    c = tf.LlamaConfig(intermediate_size=intermediate_size(cfg["hidden"]),
                       num_key_value_heads=cfg["kv_heads"], rms_norm_eps=1e-5,
                       max_position_embeddings=cfg["seq"], tie_word_embeddings=False,
                       **common)
    return tf.LlamaForCausalLM(c), ""


def compare(arch, opset, dynamic):
    cfg = dict(CFG, kv_heads=2) if arch == "llama" else dict(CFG)
    model = build(arch, opset=opset, dynamic=dynamic, **cfg)
    net, prefix = hf_model(arch, cfg)
    net.config._attn_implementation = "eager"
    state = {t.name[len(prefix):]: torch.from_numpy(numpy_helper.to_array(t).copy())
             for t in model.graph.initializer if t.name.startswith(prefix)
             and t.data_type == 1}
    missing, unexpected = net.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    # Only buffers and GPT-2's tied lm_head may be absent from the ONNX file.
    assert all(k == "lm_head.weight" or "position_ids" in k or "token_type_ids" in k
               or k.endswith("attn.bias") or k.endswith("masked_bias")
               for k in missing), missing
    net.eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(0, cfg["vocab"], (cfg["batch"], cfg["seq"])).astype(np.int64)
    feeds = {"input_ids": ids}
    kwargs = {}
    if arch == "bert":
        mask = np.ones_like(ids)
        mask[0, 5:] = 0
        types = np.zeros_like(ids)
        types[:, 4:] = 1
        feeds.update(attention_mask=mask, token_type_ids=types)
        kwargs = dict(attention_mask=torch.from_numpy(mask),
                      token_type_ids=torch.from_numpy(types))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)[0]
    with torch.no_grad():
        out = net(torch.from_numpy(ids), **kwargs)
    want = (out.last_hidden_state if arch == "bert" else out.logits).numpy()
    if arch == "bert":  # padded query rows are undefined-ish; compare the rest
        got, want = got[:, :5], want[:, :5]
    err = np.abs(got - want).max()
    assert err < 1e-4, f"max abs diff {err}"
    return err


def main() -> int:
    torch.manual_seed(0)
    passed = failed = 0
    for arch in ("gpt2", "bert", "llama"):
        for opset, dynamic in ((13, False), (17, True), (23, False)):
            name = f"{arch} opset {opset} {'dynamic' if dynamic else 'static'}"
            try:
                err = compare(arch, opset, dynamic)
                print(f"ok   {name}: max |onnxruntime - torch| = {err:.2e}")
                passed += 1
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {name}: {e}")
                failed += 1
    print(f"(torch {torch.__version__}, transformers {tf.__version__})")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
