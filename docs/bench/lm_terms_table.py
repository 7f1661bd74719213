#!/usr/bin/env python3
"""The two tables of BENCHMARKS.md's "The LM terms on the streamed path" from its CSV.

    python3 docs/bench/lm_terms_table.py docs/bench/2026-12-03-lm-terms.csv
"""
import csv
import sys

TERMS = "--z-loss 1e-4 --softcap 30 --logit-scale 0.5"


def main(path):
    rows = list(csv.DictReader(open(path)))
    alternated = [r for r in rows if r["series"] == "alternated"]
    print("| B, I, C | precision | plain, round 1 / 2 | terms, round 1 / 2 | terms / plain |")
    print("|---|---|---:|---:|---:|")
    shapes = dict.fromkeys((r["B"], r["I"], r["C"], r["precision"]) for r in alternated)
    for b, i, c, precision in shapes:
        of = lambda options: [
            float(r["step_ms"])
            for r in alternated
            if (r["B"], r["I"], r["C"], r["precision"], r["options"]) == (b, i, c, precision, options)
        ]
        plain, terms = of("plain"), of(TERMS)
        ratios = " / ".join(f"{t / p:.2f}" for t, p in zip(terms, plain))
        print(
            f"| {b}, {i}, {c} | {'TF32' if precision == 'tf32' else precision} "
            f"| {' / '.join(f'{v:.2f}' for v in plain)} "
            f"| {' / '.join(f'{v:.2f}' for v in terms)} | {ratios} |"
        )
    print()
    print("| options | step (one sync) | forward call's host time |")
    print("|---|---:|---:|")
    for r in (r for r in rows if r["series"] == "each term"):
        options = "all three" if r["options"] == TERMS else r["options"]
        options = options if options in ("plain", "all three") else f"`{options}`"
        print(f"| {options} | {float(r['step_ms']):.2f} | {float(r['forward_host_ms']):.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
