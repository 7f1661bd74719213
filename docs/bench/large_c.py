#!/usr/bin/env python3
"""Issue 30's table: ours and the peers, measured in one lease, from one CSV per lease.

    python3 docs/bench/large_c.py csv LEASE_DIR > docs/bench/DATE-large-c.csv
    python3 docs/bench/large_c.py table docs/bench/DATE-large-c.csv
    python3 docs/bench/large_c.py routes docs/bench/DATE-routes.csv
    python3 docs/bench/large_c.py before docs/bench/DATE-online-softmax.csv
    python3 docs/bench/large_c.py readme docs/bench/DATE-large-c.csv
    python3 docs/bench/large_c.py chunks docs/bench/DATE-chunks-profile.log
    python3 docs/bench/large_c.py terms docs/bench/DATE-chunks-profile.log
    python3 docs/bench/large_c.py builds docs/bench/DATE-night-builds-profile.log [BINARY=LABEL,..]
    python3 docs/bench/large_c.py lease DATE-profile.log [DATE-peers.csv] > docs/bench/DATE.csv
    python3 docs/bench/large_c.py timeline docs/bench/DATE.csv
    python3 docs/bench/large_c.py small docs/bench/DATE.csv
    python3 docs/bench/large_c.py memory docs/bench/DATE.csv
    python3 docs/bench/large_c.py issue docs/bench/DATE.csv
    python3 docs/bench/large_c.py chart docs/bench/DATE.csv docs/bench/DATE.svg
    python3 docs/bench/large_c.py profile docs/bench/DATE-profile.log
    python3 docs/bench/large_c.py compare docs/bench/EARLIER.csv docs/bench/LATER.csv
    python3 docs/bench/large_c.py answers docs/bench/DATE.csv [docs/bench/DATE2.csv ...]
    python3 docs/bench/large_c.py sweep docs/bench/DATE-sweep.log
    python3 docs/bench/large_c.py waits docs/bench/DATE.csv

`csv` reads a lease's logs: `profile.log` (testing/src/bin/profile.rs with `--fusion --phases
--memory`, each run headed by `=== [HH:MM:SS] B I C [flags]`) and `peers.csv` (../shared/peers's
peers_bench.py `--csv`), and writes the rows in the columns
`B,I,C,contender,precision,activation,step_ms,extra_mib`. Ours: contender `ours` (the default
`Cuda` backend, fusion on, one GPU timeline) and `ours-host-ordered` (the same with the two
streams ordered from the host, `--host-ordered`), `ours-raw` (the raw `CubeBackend`, fusion
off: a header that lists the run's whole command line, `--phases` included, without
`--fusion`; older logs' headers list the shape and precision only, and ran with `--fusion`); step_ms is the median synced step, extra_mib
the streamed path's peak bytes in use in CubeCL's pool beyond the inputs and the gradients
(cuBLASLt's 32 MiB workspace, allocated once per device outside that pool, is not in it; blank
where the streamed path did not run). A configuration run twice keeps its first run. `ours-dw-as-stored` is `ours` with TF32 dW from X as stored
(`--dw-as-stored`).

A header may end in a build's name (a lease that ran builds side by side): `old` is the build
of commit 423c3a5 (contender `ours-423c3a5`); `new` is the build of this change (`ours`), and
`oldfetch` the same binary with `FH_OLD_FETCH=1`, a switch of that measurement build (removed
before the commit) that fetched the addresses one server round trip each
(`ours-per-buffer-fetch`).

`table` prints, per shape and precision, ours beside the fastest peer of the same precision
(any activation: Liger and CCE have no ReLU) and the ratio. `routes` prints ours on one GPU
timeline beside the host-ordered route and the TF32 dW layout as stored. `before` prints
the three builds side by side.

`readme` prints the README's table: ours (ReLU in f32 and TF32, the identity in bf16), each
peer with ReLU and without, "not run" where the peers' script has no such row, "fails (1)"
for CCE outside bf16 (its backward refuses them).

`builds` reads a profile log of builds run side by side in one lease (each header starts with
the binary that ran it): per configuration, each build's steps (one sync, every repeat), and
the ratio of the last build's best to the first's.

`chunks` and `terms` read a profile log itself (its configurations have no column in the
CSV): `chunks` prints each run without LM terms with its chunk budget (`--chunk N`, else the
rule of the build that ran it, given as `--rule SMALL,LARGE` elements, default the 48 Mi / 96 Mi
rule before 2026-12-03 evening), the chunk rows that budget gives, the step (one sync, then 20
back to back), and the memory; `terms` prints the runs at one shape and precision with their
flags, backend (`--fusion` or raw) and step beside the same backend's plain run (its last one
in the log).

`lease` writes one lease's CSV from its profile log and the peers' CSV (since 2026-12-05):
issue 30's columns, then `options` (the run's other flags, "none"), `round` (the how-manieth
run of that configuration), `method` (`phases`, `timeline`, `steps` or `peers_bench`),
`back_to_back_ms`, `stream_ms`, `rows_ms`, `after_ms`; step_ms is the traced wall for
`timeline` runs, "failed: " and the run's error where it printed no figure; extra_mib "not
run" without `--memory`; "-" where the method does not measure a column. `timeline` prints
its traced runs, each beside the mean wall of the plain runs of its shape and precision;
`small` its `--phases` runs of ours, every round, beside the peers of the same shape;
`memory` the same runs with their extra MiB, beside every peer of the same shape and
precision with theirs (the lean mode and rounded logits beside their inputs' precision:
precision `bf16-lean`, `bf16-rounded`, `bf16-lean-rounded`).

`issue` prints issue 30's table from one lease's CSV: each of its rows (and bf16's modes
where the lease ran them), ours with every round and its extra MiB, the best peer of the
inputs' precision with theirs, the ratio on the rounds' mean, the target and whether that
mean meets it. `chart` draws the same rows as an SVG: ours and the best peer as fractions of
the target. `profile` prints DESIGN.md's table of where the step's time goes from a
profile log's traced runs, beside the same configurations' untraced steps. `compare` sets
two leases' CSVs side by side: every configuration both ran (ours' first `--phases` round,
the peers' rows), its step in each and the later's ratio to the earlier, then the ratios'
range for ours and the peers' median and range, at the LM shapes (C >= 32000) and below.
`waits CSV [K]` prints the runs of `profile --host-waits K` (2026-12-07, fourth session): per
shape and precision, the step (one sync, each round) for each K, and the mean of K = 0 (the
build's own route) over the mean of the given K (default 3). The flags meant other things in
each build: the route before this session is K = 3 only near enough in the build of 8411edd
(leases Q and R: 1 the calling thread's wait, 2 g read on the host in a custom op), and K = 1
in lease P's build and in the final build (lease S), where 2 is the server thread's wait at
every size.
"""
import csv
import os
import re
import statistics
import sys

