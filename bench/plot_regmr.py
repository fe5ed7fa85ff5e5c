#!/usr/bin/python3
"""Plots regmr_bench's table: region size against time per key, log-log, one line per method.

    build/release/bench/regmr_bench --device=<spec> \\
        --benchmark_out=regmr.json --benchmark_out_format=json
    /usr/bin/python3 bench/plot_regmr.py regmr.json [-o docs/regmr_bench.png] [--title ...]

Reads the Google Benchmark JSON regmr_bench writes (each run named <method>/bytes:<n>, with a
"bytes" counter and its mean time per key in real_time) and draws every method it finds:
regcache miss, regcache hit (client cache), regcache hit over the ring (client cache off), and
the anchor, ibv_reg_mr + ibv_dereg_mr (absent on the sim); and the batch cases (runs with a
"keys" counter: the time of K keys, drawn per key, one line per K), with their anchor. The device in the title comes from
the JSON's context (regmr_device, regmr_ibv_device) unless --title says otherwise.

Needs matplotlib (Debian: apt-get install python3-matplotlib); says so and exits 2 without it.
"""

import argparse
import json
import re
import sys

# Method (the run name's first part) -> legend label, line style. Drawn in this order.
METHODS = [
    ("ibv_reg_mr", "ibv_reg_mr + ibv_dereg_mr (anchor)", dict(color="black", marker="s")),
    ("miss", "regcache miss (register + release)", dict(color="tab:red", marker="o")),
    ("hit_ring", "regcache hit, ring (client cache off)", dict(color="tab:orange", marker="^")),
    ("hit_client_cache", "regcache hit, client cache", dict(color="tab:blue", marker="D")),
    # The batch cases (name batch/keys:K/...), per key: K keys of a size at once.
    ("ibv_reg_mr_batch64", "64 x ibv_reg_mr, then 64 x ibv_dereg_mr (anchor)",
     dict(color="silver", marker="s", linestyle=":")),
    ("ibv_reg_mr_batch1024", "1024 x ibv_reg_mr, then 1024 x ibv_dereg_mr (anchor)",
     dict(color="gray", marker="s", linestyle="--")),
    ("batch64", "regcache RegisterBatch + ReleaseBatch, 64 keys",
     dict(color="tab:purple", marker="v", linestyle="--")),
    ("batch1024", "regcache RegisterBatch + ReleaseBatch, 1024 keys",
     dict(color="tab:green", marker="v", linestyle="--")),
]

TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def load(path):
    """{method: {bytes: mean ns per key}} from the JSON (repetitions averaged), and its context."""
    with open(path) as f:
        doc = json.load(f)
    sums = {}
    for run in doc.get("benchmarks", []):
        if run.get("run_type", "iteration") != "iteration" or run.get("error_occurred"):
            continue
        name = run["name"]
        method = name.split("/", 1)[0]
        size = run.get("bytes")
        if size is None:
            m = re.search(r"/bytes:(\d+)", name)
            if m is None:
                continue
            size = m.group(1)
        ns = float(run["real_time"]) * TO_NS[run.get("time_unit", "ns")]
        keys = run.get("keys")
        if keys:  # a batch case: the time is the batch's; per key, one line per batch size
            ns /= float(keys)
            method += str(int(keys))
        total, count = sums.setdefault(method, {}).get(int(size), (0.0, 0))
        sums[method][int(size)] = (total + ns, count + 1)
    table = {
        method: {size: total / count for size, (total, count) in by_size.items()}
        for method, by_size in sums.items()
    }
    return table, doc.get("context", {})


def size_label(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def time_label(ns, _pos=None):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:g} {unit}"
    return f"{ns:g} ns"


def annotate_ratios(ax, table):
    """Writes anchor / method next to each regcache point (how many times faster), if any."""
    pairs = (("miss", "ibv_reg_mr", -11), ("hit_client_cache", "ibv_reg_mr", 5),
             ("batch1024", "ibv_reg_mr_batch1024", -11))  # below / above the line
    for method, anchor_method, dy in pairs:
        anchor = table.get(anchor_method, {})
        for size, ns in table.get(method, {}).items():
            if size in anchor and ns > 0:
                ratio = anchor[size] / ns
                ax.annotate(
                    f"{ratio:,.0f}×" if ratio >= 10 else f"{ratio:.1f}×",
                    (size, ns),
                    textcoords="offset points",
                    xytext=(4, dy),
                    fontsize=7,
                )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("json", help="regmr_bench --benchmark_out=<file> --benchmark_out_format=json")
    ap.add_argument("-o", "--output", default="docs/regmr_bench.png", help="PNG to write")
    ap.add_argument("--title", help="plot title (default: from the JSON's device)")
    args = ap.parse_args()

    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print(
            "plot_regmr.py: needs matplotlib: apt-get install python3-matplotlib "
            "(and run it with /usr/bin/python3)",
            file=sys.stderr,
        )
        sys.exit(2)
    sys.exit(plot(args, plt, FuncFormatter))


def plot(args, plt, FuncFormatter):
    table, context = load(args.json)
    if not table:
        print(f"plot_regmr.py: no regmr_bench runs in {args.json}", file=sys.stderr)
        return 1
    device = context.get("regmr_device", "?")
    ibv = context.get("regmr_ibv_device")
    title = args.title or (
        f"regcache vs ibv_reg_mr on {device}" + (f" ({ibv})" if ibv else "")
        if "ibv_reg_mr" in table
        else f"regcache on {device} (no ibv_reg_mr side on this device)"
    )

    fig, ax = plt.subplots(figsize=(7.5, 5), dpi=120)
    sizes = set()
    for method, label, style in METHODS:
        points = sorted(table.get(method, {}).items())
        if not points:
            continue
        xs, ys = zip(*points)
        sizes.update(xs)
        ax.plot(xs, ys, label=label, linewidth=1.6, markersize=5, **style)
    for method in sorted(set(table) - {m for m, _, _ in METHODS}):  # anything new, plainly
        xs, ys = zip(*sorted(table[method].items()))
        sizes.update(xs)
        ax.plot(xs, ys, label=method, marker="x")
    annotate_ratios(ax, table)
    ax.set_xscale("log", base=2)
    ax.margins(x=0.1)  # room for the last size's ratio
    ax.set_yscale("log")
    ax.set_xticks(sorted(sizes))
    ax.set_xticklabels([size_label(s) for s in sorted(sizes)])
    ax.yaxis.set_major_formatter(FuncFormatter(time_label))
    ax.set_xlabel("region size")
    ax.set_ylabel("time per key (register + release / dereg)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.4)
    ax.grid(True, which="minor", alpha=0.15)
    legend_title = "numbers: ibv_reg_mr time / regcache time" if "ibv_reg_mr" in table else None
    ax.legend(loc="upper left", fontsize=8, title=legend_title, title_fontsize=7)
    fig.tight_layout()
    fig.savefig(args.output)
    print(f"plot_regmr.py: wrote {args.output}")
    return 0


if __name__ == "__main__":
    main()
