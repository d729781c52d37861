#!/usr/bin/env python3
"""Greedy decoding of a Llama-, Qwen2-, Qwen3-, Qwen3-MoE-, Gemma3- or Phi3-architecture GGUF in plain float64 numpy.

An exact-arithmetic reference over the same dequantized weights as llama.cpp: it shows where
llama.cpp's own shortcuts (activations quantized to Q8_1/Q8_0 before each matmul, an f16 KV
cache, f16 flash-attention accumulators) flip a greedy token. It takes the prompt ids and the
end-of-generation ids from the llama.cpp fixture, so tokenization is not reimplemented here, and
writes JSON with its own ids and top-2 logits and the first step where llama.cpp chose otherwise.

With a third argument, the output of llama_reference on an F32 copy of the model (flash attention
off, f32 KV cache; see dequantize_gguf.py), it checks itself against that second exact-arithmetic
implementation: the ids must be equal, and the largest top-1 logit difference is recorded.

Rope is ggml's with the model's frequency scaling, read as llama.cpp reads it: rope_freqs.weight
(each pair's angle divided by its factor), {arch}.rope.scaling.type none, linear (the default) or
yarn with .factor (or the older rope.scale_linear), .original_context_length and .attn_factor.
With --ignore-rope-scaling it turns as a model without them would: what an implementation that
ignores them computes. With --whole-heads it turns every value of a head where
{arch}.rope.dimension_count asks for the first ones only (partial rotary), each pair past the
file's factors by a factor of 1: what an implementation that ignores partial rotary computes.

    python3 llama_numpy.py [--ignore-rope-scaling] [--whole-heads] MODEL.gguf LLAMA_FIXTURE.json [LLAMA_F32_WEIGHTS.json] > F64_FIXTURE.json

With --ids, it decodes the given prompt ids itself (a synthetic model has no llama.cpp fixture)
and records every step's logits as well, for a test to hold trine's logits to:

    python3 llama_numpy.py [--ignore-rope-scaling] [--n-ctx N] --ids MODEL.gguf N_PREDICT ID,ID,... > F64_FIXTURE.json

--n-ctx is the context llama.cpp runs with (default: the llama.cpp fixture's settings.n_ctx,
and the model's context length with --ids), which picks
Phi-3's LongRoPE factors: rope_factors_long.weight where it exceeds
{arch}.rope.scaling.original_context_length, else rope_factors_short.weight (llama.cpp's
get_rope_factors), turned with the file's rope.scaling.attn_factor.

The families differ only where llama.cpp's graphs do (src/models/llama.cpp, qwen2.cpp,
qwen3.cpp, gemma3.cpp, phi3.cpp): Qwen2 adds the Q, K and V biases after the products; Qwen3 rms-normalises each
query and key head (attn_q_norm, attn_k_norm) before rope and takes its head size from
qwen3.attention.key_length; both rotate NeoX pairs (i, i + d/2) where Llama rotates adjacent
ones (2i, 2i + 1). Gemma3 does as Qwen3 and also scales the embedding by sqrt(n_embd),
rms-normalises each block's output (post_attention_norm, post_ffw_norm) before its residual
add, gates its FFN with GELU's tanh form, scales queries by 1/sqrt(head_dim), and, where the
file gives gemma3.attention.sliding_window, lets the local layers (all but every
sliding_window_pattern-th, default 6) see only the last `window` positions and turn by rope of
base rope.freq_base_swa (default 10000) without scaling. Phi3 (src/models/phi3.cpp) holds Q, K and V in one attn_qkv and gate then
up in one ffn_up, which this reference splits by rows, and rotates NeoX pairs. Only the first
{arch}.rope.dimension_count values of a head rotate (all of them where the key is absent).
Qwen3-MoE (qwen3moe.cpp, llama-graph.cpp's build_moe_ffn) is Qwen3's attention
with a mixture of experts for the feed-forward block: the router's softmax over expert_count
experts, the expert_used_count most probable chosen, their probabilities divided by their sum,
and the chosen SwiGLU experts' outputs (ffn_gate_exps, ffn_up_exps, ffn_down_exps) weighted and
summed.
"""

import datetime
import hashlib
import importlib.metadata
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def yarn_corr_dims(n_dims, n_ctx_orig, base, beta_fast=32.0, beta_slow=1.0):
    """ggml's ggml_rope_yarn_corr_dims in its float32 arithmetic (floor and ceil decide whole pairs)."""
    f = np.float32

    def dim(n_rot):
        return f(n_dims) * np.log(f(n_ctx_orig) / (f(n_rot) * f(2) * f(np.pi))) / (f(2) * np.log(f(base)))

    return max(0.0, float(np.floor(dim(beta_fast)))), min(n_dims - 1.0, float(np.ceil(dim(beta_slow))))