COLUMNS = ["B", "I", "C", "contender", "precision", "activation", "step_ms", "extra_mib"]
# A header's last word naming the build that ran it, and its contender.
BUILDS = {"old": "ours-423c3a5", "oldfetch": "ours-per-buffer-fetch", "new": "ours"}
# The peers' names in the tables.
PEER_NAMES = {"torch": "torch", "liger": "Liger", "cce": "CCE", "torch-compile": "torch.compile"}


def header_words(line):
    """A run header's words after `===`, without the time of day that leases since 2026-12-04
    put first (for docs/bench/power.py)."""
    words = line.split()[1:]
    if words and re.fullmatch(r"\d\d:\d\d:\d\d(\.\d+)?", words[0]):
        words = words[1:]
    return words


def contender(flags):
    """Ours' contender name from a run's flags (the module's docstring)."""
    build = BUILDS.get(flags[-1]) if flags else None
    if build:
        return build
    if "--phases" in flags and "--fusion" not in flags:
        return "ours-raw"
    if "--host-ordered" in flags:
        return "ours-host-ordered"
    if "--dw-as-stored" in flags:
        return "ours-dw-as-stored"
    return "ours"


def precision(flags):
    """The inputs' precision, then `-lean` (`--lean`) and `-rounded` (`--rounded`, rounded
    logits) where the run has them."""
    base = "bf16" if "--bf16" in flags else "tf32" if "--tf32" in flags else "f32"
    return base + ("-lean" if "--lean" in flags else "") + ("-rounded" if "--rounded" in flags else "")


def base_precision(prec):
    """The inputs' precision of ours' `prec` (without its modes): the peers' precision to
    compare with."""
    return prec.split("-")[0]


def precision_label(prec):
    """`prec` as the tables name it: TF32, f32 or bf16, then the modes."""
    label = "TF32" if prec.startswith("tf32") else base_precision(prec)
    label += ", lean" if "-lean" in prec else ""
    return label + (", rounded logits" if "-rounded" in prec else "")


def activation(flags):
    return "identity" if "--identity" in flags else "relu"


def ours_rows(profile_log):
    rows, head = [], None
    for line in open(profile_log):
        if line.startswith("=== "):
            words = header_words(line)
            flags = words[3:]
            head = {
                "B": words[0],
                "I": words[1],
                "C": words[2],
                "contender": contender(flags),
                "precision": precision(flags),
                "activation": activation(flags),
                "step_ms": "",
                "extra_mib": "",
            }
            # The LM terms have no column here (their table: lm_terms_table.py); such rows
            # are read from the log itself.
            if not any(f in flags for f in ("--z-loss", "--softcap", "--logit-scale")):
                rows.append(head)
        elif head is not None and line.startswith("memory:"):
            # Only the streamed path records its peak (0 on the small-C path, or "not
            # recorded" since 2026-12-06: left blank).
            peak = re.search(r"peak in use ([\d.]+) MiB", line)
            if peak and float(peak[1]) > 0:
                head["extra_mib"] = re.search(r"beyond inputs and gradients (-?[\d.]+) MiB", line)[1]
        elif head is not None and line.startswith("medians"):
            head["step_ms"] = re.search(r"step \(one sync\) ([\d.]+)", line)[1]
    return [r for r in rows if r["step_ms"]]


def write_csv(lease):
    out = csv.DictWriter(sys.stdout, COLUMNS, lineterminator="\n")
    out.writeheader()
    seen = set()
    for row in ours_rows(f"{lease}/profile.log"):
        # The first run of a configuration (the one with `--memory`, in the leases' order).
        key = tuple(row[k] for k in COLUMNS[:6])
        if key not in seen:
            seen.add(key)
            out.writerow(row)
    if os.path.exists(f"{lease}/peers.csv"):
        for row in csv.DictReader(open(f"{lease}/peers.csv")):
            out.writerow({k: row[k] for k in COLUMNS})


def best_peer(rows, shape, prec):
    """The fastest peer's row (any activation) at `shape` (B, I, C) in precision `prec`, or None."""
    peers = [r for r in rows if (r["B"], r["I"], r["C"], r["precision"]) == (*shape, prec)
             and not r["contender"].startswith("ours") and r["step_ms"]]
    return min(peers, key=lambda r: float(r["step_ms"]), default=None)


