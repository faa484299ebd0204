"""Tiny randomly initialised Transformers models for any architecture and
task, wrapped as a function of named tensors, and their ONNX exports.

A model is built from the architecture's own config class
(`AutoConfig.for_model(ARCH)`) shrunk by TINY (each key the config has),
then ARCH's entry in OVERRIDES, then `--config KEY=VALUE`; the task picks
the Auto class (`AutoModelForCausalLM`, `...ForMaskedLM`,
`...ForSeq2SeqLM`, `...ForImageClassification`). Eager attention, no
dropout, no KV cache, seed 0."""

from __future__ import annotations

import ast
import warnings

# Sizes of the data and the models (vocabulary, sequence lengths, image).
V = 64
BATCH, SEQ, TGT = 4, 16, 8
IMAGE, CHANNELS, CLASSES = 32, 3, 10

TINY = dict(
    vocab_size=V, decoder_vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    intermediate_size=64, max_position_embeddings=64, head_dim=8,
    # encoder-decoder spellings (T5, BART, ...)
    d_model=32, d_ff=64, d_kv=8, num_layers=2, num_decoder_layers=2,
    num_heads=4, encoder_layers=2, decoder_layers=2,
    encoder_attention_heads=4, decoder_attention_heads=4,
    encoder_ffn_dim=64, decoder_ffn_dim=64,
    # vision (ViT, ResNet, ...)
    image_size=IMAGE, patch_size=8, num_channels=CHANNELS, embedding_size=16,
    hidden_sizes=[16, 32], depths=[1, 1], num_labels=CLASSES,
)

# What TINY does not cover, per architecture (the causal-LM families first
# surveyed keep their configs of then).
OVERRIDES = {
    "gpt2": dict(n_layer=2, n_embd=32, n_head=4, n_positions=64,
                 bos_token_id=0, eos_token_id=0),
    "llama": dict(num_key_value_heads=2, tie_word_embeddings=False,
                  bos_token_id=0, eos_token_id=0),
    "qwen2": dict(num_key_value_heads=2, tie_word_embeddings=True),
    "qwen3": dict(num_key_value_heads=2),
    "mistral": dict(num_key_value_heads=2, sliding_window=None),
    # pad_token_id 0 (the default), which the corpus holds: PyTorch's
    # padding_idx keeps token 0's embedding row untrained.
    "gemma": dict(num_key_value_heads=1),
    "stablelm": dict(num_key_value_heads=4),
    "opt": dict(ffn_dim=64, word_embed_proj_dim=32),
    "bloom": dict(n_layer=2, n_head=4),
    "falcon": dict(new_decoder_architecture=False, multi_query=True,
                   alibi=False),
    "gpt_bigcode": dict(n_embd=32, n_layer=2, n_head=4, n_positions=64,
                        multi_query=True),
    "gptj": dict(n_embd=32, n_layer=2, n_head=4, n_positions=64,
                 rotary_dim=4),
    "resnet": dict(layer_type="basic"),
}

CAUSAL_14 = ["gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma", "phi",
             "gpt_neox", "stablelm", "opt", "bloom", "falcon", "gpt_bigcode",
             "gptj"]
DEFAULTS = {"causal-lm": CAUSAL_14, "masked-lm": ["bert", "roberta"],
            "seq2seq": ["t5", "bart"],
            "image-classification": ["vit", "resnet"]}

# Model inputs per task, with the dims their exports leave symbolic.
INPUTS = {
    "causal-lm": {"input_ids": ("batch", "seq")},
    "masked-lm": {"input_ids": ("batch", "seq")},
    "seq2seq": {"input_ids": ("batch", "seq"),
                "decoder_input_ids": ("batch", "tgt")},
    "image-classification": {"pixel_values": ("batch", None, None, None)},
}
LABELS = {"causal-lm": ("batch", "seq"), "masked-lm": ("batch", "seq"),
          "seq2seq": ("batch", "tgt"), "image-classification": ("batch",)}


