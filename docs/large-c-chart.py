#!/usr/bin/env python3
"""Writes docs/large-c.svg: full-step time and peak extra memory against C, per contender.

The figures are BENCHMARKS.md's night lease (H200, 2026-12-01, about 17:50 UTC: ours and the
peers back to back in one lease), copied here by hand. Every head drawn computes CE on
X W^T + b without the ReLU (ours with HeadActivation::Identity, fusion off; PyTorch eager
without the ReLU; Liger and CCE as they are; CCE also without the bias). Our memory is the live
bytes at the streamed path's fullest point plus cuBLASLt's workspace, beyond inputs and
gradients; the peers' is torch's peak allocation beyond the inputs. Run:
python3 docs/large-c-chart.py (no dependencies).
"""
import math

C = [1000, 32000, 128256]
# Step median, ms (B = 8192; I = 1024 at C = 1000, 4096 above). None: not run.
TIME = {
    "ours exact (f32)": [1.626, 133.6, 531.9],
    "ours TF32": [0.661, 25.40, 109.8],
    "ours bf16": [0.452, 13.83, 55.34],
    "torch fp32": [1.235, 126.1, None],
    "torch tf32": [0.417, 23.60, 97.89],
    "torch bf16": [0.300, 10.84, 42.99],
    "Liger FLCE tf32": [1.005, 27.23, 161.5],
    "Liger FLCE bf16": [0.779, 11.71, 59.78],
    "CCE bf16": [1.356, 38.69, 155.0],
}
# Peak extra memory beyond inputs and gradients, MiB.
MEMORY = {
    "ours exact and TF32 (live)": [63.3, 219.5, 407.8],
    "ours bf16 (live)": [80.9, 563.3, 1597.9],
    "torch tf32": [94.5, 2371.9, 9891.5],
    "torch bf16": [78.1, 1185.9, 4945.8],
    "Liger FLCE tf32": [94.5, 625.0, 2129.3],
    "Liger FLCE bf16": [78.2, 203.2, 62.9],
    "CCE bf16": [0.1, 0.4, 1.5],
}
COLORS = ["#d62728", "#ff7f0e", "#e377c2", "#1f77b4", "#17becf", "#2ca02c", "#9467bd", "#8c564b", "#7f7f7f"]


def panel(x0, title, ylabel, series, lo, hi):
    w, h, left, top = 460, 300, 60, 40
    out = [f'<g transform="translate({x0},0)">',
           f'<text x="{left + w / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    lx = lambda c: left + w * (math.log10(c) - 2.8) / (math.log10(150000) - 2.8)
    ly = lambda v: top + h - h * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
    out.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>')
    e = math.floor(math.log10(lo))
    while 10 ** e <= hi:
        v = 10 ** e
        if v >= lo:
            out.append(f'<line x1="{left}" x2="{left + w}" y1="{ly(v)}" y2="{ly(v)}" stroke="#ddd"/>')
            out.append(f'<text x="{left - 6}" y="{ly(v) + 4}" text-anchor="end" font-size="11">{v:g}</text>')
        e += 1
    for c in C:
        out.append(f'<text x="{lx(c)}" y="{top + h + 16}" text-anchor="middle" font-size="11">{c}</text>')
    out.append(f'<text x="{left + w / 2}" y="{top + h + 34}" text-anchor="middle" font-size="12">C (classes), log scale</text>')
    out.append(f'<text transform="translate(14,{top + h / 2}) rotate(-90)" text-anchor="middle" font-size="12">{ylabel}</text>')
    for k, (name, ys) in enumerate(series.items()):
        col = COLORS[k % len(COLORS)]
        pts = [(lx(c), ly(v)) for c, v in zip(C, ys) if v is not None]
        out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                   % (col, " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)))
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{col}"/>')
        out.append(f'<text x="{left + 8}" y="{top + 16 + 14 * k}" font-size="11" fill="{col}">{name}</text>')
    out.append("</g>")
    return out


svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="1080" height="400" font-family="sans-serif">',
       '<text x="540" y="392" text-anchor="middle" font-size="11">NVIDIA H200, 2026-12-01, B = 8192, '
       'full training step (forward and backward to X, W, b), median, no ReLU; BENCHMARKS.md</text>']
svg += panel(0, "Step time", "ms, log scale", TIME, 0.1, 1000)
svg += panel(540, "Peak extra memory", "MiB, log scale", MEMORY, 0.05, 20000)
svg.append("</svg>")
with open("docs/large-c.svg", "w") as f:
    f.write("\n".join(svg) + "\n")