def table(path):
    rows = list(csv.DictReader(open(path)))
    keys = dict.fromkeys((r["B"], r["I"], r["C"], r["precision"]) for r in rows if r["contender"] == "ours")
    print("| B, I, C | precision | ours | best peer, same lease | ours / peer | ours' extra MiB |")
    print("|---|---|---:|---|---:|---:|")
    for b, i, c, precision in keys:
        same = [r for r in rows if (r["B"], r["I"], r["C"], r["precision"]) == (b, i, c, precision)]
        ours = next(r for r in same if r["contender"] == "ours")
        # The modes beside the peers of their inputs' precision (theirs have no such modes).
        best = best_peer(rows, (b, i, c), base_precision(precision))
        mine = float(ours["step_ms"])
        peer = (
            f"{best['contender']} ({best['activation']}) {float(best['step_ms']):.3f}"
            if best
            else "no peer row at this precision"
            if any(not r["contender"].startswith("ours") for r in rows if (r["B"], r["I"], r["C"]) == (b, i, c))
            else "peers not run at this shape in this lease"
        )
        ratio = f"{mine / float(best['step_ms']):.2f}" if best else "n/a"
        extra = ours["extra_mib"] or "not recorded (small-C path)"
        name = "TF32" if precision == "tf32" else precision
        print(f"| {b}, {i}, {c} | {name} ({ours['activation']}) | {mine:.3f} | {peer} | {ratio} | {extra} |")


def routes(path):
    rows = list(csv.DictReader(open(path)))
    # The configurations run on both routes (the small-C rows never stream).
    keys = dict.fromkeys(
        (r["B"], r["I"], r["C"], r["precision"], r["activation"])
        for r in rows
        if r["contender"] == "ours-host-ordered"
    )
    print("| B, I, C | precision | one timeline | host-ordered | one timeline, TF32 dW from X as stored |")
    print("|---|---|---:|---:|---:|")
    for key in keys:
        of = {r["contender"]: r["step_ms"] for r in rows if (r["B"], r["I"], r["C"], r["precision"], r["activation"]) == key}
        stored = of.get("ours-dw-as-stored") or "n/a (TF32 only)"
        b, i, c, precision, activation = key
        name = "TF32" if precision == "tf32" else precision
        print(f"| {b}, {i}, {c} | {name} ({activation}) | {of['ours']} | {of['ours-host-ordered']} | {stored} |")


def before(path):
    rows = list(csv.DictReader(open(path)))
    keys = dict.fromkeys((r["B"], r["I"], r["C"], r["precision"], r["activation"]) for r in rows)
    print("| B, I, C | precision | build of 423c3a5 | online softmax, one round trip per address | this build (both) | saved |")
    print("|---|---|---:|---:|---:|---:|")
    for key in keys:
        of = {r["contender"]: float(r["step_ms"]) for r in rows if (r["B"], r["I"], r["C"], r["precision"], r["activation"]) == key}
        b, i, c, precision, activation = key
        name = "TF32" if precision == "tf32" else precision
        old, mid, new = of["ours-423c3a5"], of["ours-per-buffer-fetch"], of["ours"]
        print(f"| {b}, {i}, {c} | {name} ({activation}) | {old:.2f} | {mid:.2f} | {new:.2f} | {old - new:.2f} |")


def readme(path):
    """The README's table: ours, then each peer with ReLU / without, from one lease's CSV."""
    rows = list(csv.DictReader(open(path)))
    of = {(r["B"], r["I"], r["C"], r["contender"], r["precision"], r["activation"]): r["step_ms"] for r in rows}
    shapes = dict.fromkeys((r["B"], r["I"], r["C"]) for r in rows if r["contender"] == "ours")
    print("| B, I, C | precision | ours | torch, ReLU / none | torch.compile, ReLU / none | Liger | CCE |")
    print("|---|---|---:|---:|---:|---:|---:|")

    def cell(key):
        v = of.get(key)
        return "not run" if not v else f"{float(v):.2f}" if float(v) < 10 else f"{float(v):.1f}"

    for b, i, c in shapes:
        first = True
        for precision in ("f32", "tf32", "bf16"):
            # bf16 with the identity (the peers' model) where it ran, else with ReLU.
            activation = "identity" if precision == "bf16" else "relu"
            if (b, i, c, "ours", precision, activation) not in of:
                activation = "relu"
            if (b, i, c, "ours", precision, activation) not in of:
                continue
            pair = lambda who: f"{cell((b, i, c, who, precision, 'relu'))} / {cell((b, i, c, who, precision, 'identity'))}"
            cce = "fails (1)" if precision != "bf16" else cell((b, i, c, "cce", precision, "identity"))
            name = "TF32" if precision == "tf32" else precision
            if precision == "bf16" and activation == "relu":
                name = "bf16 (ours with ReLU)"
            head = f"{b}, {i}, {c}" if first else ""
            first = False
            print(f"| {head} | {name} | {cell((b, i, c, 'ours', precision, activation))} | {pair('torch')} | {pair('torch-compile')} | {cell((b, i, c, 'liger', precision, 'identity'))} | {cce} |")