def parse_overrides(items):
    """`KEY=VALUE` strings as a dict, VALUE a Python literal or a string."""
    out = {}
    for item in items or []:
        key, _, value = item.partition("=")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def config(arch, extra=None):
    import transformers as tf

    base = tf.AutoConfig.for_model(arch)
    # Not the read-only properties (Falcon's head_dim).
    kw = {k: v for k, v in TINY.items() if hasattr(base, k) and getattr(
        getattr(type(base), k, None), "fset", True) is not None}
    kw.update(OVERRIDES.get(arch, {}))
    kw.update(extra or {})
    cfg = tf.AutoConfig.for_model(arch, **kw)
    for k in list(cfg.to_dict()):
        if ("dropout" in k or k.endswith("_pdrop") or "drop_prob" in k
                or k == "drop_path_rate"):
            if isinstance(getattr(cfg, k, None), float):
                setattr(cfg, k, 0.0)
    # Special token ids of the full-size vocabulary (Marian's pad 58100)
    # wrapped into the tiny one.
    for k in ("pad_token_id", "bos_token_id", "eos_token_id",
              "decoder_start_token_id"):
        if k not in (extra or {}) and isinstance(getattr(cfg, k, None), int) \
                and getattr(cfg, k) >= V:
            setattr(cfg, k, getattr(cfg, k) % V)
    # A full-size default of more key/value heads than the tiny query heads
    # (Mixtral's 8).
    kv, heads = (getattr(cfg, k, None) for k in ("num_key_value_heads",
                                                  "num_attention_heads"))
    if isinstance(kv, int) and isinstance(heads, int) and kv > heads:
        cfg.num_key_value_heads = heads
    # Auto classes with several candidates (DeiT's) pick by this list.
    if getattr(cfg, "architectures", None) is None:
        cfg.architectures = []
    cfg._attn_implementation = "eager"  # plain MatMul/Softmax, no SDPA op
    # Mixture-of-experts models: the experts' Python loop, which the
    # TorchScript exporter unrolls and Lamina recognises (the default
    # grouped_mm exports with neither exporter; docs/moe-design.md).
    if hasattr(cfg, "_experts_implementation"):
        cfg._experts_implementation = "eager"
    cfg.use_cache = False
    return cfg


def auto_class(task):
    import transformers as tf

    return {"causal-lm": tf.AutoModelForCausalLM,
            "masked-lm": tf.AutoModelForMaskedLM,
            "seq2seq": tf.AutoModelForSeq2SeqLM,
            "image-classification": tf.AutoModelForImageClassification}[task]


def has_batchnorm(net):
    import torch

    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm)
               for m in net.modules())


class Spec:
    """What a survey run of one task needs to know about its model."""

    def __init__(self, task, cfg):
        self.task = task
        self.cfg = cfg
        self.vocab = getattr(cfg, "vocab_size", None)
        self.mask_token = V - 1
        self.decoder_start = getattr(cfg, "decoder_start_token_id", None)
        if self.decoder_start is None:
            self.decoder_start = getattr(cfg, "pad_token_id", None) or 0