class Model:
    def __init__(self, path, ignore_rope_scaling=False, n_ctx=None, whole_heads=False):
        reader = GGUFReader(path)
        arch = reader.fields["general.architecture"].contents()
        if arch not in ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3", "phi3"):
            sys.exit(f"llama_numpy: architecture {arch!r} is not llama, qwen2, qwen3, qwen3moe, gemma3 or phi3")
        self.arch = arch

        def meta(key, default=None):
            field = reader.fields.get(f"{arch}.{key}")
            if field is None:
                if default is None:
                    sys.exit(f"llama_numpy: {arch}.{key} is missing")
                return default
            return field.contents()

        self.n_layer = meta("block_count")
        self.n_head = meta("attention.head_count")
        self.n_head_kv = meta("attention.head_count_kv")
        self.rope_base = meta("rope.freq_base")
        self.eps = meta("attention.layer_norm_rms_epsilon")
        self.w = {t.name: dequantize(t.data, t.tensor_type).astype(np.float64) for t in reader.tensors}
        # Tied embeddings: without output.weight the token embedding is the output projection.
        self.output = self.w.get("output.weight", self.w["token_embd.weight"])
        self.head_dim = meta("attention.key_length", self.w["token_embd.weight"].shape[1] // self.n_head)
        self.n_rot = self.head_dim if whole_heads else meta("rope.dimension_count", self.head_dim)
        self.neox = arch in ("qwen2", "qwen3", "qwen3moe", "gemma3", "phi3")
        self.gemma = arch == "gemma3"
        self.experts_used = meta("expert_used_count") if arch == "qwen3moe" else 0
        # Per forward call, the smallest gap between the last chosen and the first unchosen
        # router logit over its tokens and layers: how near a routing choice came to a tie.
        self.route_gaps = []
        self.split_fused()
        self.n_ctx = meta("context_length") if n_ctx is None else n_ctx
        self.inv_freq, self.mscale = self.rope_scaling(reader, ignore_rope_scaling)
        # Per layer: its window (None: global) and its rope's angles and magnitude.
        self.window = [None] * self.n_layer
        self.layer_rope = [(self.inv_freq, self.mscale)] * self.n_layer
        window = meta("attention.sliding_window", 0) if self.gemma else 0
        if window:
            pattern = meta("attention.sliding_window_pattern", 6)
            local_freq = meta("rope.freq_base_swa", 10000.0) ** (-np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim)
            for layer in range(self.n_layer):
                if pattern == 0 or layer % pattern < pattern - 1:
                    self.window[layer] = window
                    self.layer_rope[layer] = (local_freq, self.mscale if ignore_rope_scaling else float(meta("rope.scaling.attn_factor", 1.0)))

    def split_fused(self):
        """Phi3's fused tensors as the separate projections: attn_qkv's rows are Q's, K's, V's,
        ffn_up's the gate's then the up projection's."""
        q, kv = self.n_head * self.head_dim, self.n_head_kv * self.head_dim
        for layer in range(self.n_layer):
            p = f"blk.{layer}."
            qkv = self.w.pop(p + "attn_qkv.weight", None)
            if qkv is not None:
                self.w[p + "attn_q.weight"] = qkv[:q]
                self.w[p + "attn_k.weight"] = qkv[q : q + kv]
                self.w[p + "attn_v.weight"] = qkv[q + kv :]
            # A mixture-of-experts layer has neither.
            if p + "ffn_gate.weight" not in self.w and p + "ffn_up.weight" in self.w:
                gate_up = self.w[p + "ffn_up.weight"]
                ff = gate_up.shape[0] // 2
                self.w[p + "ffn_gate.weight"], self.w[p + "ffn_up.weight"] = gate_up[:ff], gate_up[ff:]

    def rope_scaling(self, reader, ignore):
        """Each pair's angle per position and the magnitude of the rotated values (ggml's rope_yarn)."""
        d = self.n_rot
        inv_freq = self.rope_base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        if ignore:
            return inv_freq, 1.0

        def meta(key, default):
            field = reader.fields.get(f"{self.arch}.{key}")
            return default if field is None else field.contents()

        original = meta("rope.scaling.original_context_length", meta("context_length", 0))
        longrope = "rope_factors_long.weight" if self.n_ctx > original else "rope_factors_short.weight"
        def factors(name):
            # Pairs past the file's n_rot/2 factors (under --whole-heads) divide by 1.
            f = self.w[name]
            return np.concatenate([f, np.ones(len(inv_freq) - len(f))])

        if "rope_freqs.weight" in self.w:
            inv_freq = inv_freq / factors("rope_freqs.weight")
        elif self.arch == "phi3" and longrope in self.w:
            inv_freq = inv_freq / factors(longrope)
        kind = meta("rope.scaling.type", "linear")
        factor = meta("rope.scaling.factor", None)
        if factor is None:
            factor = meta("rope.scale_linear", 0.0)
        factor = 1.0 if factor == 0.0 else float(factor)
        attn_factor = float(meta("rope.scaling.attn_factor", 1.0))
        if kind == "none":
            return inv_freq, attn_factor
        if kind == "linear":
            return inv_freq / factor, attn_factor
        if kind != "yarn":
            sys.exit(f"llama_numpy: rope scaling {kind!r} is not none, linear or yarn")
        low, high = yarn_corr_dims(d, meta("rope.scaling.original_context_length", meta("context_length", 0)), self.rope_base)
        pair = np.arange(d // 2, dtype=np.float64)
        ramp = 1.0 - np.clip((pair - low) / max(0.001, high - low), 0.0, 1.0)
        inv_freq = inv_freq * ((1.0 / factor) * (1.0 - ramp) + ramp)
        mscale = attn_factor * (1.0 + 0.1 * np.log(factor) if factor > 1.0 else 1.0)
        return inv_freq, mscale

    def rms_norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, positions, layer):
        # llama.cpp's "normal" rope rotates adjacent pairs (2i, 2i+1) of each head (the GGUF
        # converter permuted Llama's q/k rows so that this matches the original model); NeoX
        # rope, Qwen's, Gemma's and Phi3's, rotates (i, i + d/2) with the same angles.
        # Values past n_rot pass through (partial rotary).
        d = self.n_rot
        inv_freq, mscale = self.layer_rope[layer]
        angle = positions[:, None].astype(np.float64) * inv_freq[None, :]
        cos, sin = mscale * np.cos(angle)[:, None, :], mscale * np.sin(angle)[:, None, :]
        first, second = (slice(0, d // 2), slice(d // 2, d)) if self.neox else (slice(0, d, 2), slice(1, d, 2))
        a, b = x[..., first], x[..., second]
        out = x.copy()
        out[..., first] = a * cos - b * sin
        out[..., second] = a * sin + b * cos
        return out

    def post_norm(self, y, name):
        """A block's output before its residual add: rms-normalised where the file has the norm."""
        return y if name not in self.w else self.rms_norm(y, self.w[name])

    @staticmethod
    def gelu(x):
        """GELU's tanh form with ggml's constants (ggml_gelu_f32)."""
        c, a = float(np.float32(0.79788456080286535587989211986876)), float(np.float32(0.044715))
        return 0.5 * x * (1.0 + np.tanh(c * x * (1.0 + a * x * x)))

    def project(self, h, p, name, heads):
        """h times the layer's projection `name`, plus its bias where the file has one, as heads."""
        y = h @ self.w[p + name + ".weight"].T
        bias = self.w.get(p + name + ".bias")
        if bias is not None:
            y = y + bias
        y = y.reshape(len(h), heads, self.head_dim)
        norm = self.w.get(p + name + "_norm.weight")
        return y if norm is None else self.rms_norm(y, norm)

    def forward(self, ids, cache):
        """Runs `ids` after the tokens already in `cache` (one (k, v) list per layer) and returns
        the logits after the last of them."""
        w, n, d = self.w, len(ids), self.head_dim
        if self.experts_used:
            self.route_gaps.append(np.inf)
        start = cache[0][0].shape[0] if cache[0] else 0
        positions = np.arange(start, start + n)
        # Row i may see keys 0..start+i; through a window, only the last `window` of them.
        keys = np.arange(start + n)[None, :]
        causal = keys > positions[:, None]
        group = self.n_head // self.n_head_kv
        x = w["token_embd.weight"][ids]
        if self.gemma:
            x = x * np.sqrt(x.shape[1])
        for layer in range(self.n_layer):
            p = f"blk.{layer}."
            window = self.window[layer]
            hidden = causal if window is None else causal | (positions[:, None] - keys >= window)
            mask = np.where(hidden, -np.inf, 0.0)
            h = self.rms_norm(x, w[p + "attn_norm.weight"])
            q = self.rope(self.project(h, p, "attn_q", self.n_head), positions, layer)
            k = self.rope(self.project(h, p, "attn_k", self.n_head_kv), positions, layer)
            v = self.project(h, p, "attn_v", self.n_head_kv)
            if cache[layer]:
                k = np.concatenate([cache[layer][0], k])
                v = np.concatenate([cache[layer][1], v])
            cache[layer] = (k, v)
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(d) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            attn = np.einsum("hqk,khd->qhd", scores, v).reshape(n, -1) @ w[p + "attn_output.weight"].T
            x = x + self.post_norm(attn, p + "post_attention_norm.weight")
            h = self.rms_norm(x, w[p + "ffn_norm.weight"])
            if self.experts_used:
                x = x + self.experts(h, p)
            else:
                gate = h @ w[p + "ffn_gate.weight"].T
                up = h @ w[p + "ffn_up.weight"].T
                act = self.gelu(gate) if self.gemma else gate / (1.0 + np.exp(-gate))
                x = x + self.post_norm((act * up) @ w[p + "ffn_down.weight"].T, p + "post_ffw_norm.weight")
        return self.output @ self.rms_norm(x[-1], w["output_norm.weight"])


    def swiglu(self, h, p, suffix, expert=None):
        """The SwiGLU block of h, or of one expert's slice of the stacked `_exps` tensors."""

        def weight(name):
            m = self.w[p + name + suffix + ".weight"]
            return m if expert is None else m[expert]

        gate = h @ weight("ffn_gate").T
        up = h @ weight("ffn_up").T
        return (gate / (1.0 + np.exp(-gate)) * up) @ weight("ffn_down").T

    def experts(self, h, p):
        """The mixture of experts of each row of h: softmax routing, the top experts_used, their
        probabilities normalised over the chosen (the sum clamped below as llama.cpp clamps it)."""
        logits = h @ self.w[p + "ffn_gate_inp.weight"].T
        ranked = -np.sort(-logits, axis=-1)
        gap = (ranked[:, self.experts_used - 1] - ranked[:, self.experts_used]).min(initial=np.inf)
        self.route_gaps[-1] = min(self.route_gaps[-1], float(gap))
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        out = np.zeros_like(h)
        for t in range(len(h)):
            chosen = np.argsort(-probs[t], kind="stable")[: self.experts_used]
            weights = probs[t, chosen] / max(probs[t, chosen].sum(), 6.103515625e-5)
            for e, wt in zip(chosen, weights):
                out[t] += wt * self.swiglu(h[t : t + 1], p, "_exps", e)[0]
        return out


def greedy(model, prompt_ids, n_predict, eog_ids, steps=None):
    """Greedy ids and each step's top two logits; each step's logits appended to `steps`."""
    cache = [None] * model.n_layer
    logits = model.forward(prompt_ids, cache)
    ids, top2 = [], []
    for _ in range(n_predict):
        if steps is not None:
            steps.append(logits)
        best, second = np.argsort(-logits, kind="stable")[:2]
        ids.append(int(best))
        top2.append([float(logits[best]), float(logits[second])])
        if ids[-1] in eog_ids or len(ids) == n_predict:
            break
        logits = model.forward([ids[-1]], cache)
    return ids, top2


def synthetic(model_path, n_predict, prompt, ignore_rope_scaling=False, n_ctx=None, whole_heads=False):
    """The --ids mode: greedy decoding of `prompt` with every step's logits, as JSON."""
    with open(model_path, "rb") as f:
        sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    model = Model(model_path, ignore_rope_scaling, n_ctx, whole_heads)
    steps = []
    ids, top2 = greedy(model, prompt, n_predict, set(), steps)
    doc = {
        "provenance": {
            "generator": "scripts/reference/llama_numpy.py --ids",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "arithmetic": "float64 over weights dequantized by the gguf package",
            "numpy_version": np.__version__,
            "gguf_version": importlib.metadata.version("gguf"),
            "model_sha256": sha256,
            "architecture": model.arch,
            "n_ctx": model.n_ctx,
        },
        "prompt_ids": prompt,
        "ids": ids,
        "top2": [[round(a, 9), round(b, 9)] for a, b in top2],
        "logits": [[round(float(v), 9) for v in step] for step in steps],
    }
    if model.experts_used:
        # Each step's routing: the smallest gap between a chosen and an unchosen expert's
        # router logit (the last step's forward call computes logits no step records).
        doc["route_gaps"] = [round(g, 9) for g in model.route_gaps[: len(steps)]]
    sys.stdout.write(json.dumps(doc) + "\n")


def load_json(path):
    # llama.cpp's completions of random models may end inside a multi-byte character.
    with open(path, encoding="utf-8", errors="replace") as f:
        return json.load(f)


def check_against(results, path):
    """Compares our greedy results with llama.cpp's run on F32 weights; exits on any id difference."""
    other = load_json(path)["greedy"]
    if [g["prompt_ids"] for g in other] != [r["prompt_ids"] for r in results]:
        sys.exit(f"llama_numpy: {path} holds other prompts")
    worst = 0.0
    for ours, theirs in zip(results, other):
        if ours["ids"] != theirs["ids"]:
            sys.exit(f"llama_numpy: ids differ from {path} for {ours['prompt'][:40]!r}: {ours['ids']} vs {theirs['ids']}")
        worst = max(worst, max(abs(a[0] - b[0]) for a, b in zip(ours["top2"], theirs["top2"])))
    return {
        "against": "llama_reference on an F32 copy of the model, flash attention off, f32 KV cache",
        "ids_equal": True,
        "max_abs_top1_logit_diff": float(f"{worst:.3g}"),
    }


def main():
    ignore_rope_scaling = "--ignore-rope-scaling" in sys.argv
    whole_heads = "--whole-heads" in sys.argv
    argv = [a for a in sys.argv if a not in ("--ignore-rope-scaling", "--whole-heads")]
    n_ctx = None
    if "--n-ctx" in argv:
        at = argv.index("--n-ctx")
        n_ctx = int(argv[at + 1])
        del argv[at : at + 2]
    if len(argv) == 5 and argv[1] == "--ids":
        synthetic(argv[2], int(argv[3]), [int(i) for i in argv[4].split(",")], ignore_rope_scaling, n_ctx, whole_heads)
        return
    if len(argv) not in (3, 4):
        sys.exit(
            "usage: llama_numpy.py [--ignore-rope-scaling] [--whole-heads] MODEL.gguf LLAMA_FIXTURE.json [LLAMA_F32_WEIGHTS.json]\n"
            "       llama_numpy.py [--ignore-rope-scaling] --ids MODEL.gguf N_PREDICT ID,ID,..."
        )
    model_path, fixture_path = argv[1], argv[2]
    fixture = load_json(fixture_path)
    with open(model_path, "rb") as f:
        sha256 = hashlib.file_digest(f, "sha256").hexdigest()
    if sha256 != fixture["provenance"]["model_sha256"]:
        sys.exit(f"llama_numpy: {model_path} has sha256 {sha256}, the fixture was made from another model")
    # The context llama.cpp ran with, unless --n-ctx says otherwise: it picks LongRoPE's factors.
    n_ctx = fixture["settings"].get("n_ctx") if n_ctx is None else n_ctx
    model = Model(model_path, ignore_rope_scaling, n_ctx, whole_heads)
    eog_ids = set(fixture["settings"]["eog_ids"])
    provenance = {
        "generator": "scripts/reference/llama_numpy.py",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "arithmetic": "float64 over weights dequantized by the gguf package",
        "numpy_version": np.__version__,
        "gguf_version": importlib.metadata.version("gguf"),
        "model_sha256": sha256,
        "prompts_from": fixture_path.rsplit("/", 1)[-1],
    }
    results = []
    for case in fixture["greedy"]:
        ids, top2 = greedy(model, case["prompt_ids"], case["n_predict"], eog_ids)
        llama_ids = case["ids"]
        diff = next((i for i, (a, b) in enumerate(zip(ids, llama_ids)) if a != b), None)
        if diff is None and len(ids) != len(llama_ids):
            diff = min(len(ids), len(llama_ids))
        print(f"llama_numpy: {case['prompt'][:40]!r}: first difference at step {diff}", file=sys.stderr)
        results.append(
            {
                "prompt": case["prompt"],
                "prompt_ids": case["prompt_ids"],
                "n_predict": case["n_predict"],
                "ids": ids,
                "top2": [[round(a, 6), round(b, 6)] for a, b in top2],
                "stopped_at_eog": ids[-1] in eog_ids,
                "first_difference_from_llama_cpp": diff,
            }
        )
    if ignore_rope_scaling:
        provenance["rope_scaling"] = "ignored"
    if len(argv) == 4:
        provenance["self_check"] = check_against(results, argv[3])
    entries = [
        "{" + ",\n ".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False, separators=(',', ':'))}" for k, v in r.items()) + "}"
        for r in results
    ]
    sys.stdout.write(
        '{\n"provenance": ' + json.dumps(provenance) + ',\n"greedy": [\n' + ",\n".join(entries) + "\n]\n}\n"
    )


if __name__ == "__main__":
    main()
