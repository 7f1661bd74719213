#!/usr/bin/env python3
"""Writes docs/lm.svg: the training loss of the language-model example (examples/lm.rs) with the
fused head and with Burn's stock head, step by step, from the CSV the example writes
(`--csv FILE`: head,step,loss,tokens_per_second). Run: python3 docs/lm-chart.py docs/lm.csv
(no dependencies). The run's settings and figures are in BENCHMARKS.md.
"""
import csv
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "docs/lm.csv"
series = {}
with open(path) as f:
    for row in csv.DictReader(f):
        series.setdefault(row["head"], []).append((int(row["step"]), float(row["loss"])))

w, h, left, top = 640, 320, 60, 40
steps = max(s for pts in series.values() for s, _ in pts) or 1
lo = min(v for pts in series.values() for _, v in pts)
hi = max(v for pts in series.values() for _, v in pts)
lo, hi = max(0.0, lo - 0.1 * (hi - lo)), hi + 0.05 * (hi - lo)
lx = lambda s: left + w * s / steps
ly = lambda v: top + h - h * (v - lo) / (hi - lo)
colors = {"fused": "#d62728", "stock": "#1f77b4"}
out = ['<svg xmlns="http://www.w3.org/2000/svg" width="760" height="420" font-family="sans-serif">',
       f'<text x="{left + w / 2}" y="22" text-anchor="middle" font-size="14">'
       'Training loss, fused head against stock Linear + CrossEntropyLoss</text>',
       f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#444"/>']
for k in range(6):
    v = lo + (hi - lo) * k / 5
    out.append(f'<line x1="{left}" x2="{left + w}" y1="{ly(v):.1f}" y2="{ly(v):.1f}" stroke="#ddd"/>')
    out.append(f'<text x="{left - 6}" y="{ly(v) + 4:.1f}" text-anchor="end" font-size="11">{v:.2f}</text>')
for k in range(6):
    s = round(steps * k / 5)
    out.append(f'<text x="{lx(s):.1f}" y="{top + h + 16}" text-anchor="middle" font-size="11">{s}</text>')
out.append(f'<text x="{left + w / 2}" y="{top + h + 34}" text-anchor="middle" font-size="12">step</text>')
out.append(f'<text transform="translate(14,{top + h / 2}) rotate(-90)" text-anchor="middle" font-size="12">'
           'cross-entropy (nats per token)</text>')
for k, (name, pts) in enumerate(sorted(series.items())):
    col = colors.get(name, "#444")
    out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
               % (col, " ".join(f"{lx(s):.1f},{ly(v):.1f}" for s, v in pts)))
    out.append(f'<text x="{left + w - 8}" y="{top + 16 + 14 * k}" text-anchor="end" font-size="12" '
               f'fill="{col}">{name}</text>')
out.append(f'<text x="380" y="410" text-anchor="middle" font-size="11">examples/lm.rs on {path}; '
           'settings and figures in BENCHMARKS.md</text>')
out.append("</svg>")
with open("docs/lm.svg", "w") as f:
    f.write("\n".join(out) + "\n")
