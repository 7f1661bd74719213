#!/usr/bin/env python3
"""The GPU's clocks and power while each profile run of a lease ran.

    python3 docs/bench/power.py SMI.csv PROFILE.log

SMI.csv is `nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,
utilization.gpu,clocks_event_reasons.active --format=csv -lms 50` sampled through the lease;
PROFILE.log marks each run with `=== HH:MM:SS.ns ARGS` and `--- HH:MM:SS.ns` (the lease
scripts' `run`). For each run, over the samples in which the GPU was busy (utilization above
0): their count, the median and lowest SM clock (MHz), the median power (W), and the share of
them whose active clock-event reasons include the software power cap (bit 0x4).
"""
import csv
import statistics
import sys
from datetime import datetime


def seconds(hms):
    h, m, s = hms.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s[:15])


def main(smi_path, log_path):
    samples = []
    with open(smi_path) as f:
        rows = csv.reader(f)
        next(rows)
        for r in rows:
            if len(r) < 7 or "MHz" not in r[1]:
                continue
            t = datetime.strptime(r[0].strip(), "%Y/%m/%d %H:%M:%S.%f")
            samples.append((
                t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6,
                int(r[1].split()[0]),
                float(r[3].split()[0]),
                int(r[5].split()[0]),
                int(r[6].strip(), 16),
            ))
    runs = []
    with open(log_path) as f:
        for line in f:
            if line.startswith("=== "):
                _, hms, *args = line.split()
                runs.append([" ".join(args), seconds(hms), None])
            elif line.startswith("--- ") and runs:
                runs[-1][2] = seconds(line.split()[1])
    print("| run | busy samples | SM clock median (MHz) | lowest | power median (W) | power-capped |")
    print("|---|---:|---:|---:|---:|---:|")
    for args, start, end in runs:
        if end is None:
            continue
        busy = [s for s in samples if start <= s[0] <= end and s[3] > 0]
        if not busy:
            continue
        clocks = [s[1] for s in busy]
        capped = sum(1 for s in busy if s[4] & 0x4) / len(busy)
        print(f"| {args} | {len(busy)} | {statistics.median(clocks):.0f} | {min(clocks)} | "
              f"{statistics.median(s[2] for s in busy):.0f} | {100 * capped:.0f}% |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
