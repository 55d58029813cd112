#!/usr/bin/env python3
"""Generates variants of the openb default pod list by resampling, for `tessera sim`.

Each variant keeps the default trace's pods (shapes, CPU, memory) and changes one property of
the mix, as the FGD paper's trace variants do (Weng et al., ATC'23, section 6):

  gpushareNN  NN % of the GPU demand comes from sharing (fractional single-GPU) pods
  multigpuNN  NN % of the GPU demand comes from multi-GPU pods
  cpuNNN      CPU-only pods are NNN/10 % of the pods (050 -> 5 %, 250 -> 25 %)
  gpuspecNN   NN % of the GPU pods allow only some GPU models (one model, or two, drawn in
              proportion to the cluster's GPUs of each model)

Pods are drawn with replacement from the matching classes of the default list with a fixed seed,
so a variant is the same file on every run. The output holds the trace's columns that `tessera
sim` reads (name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec). The trace's terms allow
research and study use; the variants are derived data, so write them outside the repository
(the default is build/openb-variants).

usage: tools/openb_variants.py [--data DIR] [--out DIR] [--seed S] [--pods N] [NAME ...]
       NAME defaults to every variant listed by --list.
"""

import argparse
import csv
import os
import random
import sys

VARIANTS = {
    "gpushare40": ("gpushare", 0.40),
    "gpushare60": ("gpushare", 0.60),
    "gpushare80": ("gpushare", 0.80),
    "gpushare100": ("gpushare", 1.00),
    "multigpu20": ("multigpu", 0.20),
    "multigpu50": ("multigpu", 0.50),
    "cpu050": ("cpu", 0.05),
    "cpu100": ("cpu", 0.10),
    "cpu200": ("cpu", 0.20),
    "cpu250": ("cpu", 0.25),
    "gpuspec10": ("gpuspec", 0.10),
    "gpuspec25": ("gpuspec", 0.25),
    "gpuspec33": ("gpuspec", 0.33),
}

COLUMNS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"]


def die(message):
    sys.stderr.write("openb_variants: %s\n" % message)
    sys.exit(2)


def gpu_milli(pod):
    return int(pod["num_gpu"]) * int(pod["gpu_milli"])


def kind(pod):
    n, m = int(pod["num_gpu"]), int(pod["gpu_milli"])
    if n == 0:
        return "cpu"
    if n == 1 and m < 1000:
        return "share"
    if n == 1:
        return "whole"
    return "multi"


def load(path, columns):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        die("%s: %s" % (path, e.strerror))
    for col in columns:
        if rows and col not in rows[0]:
            die("%s: no column %r" % (path, col))
    return rows


def draw_by_demand(rng, classes, targets, count):
    """Draws `count` GPU pods so that class c supplies targets[c] of the GPU demand.

    Each draw picks the class whose share of the demand drawn so far lags its target most,
    then a uniformly random pod of that class.
    """
    drawn, demand = [], {c: 0 for c in targets}
    for _ in range(count):
        total = sum(demand.values()) or 1
        c = max(targets, key=lambda k: targets[k] - demand[k] / total)
        pod = rng.choice(classes[c])
        drawn.append(pod)
        demand[c] += gpu_milli(pod)
    return drawn


def make(name, pods, nodes, rng, count):
    family, value = VARIANTS[name]
    classes = {"cpu": [], "share": [], "whole": [], "multi": []}
    for p in pods:
        classes[kind(p)].append(p)
    cpu_fraction = len(classes["cpu"]) / len(pods)
    if family == "cpu":
        cpu_fraction = value
    n_cpu = round(count * cpu_fraction)
    n_gpu = count - n_cpu
    out = [rng.choice(classes["cpu"]) for _ in range(n_cpu)]
    if family in ("gpushare", "multigpu"):
        key = "share" if family == "gpushare" else "multi"
        rest = [c for c in ("share", "whole", "multi") if c != key and classes[c]]
        rest_demand = {c: sum(gpu_milli(p) for p in classes[c]) for c in rest}
        rest_total = sum(rest_demand.values())
        targets = {key: value}
        for c in rest:
            targets[c] = (1 - value) * rest_demand[c] / rest_total
        targets = {c: t for c, t in targets.items() if t > 0}
        out += draw_by_demand(rng, classes, targets, n_gpu)
    else:
        gpu_pods = classes["share"] + classes["whole"] + classes["multi"]
        out += [rng.choice(gpu_pods) for _ in range(n_gpu)]
    out = [dict(p) for p in out]
    if family == "gpuspec":
        gpus_by_model = {}
        for n in nodes:
            gpus_by_model[n["model"]] = gpus_by_model.get(n["model"], 0) + int(n["gpu"])
        models = sorted(m for m in gpus_by_model if m)
        weights = [gpus_by_model[m] for m in models]
        for p in out:
            if int(p["num_gpu"]) > 0 and rng.random() < value:
                first = rng.choices(models, weights)[0]
                spec = {first}
                if rng.random() < 0.5:
                    spec.add(rng.choices(models, weights)[0])
                p["gpu_spec"] = "|".join(sorted(spec))
    rng.shuffle(out)
    for i, p in enumerate(out):
        p["name"] = "%s-pod-%05d" % (name, i)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(here)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("TESSERA_OPENB_DIR",
                                                     os.path.join(repo, "data", "openb")),
                    help="directory of the openb trace (default $TESSERA_OPENB_DIR, else data/openb)")
    ap.add_argument("--out", default=os.path.join(repo, "build", "openb-variants"),
                    help="output directory (default build/openb-variants)")
    ap.add_argument("--seed", type=int, default=2023, help="resampling seed (default 2023)")
    ap.add_argument("--pods", type=int, default=0,
                    help="pods per variant (default: as many as the default list)")
    ap.add_argument("--list", action="store_true", help="list the variants and exit")
    ap.add_argument("names", nargs="*", help="variants to write (default: all)")
    args = ap.parse_args()
    if args.list:
        print("\n".join(VARIANTS))
        return
    for n in args.names:
        if n not in VARIANTS:
            die("variant %r: unknown; expected one of %s" % (n, ", ".join(VARIANTS)))
    if args.pods < 0:
        die("--pods %d: expected a positive count" % args.pods)
    pods = load(os.path.join(args.data, "openb_pod_list_default.csv"), COLUMNS)
    nodes = load(os.path.join(args.data, "openb_node_list_gpu_node.csv"), ["gpu", "model"])
    if not pods:
        die("%s: no pods" % args.data)
    os.makedirs(args.out, exist_ok=True)
    for name in args.names or list(VARIANTS):
        rng = random.Random("%s/%d" % (name, args.seed))
        rows = make(name, pods, nodes, rng, args.pods or len(pods))
        path = os.path.join(args.out, "openb_pod_list_%s.csv" % name)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        share = sum(gpu_milli(p) for p in rows if kind(p) == "share")
        multi = sum(gpu_milli(p) for p in rows if kind(p) == "multi")
        total = sum(gpu_milli(p) for p in rows) or 1
        cpu = sum(1 for p in rows if kind(p) == "cpu")
        spec = sum(1 for p in rows if p["gpu_spec"])
        print("%-12s %s: %d pods, sharing %.0f%% / multi-GPU %.0f%% of GPU demand, "
              "CPU-only %.1f%% of pods, %d with a model constraint"
              % (name, path, len(rows), 100 * share / total, 100 * multi / total,
                 100 * cpu / len(rows), spec))


if __name__ == "__main__":
    main()
