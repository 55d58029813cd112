#!/usr/bin/env python3
"""Replays traces with departures through every policy and checks tessera against the others.

For each trace and load, runs `tessera sim --replay --json` for every policy and seed (in
parallel), takes the mean over seeds of what users feel (GPU allocation while some GPU pod waits,
the longest, p99 and mean wait), and checks the goals of docs/placement.md ("With departures"):
tessera's allocation while pods wait at least the best other policy's - 0.5 points, its longest
wait at most 1.2 x the best other's, its p99 wait at most the best other's, each against the best
other policy on that measure (these count as missed goals), and all three against the one policy
best on allocation while pods wait (printed, not counted). With --starving-factor F, the policies
whose longest wait is over F times the shortest among the others are named and left out of "the
best other" (they starve their big pods, which keeps their p99 short). Prints a Markdown
table per trace and load, the pass/fail per goal, and (--protocol) tessera against FGD on the FGD
paper's protocol (mean allocation at 100 % arrived) on the same traces.

Traces: `default` (the openb default list), the names of tools/openb_variants.py (written into
--variants-dir with --variant-seed), or paths to pod lists (upstream's variant files, for one).

With --svg DIR, also draws the pods waiting over time (mean over seeds, one line per policy) per
trace and load, as replay-waiting-TRACE-LOAD.svg; --from-json reads the runs a --json wrote
instead of running them again, and --rerun P,... runs those policies again over it (the others'
runs from the file, tessera's from the build at hand: the loop of changing tessera).

usage: tools/placement_replay_eval.py [--traces "default gpushare40 ..."] [--loads 1.0,1.2]
           [--seeds 1-5] [--policies all] [--jobs 2] [--queue kube-scheduler|fcfs]
           [--variant-seed 2023] [--variants-dir DIR] [--json OUT] [--protocol] [--svg DIR]
           [--from-json FILE [--rerun tessera]] [--starving-factor F]
Needs build/bin/tessera; the trace is data/openb ($TESSERA_OPENB_DIR for another copy).
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
POLICIES = ["tessera", "fgd", "bestfit", "packing", "clustering", "dotprod", "binpack", "spread",
            "random"]
# (metric, better, the goal for tessera against the best other policy's mean)
GOALS = [
    ("allocation_while_waiting", max, lambda ours, best: ours >= best - 0.5,
     "allocation while pods wait >= best - 0.5"),
    ("wait_s_max", min, lambda ours, best: ours <= 1.2 * best, "longest wait <= 1.2 x best"),
    ("wait_s_p99", min, lambda ours, best: ours <= best, "p99 wait <= best"),
]


def die(message):
    sys.stderr.write("placement_replay_eval: %s\n" % message)
    sys.exit(2)


def seeds_of(text):
    if "-" in text:
        a, b = text.split("-", 1)
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def run(args):
    tessera, nodes, pods, policy, seed, load, queue, reservations = args
    cmd = [tessera, "sim", "--replay", "--json", "--nodes", nodes, "--pods", pods, "--policy",
           policy, "--seed", str(seed), "--load", str(load), "--queue", queue]
    if reservations:
        cmd += ["--reservations", reservations]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), out.stderr.strip()))
    r = json.loads(out.stdout.splitlines()[0])
    return {k: r[k] for k in ("policy", "seed", "allocation_while_waiting", "wait_s_max",
                              "wait_s_p99", "wait_s_mean", "allocation_mean", "waited", "pods",
                              "seconds")} | {"waiting_pods": r["waiting_pods"]}


COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
          "#bcbd22"]


def waiting_svg(title, curves, path):
    """A line chart of pods waiting against the timeline's index (0..100), one line per policy,
    on a log scale (a few big pods waiting for hours and thousands of pods at the peak)."""
    import math
    w, h, left, right, top, bottom = 720, 400, 60, 150, 30, 50
    decades = max(1, math.ceil(math.log10(max([max(c) for c in curves.values()] + [1]) + 1)))
    def x(i, n):
        return left + (w - left - right) * i / max(1, n - 1)
    def y(v):
        return top + (h - top - bottom) * (1 - math.log10(1 + max(0, v)) / decades)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="18" font-size="14">%s</text>' % (left, title)]
    for v in [0] + [10 ** k for k in range(decades + 1)]:
        if v > 10 ** decades:
            continue
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>' % (
            left, w - right, y(v), y(v)))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>' % (left - 6, y(v) + 4, v))
    for k in range(0, 101, 20):
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>' % (
            x(k, 101), h - bottom + 16, k))
    out.append('<text x="%d" y="%d" text-anchor="middle">time (%% of the way from a busy cluster '
               'to the last arrival)</text>' % ((left + w - right) / 2, h - 12))
    out.append('<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">pods '
               'waiting</text>' % ((top + h - bottom) / 2, (top + h - bottom) / 2))
    for n, (policy, c) in enumerate(curves.items()):
        color = COLORS[n % len(COLORS)]
        points = " ".join("%.1f,%.1f" % (x(i, len(c)), y(v)) for i, v in enumerate(c))
        width = 2.5 if policy == "tessera" else 1.2
        out.append('<polyline fill="none" stroke="%s" stroke-width="%s" points="%s"/>' % (
            color, width, points))
        out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (w - right + 8, top + 16 * n + 10,
                                                               color, policy))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def protocol(tessera, nodes, pods, seeds):
    cmd = [tessera, "sim", "--json", "--nodes", nodes, "--pods", pods, "--policy", "tessera,fgd",
           "--seeds", seeds]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(cmd), out.stderr.strip()))
    runs = {}
    for line in out.stdout.splitlines():
        r = json.loads(line)
        runs.setdefault(r["policy"], []).append(r["allocation_ratio"]["100"])
    return {p: sum(v) / len(v) for p, v in runs.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", default="default")
    ap.add_argument("--loads", default="1.0,1.2")
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--policies", default="all")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--queue", default="kube-scheduler")
    ap.add_argument("--reservations", default="", help="on or off (default: the sim's, on)")
    ap.add_argument("--variant-seed", type=int, default=2023)
    ap.add_argument("--variants-dir", default=os.path.join(REPO, "build", "openb-variants"))
    ap.add_argument("--json", default="", help="also write every run's summary here")
    ap.add_argument("--svg", default="", help="draw pods waiting over time into this directory")
    ap.add_argument("--from-json", default="", help="read the runs a --json wrote")
    ap.add_argument("--rerun", default="",
                    help="with --from-json: run these policies again (comma-separated) in place "
                    "of the file's runs of them")
    ap.add_argument("--starving-factor", type=float, default=0,
                    help="leave out of the best other the policies whose longest wait is over F "
                    "x the shortest longest wait among the others (0: leave none out)")
    ap.add_argument("--protocol", action="store_true",
                    help="also tessera against fgd on the FGD protocol (seeds 42-51)")
    args = ap.parse_args()
    tessera = os.environ.get("TESSERA", os.path.join(REPO, "build", "bin", "tessera"))
    data = os.environ.get("TESSERA_OPENB_DIR", os.path.join(REPO, "data", "openb"))
    nodes = os.path.join(data, "openb_node_list_gpu_node.csv")
    if not os.access(tessera, os.X_OK):
        die("%s is missing; build first" % tessera)
    policies = POLICIES if args.policies == "all" else args.policies.split(",")
    if "tessera" not in policies:
        die("--policies must include tessera")
    seeds = seeds_of(args.seeds)
    loads = [float(x) for x in args.loads.split(",")]
    traces = {}
    names = []
    for t in args.traces.split():
        if t == "default":
            traces[t] = os.path.join(data, "openb_pod_list_default.csv")
        elif os.path.exists(t):
            traces[os.path.basename(t)] = t
            t = os.path.basename(t)
        else:
            names.append(t)
            traces[t] = os.path.join(args.variants_dir, "openb_pod_list_%s.csv" % t)
    if names:
        subprocess.run([sys.executable, os.path.join(HERE, "openb_variants.py"), "--data", data,
                        "--out", args.variants_dir, "--seed", str(args.variant_seed)] + names,
                       check=True, stdout=subprocess.DEVNULL)
    results = {}
    rerun = [p for p in args.rerun.split(",") if p]
    if rerun and not args.from_json:
        die("--rerun needs --from-json")
    if args.from_json:
        with open(args.from_json) as f:
            for entry in json.load(f):
                if not rerun or (entry["trace"] in traces and entry["load"] in loads):
                    results[(entry["trace"], entry["load"])] = entry["runs"]
        if rerun:
            # What runs again must line up with the file: its traces, loads and seeds.
            missing = [(t, l) for t in traces for l in loads if (t, l) not in results]
            if missing:
                die("%s has no runs of %s" % (args.from_json, ", ".join(
                    "%s at load %g" % m for m in missing)))
            for (t, l), runs in results.items():
                for p, rs in runs.items():
                    if p not in rerun and sorted(r["seed"] for r in rs) != seeds:
                        die("%s's %s runs of %s at load %g are of seeds %s, not --seeds %s" % (
                            args.from_json, p, t, l, sorted(r["seed"] for r in rs), args.seeds))
        policies = [p for p in policies if p in rerun or all(p in r for r in results.values())]
        for r in results.values():
            for p in rerun:
                r.pop(p, None)
    if not args.from_json or rerun:
        jobs = [(tessera, nodes, pods, p, s, load, args.queue, args.reservations)
                for name, pods in traces.items() for load in loads
                for p in (rerun or policies) for s in seeds]
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for job, r in zip(jobs, pool.map(run, jobs)):
                name = [n for n, p in traces.items() if p == job[2]][0]
                results.setdefault((name, job[5]), {}).setdefault(r["policy"], []).append(r)
    failures = 0
    summary = []
    for (name, load), by_policy in results.items():
        means = {p: {m: sum(r[m] for r in runs) / len(runs)
                     for m in ("allocation_while_waiting", "wait_s_max", "wait_s_p99",
                               "wait_s_mean")}
                 for p, runs in by_policy.items()}
        print("\n%s, load %g, %s queue, seeds %s" % (name, load, args.queue, args.seeds))
        print("| policy | allocation while pods wait | longest wait | p99 wait | mean wait |")
        print("|---|---:|---:|---:|---:|")
        for p in policies:
            m = means[p]
            print("| %s | %.2f %% | %.0f s | %.0f s | %.1f s |" % (
                p, m["allocation_while_waiting"], m["wait_s_max"], m["wait_s_p99"],
                m["wait_s_mean"]))
        verdicts = []
        # Policies that starve pods (their longest wait far above the others') have short p99
        # waits because they never serve their big pods; --starving-factor leaves them out.
        rivals = {p: m for p, m in means.items() if p != "tessera"}
        if not rivals:
            summary.append({"trace": name, "load": load, "means": means, "verdicts": [],
                            "runs": by_policy})
            continue
        if args.starving_factor > 0:
            shortest = min(m["wait_s_max"] for m in rivals.values())
            starving = sorted(p for p, m in rivals.items()
                              if m["wait_s_max"] > args.starving_factor * shortest)
            if starving:
                verdicts.append("left out as starving (longest wait over %g x %.0f s): %s" % (
                    args.starving_factor, shortest, ", ".join(starving)))
            rivals = {p: m for p, m in rivals.items() if p not in starving}
        for metric, better, goal, text in GOALS:
            others = {p: m[metric] for p, m in rivals.items()}
            best_policy = better(others, key=others.get)
            ok = goal(means["tessera"][metric], others[best_policy])
            failures += 0 if ok else 1
            verdicts.append("%s: %s (tessera %.1f, best other %s %.1f)" % (
                text, "PASS" if ok else "FAIL", means["tessera"][metric], best_policy,
                others[best_policy]))
        # The same goals against one policy: the best other on allocation while pods wait.
        others = {p: m["allocation_while_waiting"] for p, m in rivals.items()}
        lead = max(others, key=others.get)
        verdicts.append("against %s alone (the best other on allocation while pods wait): %s" % (
            lead, ", ".join("%s %s" % (metric, "PASS" if goal(means["tessera"][metric],
                                                                means[lead][metric]) else "FAIL")
                            for metric, _, goal, _ in GOALS)))
        for v in verdicts:
            print("  " + v)
        summary.append({"trace": name, "load": load, "means": means, "verdicts": verdicts,
                        "runs": by_policy})
        if args.svg:
            os.makedirs(args.svg, exist_ok=True)
            curves = {}
            for p in policies:
                runs = by_policy[p]
                points = len(runs[0]["waiting_pods"])
                curves[p] = [sum(r["waiting_pods"][str(i)] for r in runs) / len(runs)
                             for i in range(points)]
            waiting_svg("Pods waiting, %s, load %g (mean over %d seeds)" % (
                name, load, len(by_policy["tessera"])), curves,
                os.path.join(args.svg, "replay-waiting-%s-%g.svg" % (name, load)))
    if args.protocol:
        print("\nFGD protocol, mean allocation at 100 % arrived, seeds 42-51")
        print("| trace | tessera | fgd | difference |")
        print("|---|---:|---:|---:|")
        for name, pods in traces.items():
            m = protocol(tessera, nodes, pods, "42-51")
            print("| %s | %.2f | %.2f | %+.2f |" % (name, m["tessera"], m["fgd"],
                                                   m["tessera"] - m["fgd"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f)
    print("\n%d goal(s) missed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