def log_runs(path):
    """(header words, figures) of every run of a profile log, in order: `step` (one sync),
    `back` (20 back to back), `extra` (memory), `wall`, `stream`, `after`, `rows` (traced),
    and `error`, the run's first line naming a panic or an error."""
    runs = []
    for line in open(path):
        if line.startswith("=== "):
            runs.append((header_words(line), {}))
        elif not runs:
            continue
        elif line.startswith("medians"):
            runs[-1][1]["step"] = float(re.search(r"step \(one sync\) ([\d.]+)", line)[1])
        elif line.startswith("step, 20"):
            runs[-1][1]["back"] = float(re.search(r"per sync: ([\d.]+)", line)[1])
        elif line.startswith("memory:"):
            extra = re.search(r"beyond inputs and gradients (-?[\d.]+) MiB", line)
            runs[-1][1]["extra"] = extra[1] if extra else "not recorded"
        elif line.startswith("timeline medians"):
            for key in ("wall", "stream", "after", "queueing", "wall less stream"):
                found = re.search(key + r" ([\d.]+)", line)
                if found:
                    runs[-1][1][key] = float(found[1])
        elif line.startswith("timeline stream by operation"):
            ops = dict((k, float(v)) for k, v in re.findall(r"(\w+) ([\d.]+)", line.split(":", 1)[1]))
            runs[-1][1]["rows"] = ops["rows"]
            runs[-1][1]["ops"] = ops
        elif re.search(r"panicked|rror", line) and "error" not in runs[-1][1]:
            runs[-1][1]["error"] = line.strip()
    return runs


def profile_runs(path):
    """(header words, {step, back, extra}) of each run of a profile log that timed steps."""
    return [r for r in log_runs(path) if "step" in r[1]]


# The lease CSV: issue 30's columns, then what else a run measured ("-" where its method
# does not measure it).
LEASE_COLUMNS = COLUMNS + ["options", "round", "method", "back_to_back_ms", "stream_ms", "rows_ms", "after_ms"]
# Flags that name the row's columns or the method, not an option.
NAMED = ("--bf16", "--tf32", "--identity", "--fusion", "--phases", "--timeline", "--memory")
VALUED = ("--chunk", "--z-loss", "--softcap", "--logit-scale", "--half-loads", "--dw-answer", "--host-waits")


def options(flags):
    """A run's other flags, without the step count (the bare number not after a valued flag)."""
    kept = [w for k, w in enumerate(flags) if w not in NAMED and (not w.isdigit() or (k > 0 and flags[k - 1] in VALUED))]
    return " ".join(kept) or "none"


def lease(profile_log, peers_csv=None):
    """One lease's CSV: every run of ours in the log (each round), then the peers' rows."""
    out = csv.DictWriter(sys.stdout, LEASE_COLUMNS, lineterminator="\n")
    out.writeheader()
    rounds = {}
    for words, run in log_runs(profile_log):
        flags = words[3:]
        method = "phases" if "--phases" in flags else "timeline" if "--timeline" in flags else "steps"
        row = {"B": words[0], "I": words[1], "C": words[2], "contender": contender(flags),
               "precision": precision(flags), "activation": activation(flags),
               "options": options(flags), "method": method}
        key = tuple(row.values())
        rounds[key] = rounds.get(key, 0) + 1
        step = run.get("wall" if method == "timeline" else "step")
        failed = "failed: " + run.get("error", "no result printed")
        fig = lambda name: f"{run[name]:.4f}" if name in run else "-"
        row.update({
            "round": rounds[key],
            "step_ms": f"{step:.4f}" if step is not None else failed,
            "extra_mib": run.get("extra", "not run"),
            "back_to_back_ms": fig("back"),
            "stream_ms": fig("stream"),
            "rows_ms": fig("rows"),
            "after_ms": fig("after"),
        })
        out.writerow(row)
    seen = {}
    for row in csv.DictReader(open(peers_csv)) if peers_csv else []:
        key = tuple(row[k] for k in COLUMNS[:6])
        seen[key] = seen.get(key, 0) + 1
        out.writerow({**row, "options": "none", "round": seen[key], "method": "peers_bench",
                      "back_to_back_ms": "-", "stream_ms": "-", "rows_ms": "-", "after_ms": "-"})


def value_after(words, flag):
    return words[words.index(flag) + 1] if flag in words else None