def build(task, arch, extra=None, own=False):
    """(wrapped module, Spec): the module takes the task's inputs (and
    `labels` with own=True) positionally and returns `loss` (own) or
    `logits`. Built from seed 0, so two calls give the same weights."""
    import torch

    cfg = config(arch, extra)
    if task == "image-classification":
        cfg.problem_type = "single_label_classification"
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        net = auto_class(task).from_config(cfg)
    names = list(INPUTS[task]) + (["labels"] if own else [])

    class Wrapped(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            kw = dict(zip(names, args))
            if task != "image-classification":
                # All ones: transformers >= 5 otherwise probes position_ids
                # for packed sequences (torch.diff), which TorchScript cannot
                # export. The training compile fills it the same way.
                kw["attention_mask"] = torch.ones_like(kw["input_ids"])
                kw["use_cache"] = False
            out = self.inner(**kw)
            return out.loss if own else out.logits

    # Batch norm trains on batch statistics: PyTorch's train mode, exported
    # as such (the survey zeroes every dropout).
    wrapped = Wrapped(net)
    wrapped.train(has_batchnorm(net))
    wrapped.input_names = names
    return wrapped, Spec(task, cfg)


def example(task, batch=2):
    """Inputs to trace the export with (the dims stay symbolic)."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, V, (batch, n), generator=g)  # noqa: E731
    if task == "seq2seq":
        return {"input_ids": ids(SEQ), "decoder_input_ids": ids(TGT),
                "labels": ids(TGT)}
    if task == "image-classification":
        return {"pixel_values": torch.randn(batch, CHANNELS, IMAGE, IMAGE,
                                            generator=g),
                "labels": torch.randint(0, CLASSES, (batch,), generator=g)}
    return {"input_ids": ids(SEQ), "labels": ids(SEQ)}


def output_dims(task, own):
    if own:
        return ()
    return {"seq2seq": ("batch", "tgt"),
            "image-classification": ("batch",)}.get(task, ("batch", "seq"))


def export(model, task, exporter, path, static=None):
    """Exports `model` (from build) as `path` with symbolic batch/seq/tgt
    dims, or with the example batch `static` rows and static shapes."""
    import torch

    spec_inputs = {**INPUTS[task], "labels": LABELS[task]}
    names = model.input_names
    ex = example(task, static or 2)
    args = tuple(ex[n] for n in names)
    out = "loss" if names[-1] == "labels" else "logits"
    dims = {n: {i: d for i, d in enumerate(spec_inputs[n]) if d}
            for n in names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            from torch.onnx import TrainingMode

            axes = {} if static else {
                **dims, out: dict(enumerate(output_dims(task, out == "loss")))}
            torch.onnx.export(
                model, args, path, dynamo=False, opset_version=14,
                input_names=names, output_names=[out], dynamic_axes=axes,
                training=(TrainingMode.TRAINING if model.training
                          else TrainingMode.EVAL),
                do_constant_folding=not model.training)
        else:
            shapes = None
            if not static:
                made = {}

                def dim(name):
                    if name not in made:
                        made[name] = torch.export.Dim(
                            name, max=48 if name in ("seq", "tgt") else 1024)
                    return made[name]

                # One entry: forward(*args) takes them as one tuple.
                shapes = (tuple({i: dim(d) for i, d in dims[n].items()}
                                for n in names),)
            prog = torch.onnx.export(model, args, dynamo=True,
                                     opset_version=18, input_names=names,
                                     output_names=[out],
                                     dynamic_shapes=shapes)
            prog.save(path)  # small enough to stay in one file
    return out


def add_labels_input(path, task):
    """A logits export gains a `labels` input (int64, the logits' batch and
    positions) for `lamina compile --loss cross-entropy --labels labels`;
    the exporters drop an input the graph does not read."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load(path)
    if any(i.name == "labels" for i in m.graph.input):
        return
    src = next(i for i in m.graph.input
               if i.name == ("decoder_input_ids" if task == "seq2seq"
                             else list(INPUTS[task])[0]))
    dims = [d.dim_param or d.dim_value for d in src.type.tensor_type.shape.dim]
    if task == "image-classification":
        dims = dims[:1]
    m.graph.input.append(
        helper.make_tensor_value_info("labels", TensorProto.INT64, dims))
    onnx.save(m, path)


def symbolic_dims(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    return {d.dim_param for i in m.graph.input
            for d in i.type.tensor_type.shape.dim if d.dim_param}


def padding_flags(model):
    """`--padding-idx NAME=INDEX` for every embedding with a padding index
    (TorchScript exports do not record it; dynamo's metadata does)."""
    import torch

    names = {id(p): n for n, p in model.named_parameters()}
    flags = []
    for m in model.modules():
        if isinstance(m, torch.nn.Embedding) and m.padding_idx is not None:
            flags += ["--padding-idx", f"{names[id(m.weight)]}={m.padding_idx}"]
    return flags
