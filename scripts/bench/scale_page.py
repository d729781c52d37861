#!/usr/bin/env python3
"""The page of a scale sweep (scripts/bench/scale.sh): one row per model, llama.cpp's and
trine's pp512 and tg128 (the mean over the repetitions for both tools, as llama-bench reports
it, and again the best repetition of each, since llama-bench's first prompt is often slow),
trine's ratio to llama.cpp, the share of the copy rate trine's decode streams weights at,
and the device memory trine's run took against weights + KV cache.

    scale_page.py OUT_DIR LAYOUT:TYPE ...
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def llama_cpp(out, name, best=False):
    """llama-bench's speed per test: the mean of its repetitions, or the best one."""
    runs = load(os.path.join(out, f"llama-{name}.json")) or []
    got = {}
    for r in runs:
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']}"
        if r.get("n_depth"):
            test += f" @ d{r['n_depth']}"
        got[test] = max(r["samples_ts"]) if best and r.get("samples_ts") else r["avg_ts"]
    return got


def depths(out, name):
    """The depths the sweep ran `name` at besides 0, from its files' names."""
    prefix = f"trine-{name}-d"
    found = []
    for f in sorted(os.listdir(out)):
        if f.startswith(prefix) and f.endswith(".json") and f[len(prefix):-5].isdigit():
            found.append(int(f[len(prefix):-5]))
    return found


def trine(out, name, best=False):
    """trine's records per backend, its speeds the mean of the repetitions or the best one."""
    rows = load(os.path.join(out, f"trine-{name}.json")) or []
    got = {}
    for r in rows:
        speeds = {
            t["test"]: max(t["samples"]) if best and t.get("samples") else t["mean_tps"]
            for t in r.get("tests", [])
        }
        got[r["backend"]] = {
            "speeds": speeds,
            "skipped": r.get("skipped"),
            "share": r.get("share_of_copy"),
            "read": r.get("decode_read_gbps"),
            "copy": r.get("copy"),
            "memory": r.get("memory"),
        }
    return got


def fmt(v):
    return "—" if v is None else f"{v:,.1f}"


def ratio(a, b):
    return "—" if a is None or not b else f"{a / b:.2f}×"


def speed_table(backends, rows):
    """One row per (model, depth, llama.cpp's speeds, trine's): pp512 and tg128 of each tool
    and trine's ratios; a depth column where the rows have a depth (None for depth 0)."""
    deep = any(d is not None for _, d, _, _ in rows)
    head = "| model |" + (" depth |" if deep else "") + " llama.cpp pp512 | llama.cpp tg128 |"
    rule = "| --- |" + (" --- |" if deep else "") + " --- | --- |"
    for b in backends:
        head += f" {b} pp512 | ratio | {b} tg128 | ratio |"
        rule += " --- | --- | --- | --- |"
    print(head)
    print(rule)
    for name, d, peer, ours in rows:
        at = "" if d is None else f" @ d{d}"
        pp_t, tg_t = f"pp512{at}", f"tg128{at}"
        line = f"| {name} |" + (f" {d} |" if deep else "")
        line += f" {fmt(peer.get(pp_t))} | {fmt(peer.get(tg_t))} |"
        for b in backends:
            r = ours.get(b)
            if r is None or r["skipped"]:
                line += " not run | | | |"
                continue
            pp, tg = r["speeds"].get(pp_t), r["speeds"].get(tg_t)
            line += (
                f" {fmt(pp)} | {ratio(pp, peer.get(pp_t))} |"
                f" {fmt(tg)} | {ratio(tg, peer.get(tg_t))} |"
            )
        print(line)


def main():
    out, sweep = sys.argv[1], sys.argv[2:]
    backends = []
    rows = []
    for item in sweep:
        name = item.replace(":", "-")
        peer = llama_cpp(out, name)
        ours = trine(out, name)
        for b in ours:
            if b not in backends:
                backends.append(b)
        rows.append((name, peer, ours))
    with open(os.path.join(out, "machine.txt")) as f:
        machine = f.read().strip().splitlines()
    print("# Scale sweep: trine against llama.cpp CUDA\n")
    for line in machine:
        print(f"- {line}")
    print(
        "\nSynthetic GGUFs of each layout made on the machine by `trine synth-model`; both tools "
        "read the same file. llama.cpp: `llama-bench -p 512 -n 128 -ngl 99 -fa 1`. trine: "
        "`xtask bench --model F -p 512 -n 128`. Figures are tokens per second, the mean of the "
        "repetitions for both. Ratios are trine over llama.cpp.\n"
    )
    speed_table(backends, [(name, None, peer, ours) for name, peer, ours in rows])
    print(
        "\nThe best repetition of each tool against the other's best (llama-bench's first "
        "prompt is often slow, which its mean carries):\n"
    )
    speed_table(
        backends,
        [
            (name, None, llama_cpp(out, name, best=True), trine(out, name, best=True))
            for name, _, _ in rows
        ],
    )
    deep = [
        (name, d, llama_cpp(out, f"{name}-d{d}"), trine(out, f"{name}-d{d}"))
        for name, _, _ in rows
        for d in depths(out, name)
    ]
    if deep:
        print("\n## At depth\n")
        print(
            "The same tests with tokens already in the KV cache (llama-bench's `-d`, "
            "trine's `xtask bench -d`), fed before each test and not timed.\n"
        )
        speed_table(backends, deep)
    print("\n## Decode against the copy rate, and device memory\n")
    print(
        "The weights a decode step reads (the embedding table left out) times tg128's tokens "
        "per second, over the backend's fastest copy (the driver's buffer copy or one of trine's "
        "copy kernels, reads plus writes) measured in the same run; and how far the device's free "
        "memory fell over trine's run, against weights + KV cache (512 tokens of context).\n"
    )
    print("| model | backend | weights read per token (GB) | streamed (GB/s) | copy (GB/s, how) | share of copy | device memory used (GiB) | over weights + KV |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, _, ours in rows:
        for b, r in ours.items():
            if r["skipped"]:
                print(f"| {name} | {b} | not run: {r['skipped']} | | | | | |")
                continue
            m = r["memory"] or {}
            copy = r["copy"] or {}
            reads = m.get("decode_reads")
            used = m.get("device_used")
            base = (m.get("weights") or 0) + (m.get("kv_cache") or 0)
            share = "—" if r["share"] is None else f"{r['share']:.2f}"
            print(
                f"| {name} | {b} | {'—' if not reads else f'{reads / 1e9:.2f}'} | {fmt(r['read'])} |"
                f" {fmt(copy.get('gbps'))} ({copy.get('how', '—')}) |"
                f" {share} |"
                f" {'—' if used is None else f'{used / 2**30:.2f}'} |"
                f" {'—' if used is None or not base else f'{used / base:.3f}×'} |"
            )


if __name__ == "__main__":
    main()