def chunk_rows(batch, classes, budget):
    """The crate's `chunk_rows` (src/cube/streamed/mod.rs) for a budget of elements."""
    fit = max(budget // classes, 1)
    rows = fit // 128 * 128 if fit >= 128 else fit
    return max(min(rows, batch), 1)


def chunks(path, rule="50331648,100663296"):
    small, large = (int(v) for v in rule.split(","))
    print("| B, I, C | precision | backend | chunk budget (elements) | rows per chunk (chunks) | step, one sync | 20 back to back | extra MiB |")
    print("|---|---|---|---|---|---:|---:|---:|")
    for words, run in profile_runs(path):
        if any(f in words for f in ("--z-loss", "--softcap", "--logit-scale")):
            continue
        b, i, c = (int(w) for w in words[:3])
        given = value_after(words, "--chunk")
        budget = int(given) if given else (large if c >= 65536 else small)
        rows = chunk_rows(b, c, budget)
        count = -(-b // rows)
        name = "bf16" if "--bf16" in words else "TF32" if "--tf32" in words else "f32"
        said = f"{budget} ({budget / 2**20:.1f} Mi)" + ("" if given else ", that build's rule")
        backend = "fusion" if "--fusion" in words else "raw"
        print(f"| {b}, {i}, {c} | {name} | {backend} | {said} | {rows} ({count}) | {run['step']:.2f} | {run['back']:.2f} | {run.get('extra', 'not recorded')} |")


def terms(path):
    runs = profile_runs(path)
    print("| backend | LM terms | step, one sync | 20 back to back | step / the same backend's plain step |")
    print("|---|---|---:|---:|---:|")
    valued = ("--z-loss", "--softcap", "--logit-scale")
    plain = {}
    for words, run in runs:
        fusion = "--fusion" in words
        if not any(f in words for f in valued) and "--chunk" not in words and "--bf16" in words and words[2] == "32000":
            plain[fusion] = run["step"]
    for words, run in runs:
        if not any(f in words for f in valued) or "--bf16" not in words:
            continue
        fusion = "--fusion" in words
        flags = " ".join(f"{f} {value_after(words, f)}" for f in valued if f in words)
        ratio = f"{run['step'] / plain[fusion]:.3f}" if fusion in plain else "n/a"
        name = "`Cuda<bf16>` (fusion)" if fusion else "raw `CubeBackend`"
        print(f"| {name} | {flags} | {run['step']:.2f} | {run['back']:.2f} | {ratio} |")
    for fusion, step in plain.items():
        print(f"| {'`Cuda<bf16>` (fusion)' if fusion else 'raw `CubeBackend`'} | none (plain) | {step:.2f} | | 1 |")


def terms_of(row):
    """The LM terms and the statistics of a row's options, as the tables name them."""
    terms = "all three" if any(f in row["options"] for f in ("--z-loss", "--softcap", "--logit-scale")) else "none"
    if "--token-stats" in row["options"]:
        terms = "stats" if terms == "none" else terms + ", stats"
    return terms


def timeline(path):
    """From a lease CSV: the traced runs, each beside the mean of the plain runs (no LM terms,
    no statistics) of its shape and precision: its round, wall, its ratio, the stream, the row kernel
    and the time after the stream (ms, medians of the run's steps)."""
    runs = [r for r in csv.DictReader(open(path)) if r["method"] == "timeline"]
    name = lambda r: precision_label(r["precision"]) + (", identity" if r["activation"] == "identity" else ", ReLU")
    key = lambda r: (r["B"], r["I"], r["C"], name(r))
    plain = {}
    for r in runs:
        if terms_of(r) == "none" and not r["step_ms"].startswith("failed"):
            plain.setdefault(key(r), []).append(float(r["step_ms"]))
    print("| B, I, C | precision | terms | round | wall, traced | / plain | stream | row kernel | after the stream |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        if r["step_ms"].startswith("failed"):
            print(f"| {r['B']}, {r['I']}, {r['C']} | {name(r)} | {terms_of(r)} | {r['round']} | {r['step_ms']} | | | | |")
            continue
        base = plain.get(key(r))
        ratio = "base" if terms_of(r) == "none" else "no plain run" if not base else f"{float(r['step_ms']) / (sum(base) / len(base)):.3f}"
        cells = " | ".join(f"{float(r[c]):.3f}" for c in ("step_ms", "stream_ms", "rows_ms", "after_ms"))
        print(f"| {r['B']}, {r['I']}, {r['C']} | {name(r)} | {terms_of(r)} | {r['round']} | {cells.replace(' | ', f' | {ratio} | ', 1)} |")


def phases_runs(rows, key):
    """Ours' `--phases` runs of a lease CSV's rows, grouped by `key(row)` in the order met."""
    groups = {}
    for r in rows:
        if r["method"] == "phases" and r["contender"] == "ours":
            groups.setdefault(key(r), []).append(r)
    return groups


def rounds(runs, column):
    """Every round's `column`, " / " between: the figure, or the failure as the CSV has it."""
    return " / ".join(v if v.startswith("failed") else f"{float(v):.3f}" for v in (r[column] for r in runs))


def small(path):
    """From a lease CSV: ours' `--phases` runs, one row per configuration with every round's
    step (one sync) and 20 back to back, beside the peers at the shape: PyTorch's f32 and TF32
    steps for f32 rows, every peer's bf16 step of the same activation for bf16 rows."""
    rows = list(csv.DictReader(open(path)))
    peers = [r for r in rows if r["method"] == "peers_bench"]
    configs = phases_runs(rows, lambda r: (r["B"], r["I"], r["C"], r["precision"], r["activation"], r["options"]))
    print("| B, I, C | precision | step, one sync | 20 back to back, per step | peer, same lease (synced median) |")
    print("|---|---|---:|---:|---|")
    for (b, i, c, prec, act, opts), runs in configs.items():
        label = prec + (", identity" if act == "identity" else "")
        if "--half-loads" in opts:
            label += ", loads " + opts.split("--half-loads ")[1].split()[0]
        one, back = rounds(runs, "step_ms"), rounds(runs, "back_to_back_ms")
        wanted = ("f32", "tf32") if prec == "f32" else (prec,)
        here = [p for p in peers if (p["B"], p["I"], p["C"]) == (b, i, c) and p["precision"] in wanted and p["activation"] == act]
        if prec == "f32":
            here = [p for p in here if p["contender"] == "torch"]
        cell = ", ".join(f"{PEER_NAMES.get(p['contender'], p['contender'])} {'fp32' if p['precision'] == 'f32' else p['precision']} {float(p['step_ms']):.3f}" for p in here)
        print(f"| {b}, {i}, {c} | {label} | {one} | {back} | {cell or 'not run'} |")


def memory(path):
    """From a lease CSV: ours' `--phases` runs with their memory, one row per configuration
    (every round's step with one sync, 20 back to back and extra MiB), beside every peer of the
    same shape and precision (the modes beside their inputs' precision), any activation, each
    peer's synced median and extra MiB."""
    rows = list(csv.DictReader(open(path)))
    peers = [r for r in rows if r["method"] == "peers_bench"]
    configs = phases_runs(rows, lambda r: (r["B"], r["I"], r["C"], r["precision"], r["activation"]))
    print("| B, I, C | precision | step, one sync | 20 back to back, per step | extra MiB | peers, same lease (activation: synced median ms, extra MiB) |")
    print("|---|---|---:|---:|---:|---|")
    for (b, i, c, prec, act), runs in configs.items():
        label = precision_label(prec)
        label += ", identity" if act == "identity" else ", ReLU"
        one, back = rounds(runs, "step_ms"), rounds(runs, "back_to_back_ms")
        extra = " / ".join(dict.fromkeys(r["extra_mib"] for r in runs))
        base = base_precision(prec)
        here = sorted(
            (p for p in peers if (p["B"], p["I"], p["C"], p["precision"]) == (b, i, c, base)),
            key=lambda p: float(p["step_ms"]),
        )
        cell = "; ".join(
            f"{PEER_NAMES.get(p['contender'], p['contender'])} ({'ReLU' if p['activation'] == 'relu' else 'identity'}): "
            f"{float(p['step_ms']):.3f}, {p['extra_mib']}"
            for p in here
        )
        print(f"| {b}, {i}, {c} | {label} | {one} | {back} | {extra} | {cell or 'not run'} |")


def builds(path, names="bin-profile-old=0d9c4b8 (before),bin-profile-vec=vector row kernel,bin-profile=both"):
    """Builds run side by side in one lease: each header starts with the binary that ran."""
    label = dict(kv.split("=", 1) for kv in names.split(","))
    runs = {}
    for line in open(path):
        if line.startswith("=== "):
            words = header_words(line)
            binary = words[0].rsplit("/", 1)[-1]
            # B I C and the flags, without the repeat count (the first bare number after C)
            # and the switches every run has.
            rest = words[4:]
            valued = ("--chunk", "--z-loss", "--softcap", "--logit-scale")
            count = next((k for k, w in enumerate(rest) if w.isdigit() and (k == 0 or rest[k - 1] not in valued)), None)
            rest = [w for k, w in enumerate(rest) if k != count and w not in ("--fusion", "--phases")]
            config = " ".join(words[1:4] + rest)
            current = runs.setdefault(config, {}).setdefault(binary, [])
        elif line.startswith("medians"):
            current.append(float(re.search(r"step \(one sync\) ([\d.]+)", line)[1]))
    order = list(label)
    print("| configuration (`Cuda`, fusion on) | " + " | ".join(label[b] for b in order) + " | last / first |")
    print("|---|" + "---:|" * (len(order) + 1))
    for config, of in runs.items():
        present = [b for b in order if of.get(b)]
        if not present:
            continue  # runs without steps timed (`--memory` alone)
        cells = [" / ".join(f"{v:.2f}" for v in of[b]) if of.get(b) else "not run" for b in order]
        first, last = min(of[present[0]]), min(of[present[-1]])
        print(f"| {config} | " + " | ".join(cells) + f" | {last / first:.3f} |")


# Issue 30's rows: (B, I, C, precision, activation of ours) and the issue's target (ms). bf16
# with the identity at C >= 1000 (the model of Liger and CCE), with ReLU at C = 10; f32 and
# TF32 with ReLU.
ISSUE_ROWS = [
    ("8192", "1024", "1000", "f32", "relu", 1.2),
    ("8192", "1024", "1000", "tf32", "relu", 0.45),
    ("8192", "1024", "1000", "bf16", "identity", 0.28),
    ("8192", "4096", "32000", "f32", "relu", 125.0),
    ("8192", "4096", "32000", "tf32", "relu", 18.0),
    ("8192", "4096", "32000", "bf16", "identity", 9.5),
    ("8192", "4096", "128256", "tf32", "relu", 80.0),
    ("8192", "4096", "128256", "bf16", "identity", 36.0),
    ("65536", "1024", "10", "bf16", "relu", 0.40),
]
# bf16's opt-in modes, shown under the bf16 rows at the same target.
MODES = ("bf16-rounded", "bf16-lean", "bf16-lean-rounded")


def issue_rows(path):
    """From a lease CSV: per row of issue 30 (and bf16's modes where the lease ran them), ours'
    `--phases` runs (every round), the best peer of the inputs' precision (either activation)
    with its extra MiB, and the target."""
    rows = list(csv.DictReader(open(path)))
    ours = [r for r in rows if r["contender"] == "ours" and r.get("method", "phases") == "phases" and r.get("options", "none") in ("none", "--rounded", "--lean", "--lean --rounded")]
    out = []
    for b, i, c, prec, act, target in ISSUE_ROWS:
        for p in (prec,) + (MODES if prec == "bf16" and c != "10" else ()):
            runs = [r for r in ours if (r["B"], r["I"], r["C"], r["precision"], r["activation"]) == (b, i, c, p, act)]
            if not runs and p != prec:
                continue
            best = best_peer(rows, (b, i, c), prec)
            out.append({"shape": (b, i, c), "precision": p, "activation": act, "target": target, "runs": runs, "best": best})
    return out


def step_of(runs):
    """The rounds' median synced steps, and their mean (None without a run)."""
    steps = [float(r["step_ms"]) for r in runs if not r["step_ms"].startswith("failed")]
    return steps, (sum(steps) / len(steps) if steps else None)


def issue(path):
    """Issue 30's table from one lease's CSV: every row, ours (each round, one sync) with its
    extra MiB, the best peer of the same lease with theirs, ours / peer on the rounds' mean,
    the target and whether the rounds' mean meets it."""
    print("| B, I, C | precision | ours, ms | ours' extra MiB | best peer, same lease (ms, extra MiB) | ours / peer | target | met |")
    print("|---|---|---:|---:|---|---:|---:|---|")
    for row in issue_rows(path):
        b, i, c = row["shape"]
        steps, mean = step_of(row["runs"])
        label = precision_label(row["precision"]) + (", identity" if row["activation"] == "identity" else ", ReLU")
        ours = " / ".join(f"{v:.3f}" for v in steps) or "not run"
        extra = " / ".join(dict.fromkeys(r["extra_mib"] for r in row["runs"])) or "-"
        best = row["best"]
        peer = (f"{PEER_NAMES.get(best['contender'], best['contender'])} ({'ReLU' if best['activation'] == 'relu' else 'identity'}) "
                f"{float(best['step_ms']):.3f}, {best['extra_mib']}") if best else "not run"
        ratio = f"{mean / float(best['step_ms']):.2f}" if best and mean else "n/a"
        met = "n/a" if mean is None else "yes" if mean <= row["target"] else "no"
        print(f"| {b}, {i}, {c} | {label} | {ours} | {extra} | {peer} | {ratio} | {row['target']:g} | {met} |")


def chart(path, out_svg):
    """Issue 30's rows from one lease's CSV as an SVG bar chart (no third-party package): per
    row, ours (the rounds' mean) and the best peer of the same lease, each as a fraction of the
    issue's target (1 = the target, the dashed line; shorter is faster)."""
    data = [r for r in issue_rows(path) if r["runs"]]
    width, left, bar, gap, scale = 900, 330, 11, 12, 280.0
    height = 60 + len(data) * (2 * bar + gap) + 40
    top = 50
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
           f'<text x="10" y="20" font-size="14">Issue 30\'s rows: step time / target (shorter is faster), {os.path.basename(path)}</text>',
           f'<rect x="{left}" y="30" width="12" height="10" fill="#1f77b4"/><text x="{left + 16}" y="39">ours</text>',
           f'<rect x="{left + 70}" y="30" width="12" height="10" fill="#aaaaaa"/><text x="{left + 86}" y="39">best peer, same lease</text>']
    limit = 2.0
    for k, row in enumerate(data):
        y = top + k * (2 * bar + gap)
        b, i, c = row["shape"]
        label = f"({b}, {i}, {c}) " + precision_label(row["precision"]) + (", identity" if row["activation"] == "identity" else ", ReLU")
        svg.append(f'<text x="{left - 6}" y="{y + bar + 4}" text-anchor="end">{label}</text>')
        _, mean = step_of(row["runs"])
        for j, (value, colour) in enumerate(((mean, "#1f77b4"), (float(row["best"]["step_ms"]) if row["best"] else None, "#aaaaaa"))):
            if value is None:
                continue
            frac = value / row["target"]
            w = min(frac, limit) * scale
            svg.append(f'<rect x="{left}" y="{y + j * bar}" width="{w:.1f}" height="{bar - 1}" fill="{colour}"/>')
            svg.append(f'<text x="{left + w + 4:.1f}" y="{y + j * bar + bar - 2}" font-size="10">{value:.3g} ms ({frac:.2f})</text>')
    x1 = left + scale
    svg.append(f'<line x1="{x1}" y1="{top - 4}" x2="{x1}" y2="{height - 30}" stroke="black" stroke-dasharray="4 3"/>')
    svg.append(f'<text x="{x1}" y="{height - 16}" text-anchor="middle">target</text>')
    svg.append("</svg>")
    open(out_svg, "w").write("\n".join(svg) + "\n")


def profile(path):
    """DESIGN.md's profile table from a lease's profile log: per traced run (`--timeline`), the
    untraced step of the same configuration's `--phases` runs (their mean, one sync), the
    traced wall, the stream, each kind of operation's GPU time, the wall less the stream
    ("outside") and the host's queueing, medians in ms."""
    runs = log_runs(path)
    key = lambda words: (tuple(words[:3]), precision(words[3:]), activation(words[3:]))
    untraced = {}
    for words, run in runs:
        # Plain runs: no option but the modes the precision names (`--lean`, `--rounded`).
        if "--phases" in words and "step" in run and set(options(words[3:]).split()) <= {"none", "--lean", "--rounded"}:
            untraced.setdefault(key(words), []).append(run["step"])
    ops = ("logits", "dX", "dW", "db", "rows", "transpose")
    print("| B, I, C, precision | step, untraced | wall, traced | stream | logits | dX | dW | db | row kernel | TF32 copy of X | outside | queueing (host) |")
    print("|---|" + "---:|" * 11)
    for words, run in runs:
        if "--timeline" not in words or "ops" not in run:
            continue
        steps = untraced.get(key(words))
        step = f"{sum(steps) / len(steps):.2f}" if steps else "-"
        cell = lambda k: f"{run['ops'][k]:.2f}" if k in run["ops"] else "-"
        label = f"{', '.join(words[:3])}, {precision_label(precision(words[3:]))}"
        print(f"| {label} | {step} | {run['wall']:.2f} | {run['stream']:.2f} | "
              + " | ".join(cell(k) for k in ops)
              + f" | {run['wall less stream']:.2f} | {run['queueing']:.2f} |")

def compare(earlier, later):
    """Two leases' CSVs side by side (the module's doc, `compare`)."""
    def steps(path):
        out = {}
        for r in csv.DictReader(open(path)):
            ours = r["contender"] == "ours" and r["method"] == "phases" and r["round"] == "1"
            if (ours or r["method"] == "peers_bench") and r["step_ms"] and not r["step_ms"].startswith("failed"):
                key = (r["B"], r["I"], r["C"], r["contender"], r["precision"], r["activation"], r["options"])
                out.setdefault(key, float(r["step_ms"]))
        return out
    a, b = steps(earlier), steps(later)
    print("| B, I, C | contender | precision | activation | options | earlier | later | later / earlier |")
    print("|---|---|---|---|---|---:|---:|---:|")
    ratios = {}
    for key in (k for k in b if k in a):
        ratio = b[key] / a[key]
        group = ("ours" if key[3] == "ours" else "peers", int(key[2]) >= 32000)
        ratios.setdefault(group, []).append(ratio)
        print(f"| {', '.join(key[:3])} | {key[3]} | {key[4]} | {key[5]} | {key[6]} | {a[key]:.3f} | {b[key]:.3f} | {ratio:.3f} |")
    for (who, large), rs in sorted(ratios.items()):
        print(f"{who}, C {'>=' if large else '<'} 32000: {len(rs)} rows, later / earlier {min(rs):.3f}"
              f" to {max(rs):.3f}, median {statistics.median(rs):.3f}")
    peers = [r for (who, _), rs in ratios.items() if who == "peers" for r in rs]
    if peers:
        print(f"peers, every shape: {len(peers)} rows, median {statistics.median(peers):.3f}")


def answers(*paths):
    """The TF32 step per dW answer (`profile --dw-answer K`; `default` where no answer was
    forced), each lease's rounds in order: one row per lease, C and answer."""
    print("| lease CSV | C | dW's answer | step, one sync (ms), each round |")
    print("|---|---|---|---|")
    for path in paths:
        steps = {}
        for r in csv.DictReader(open(path)):
            if r["contender"] == "ours" and r["precision"] == "tf32" and r["method"] == "phases":
                answer = value_after(r["options"].split(), "--dw-answer") or "default"
                steps.setdefault((int(r["C"]), answer), []).append(r["step_ms"])
        for (c, answer), figures in sorted(steps.items(), key=lambda kv: (-kv[0][0], kv[0][1])):
            print(f"| {path.split('/')[-1]} | {c} | {answer} | {', '.join(f'{float(f):.2f}' for f in figures)} |")


def waits(path, before_k="3"):
    """Steps per `--host-waits K` (the module's doc, `waits`)."""
    steps, order = {}, []
    for r in csv.DictReader(open(path)):
        k = value_after(r["options"].split(), "--host-waits")
        if r["contender"] != "ours" or r["method"] != "phases" or k is None:
            continue
        key = (int(r["B"]), int(r["I"]), int(r["C"]), precision_label(r["precision"]))
        if key not in order:
            order.append(key)
        steps.setdefault(key, {}).setdefault(int(k), []).append(float(r["step_ms"]))
    ks = sorted({k for per in steps.values() for k in per})
    print("| B, I, C | precision | " + " | ".join(f"K = {k}" for k in ks) + f" | K = 0 / K = {before_k} |")
    print("|---|---|" + "---|" * len(ks) + "---:|")
    mean = statistics.mean
    for key in order:
        per = steps[key]
        cells = [", ".join(f"{v:.3f}" for v in per[k]) if k in per else "not run" for k in ks]
        before = per.get(int(before_k))
        ratio = f"{mean(per[0]) / mean(before):.3f}" if 0 in per and before else "-"
        print(f"| {key[0]}, {key[1]}, {key[2]} | {key[3]} | " + " | ".join(cells) + f" | {ratio} |")


def sweep(path):
    """`gemm_sweep`'s log: per product and chunk, the heuristic's first answer and the fastest
    (ms alone, tile as `cublasLtMatmulTile_t`), and how many answers it gave."""
    print("| chunk rows, C | product | answers | answer 0: ms (tile) | fastest: answer, ms (tile) |")
    print("|---|---|---:|---:|---:|")
    shape, products = None, {}
    pattern = r"(.+) answer (\d+): config \[(\d+), (\d+),.*\] workspace \d+ waves [\d.]+ ms ([\d.]+)"
    def flush():
        for name, rows in products.items():
            first, best = rows[0], min(rows, key=lambda r: r[2])
            print(f"| {shape} | {name} | {len(rows)} | {first[2]:.2f} ({first[1]}) | {best[0]}, {best[2]:.2f} ({best[1]}) |")
    for line in open(path):
        if line.startswith("survey"):
            flush()
            words = line.split()
            shape, products = f"{words[2]}, {words[6]}", {}
        found = re.match(pattern, line)
        if found:
            products.setdefault(found[1], []).append((int(found[2]), int(found[4]), float(found[5])))
    flush()


if __name__ == "__main__":
    modes = {"csv": write_csv, "table": table, "routes": routes, "before": before, "chunks": chunks, "terms": terms, "timeline": timeline, "small": small, "memory": memory, "lease": lease, "readme": readme, "builds": builds, "issue": issue, "chart": chart, "profile": profile, "compare": compare, "answers": answers, "sweep": sweep, "waits": waits}
    if len(sys.argv) < 2 or sys.argv[1] not in modes:
        # The module's docstring opens with one usage line per mode.
        usage = [line.strip() for line in __doc__.splitlines() if line.strip().startswith("python3 ")]
        print("usage:\n  " + "\n  ".join(usage), file=sys.stderr)
        sys.exit(2)
    modes[sys.argv[1]](*sys.argv[2:])
