#!/usr/bin/env python3
"""Where one large-C step's GPU time goes, from Nsight Compute's kernel durations.

    ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \\
        profile B I C [--bf16 --identity | --tf32] 2 --fusion > FILE.csv
    python3 docs/bench/kernels.py FILE.csv [FILE.csv ..]

The profile tool runs two steps; one step's period is taken from the first launch of the row
kernel (`streamed_rows`) of the first step, minus the product before it (that chunk's logits),
to the same point of the second step: every kernel of one step once, whatever the setup before.
A split-K product's reduction kernel (`splitK` in its name) counts with the product before it.
Each kernel is named by its place: the product just before a row kernel is the chunk's logits;
after a row kernel come that chunk's gradient products (dX, then db as `dZ^T 1`, then the
transposed X chunk and dW: in that order, `src/cube/streamed/cuda.rs::Products::gradients`), or,
in bf16's whole-batch mode, db alone per chunk and dX and dW once after the last chunk
(`Products::finish`); with more than one chunk, the mode is told by the last group being longer
than the others (a step of one chunk is read as the per-chunk route). A kernel that is neither cuBLASLt's nor the row kernel is "other"
(CubeCL's fills, casts and the mean). Prints one row per file, in ms: the products summed over
the chunks, the row kernel, other, and the sum of all (the GPU's busy time; the step's wall
time, from the profile log, is what the GPU was not idle plus what it was).
"""
import csv
import sys


def launches(path):
    """(kernel name, duration in ns) of every profiled launch, in order."""
    lines = open(path).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = csv.DictReader(lines[start:])
    out = []
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        out.append((row["Kernel Name"], float(row["Metric Value"].replace(",", ""))))
    return out


def is_rows(name):
    return name.startswith("streamed_rows")


def is_cublas(name):
    # cuBLASLt's GEMM, GEMV and matrix-transform kernels (nvjet, cutlass, xmma, gemv, ...);
    # CubeCL's kernels carry their Rust names.
    words = ("nvjet", "cutlass", "xmma", "gemm", "gemv", "Gemv", "transform", "Kernel", "splitK")
    return any(w in name for w in words) and not is_rows(name)


def period(all_launches):
    rows = [i for i, (name, _) in enumerate(all_launches) if is_rows(name)]
    chunks = len(rows) // 2
    first, second = rows[0], rows[chunks]
    return all_launches[first - 1 : second - 1], chunks


def breakdown(path):
    step, chunks = period(launches(path))
    parts = {"logits": 0.0, "dX": 0.0, "db": 0.0, "transpose": 0.0, "dW": 0.0, "rows": 0.0, "other": 0.0}
    # The cuBLASLt launches between two row kernels (after the first logits), in order.
    groups, current = [], []
    for k, (name, ns) in enumerate(step):
        if k == 0:
            parts["logits"] += ns  # the period starts with the first chunk's logits
        elif is_rows(name):
            parts["rows"] += ns
            # The product just before this row kernel was its chunk's logits.
            if current and current[-1][0] == "cublas":
                parts["logits"] += current.pop()[1]
            groups.append(current)
            current = []
        elif is_cublas(name) and "splitK" in name and current:
            # A split-K product's reduction: part of the product before it.
            kind, before, first_name = current[-1]
            current[-1] = (kind, before + ns, first_name)
        elif is_cublas(name):
            current.append(("cublas", ns, name))
        else:
            parts["other"] += ns
    groups.append(current)
    whole = len(groups[-1]) > len(groups[1]) if len(groups) > 2 else False
    # groups[0] is empty (before the first row kernel); each later one follows a row kernel.
    for g, group in enumerate(groups[1:], start=1):
        last = g == len(groups) - 1
        if whole:
            # db per chunk, then after the last chunk dX and dW.
            names = ["db"] + (["dX", "dW"] if last else [])
        else:
            names = ["dX", "db", "transpose", "dW"] if len(group) == 4 else ["dX", "db", "dW"]
        for (kind, ns, name), label in zip(group, names):
            parts[label] += ns
        for kind, ns, name in group[len(names) :]:
            parts["other"] += ns
    total = sum(parts.values())
    return chunks, whole, parts, total


if __name__ == "__main__":
    print("| file | chunks | whole-batch dZ | logits | dX | dW | db | transpose | row kernel | other | all kernels |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for path in sys.argv[1:]:
        chunks, whole, p, total = breakdown(path)
        ms = lambda v: f"{v / 1e6:.2f}"
        print(
            f"| {path.rsplit('/', 1)[-1]} | {chunks} | {'yes' if whole else 'no'} | {ms(p['logits'])} | {ms(p['dX'])} | {ms(p['dW'])} | "
            f"{ms(p['db'])} | {ms(p['transpose'])} | {ms(p['rows'])} | {ms(p['other'])} | {ms(total)} |"
        )
