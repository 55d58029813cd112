#!/usr/bin/env python3
"""Generates variants of the openb default pod list by resampling, for `tessera sim`.

Each variant keeps the default trace's pods (shapes, CPU, memory, times) and changes one property
of the mix, as the FGD paper's trace variants do (Weng et al., ATC'23, section 6), at the levels
the paper's release has:

  gpushareNN    NN % of the GPU demand comes from sharing (fractional single-GPU) pods (20-100)
  multigpuNN    NN % of the GPU demand comes from multi-GPU pods (20-50)
  cpuNNN        CPU-only pods are NNN/10 % of the pods (037 -> 3.7 %, 300 -> 30 %)
  gpuspecNN     NN % of the GPU pods may run only on some GPU models (05-33), with a skew:
    gpuspecNN         proportional: one model, or two (half the time), each drawn in proportion
                      to the cluster's GPUs of that model
    gpuspecNN-scarce  toward the models a constraint hurts most: half of the constrained pods
                      T4 only, the rest G2, P100 or G3 only, or V100M16|V100M32, in equal parts
                      (the mix of the production cluster's constraints that the proportional
                      draw missed: T4 has 14 % of the GPUs and gets half the constrained demand)
    gpuspecNN-inverse one model, or two, each drawn in inverse proportion to the cluster's GPUs
                      of that model (models with at least 2 % of the GPUs), so the smallest
                      models get most of the constrained demand
    gpuspecNN-whole   proportional, but only pods of whole GPUs are constrained (NN % of them),
                      so sharing pods may go anywhere and whole-GPU pods compete for models

Pods are drawn with replacement from the matching classes of the default list with a fixed seed,
so a variant is the same file on every run. The output holds the trace's columns that `tessera
sim` reads (name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, creation_time,
deletion_time). The trace's terms allow research and study use; the variants are derived data,
so write them outside the repository (the default is build/openb-variants).

usage: tools/openb_variants.py [--data DIR] [--out DIR] [--seed S] [--pods N] [NAME ...]
       NAME defaults to every variant listed by --list.
"""

import argparse
import csv
import os
import random
import sys

VARIANTS = {}
for _nn in (20, 40, 60, 80, 100):
    VARIANTS["gpushare%d" % _nn] = ("gpushare", _nn / 100, None)
for _nn in (20, 30, 40, 50):
    VARIANTS["multigpu%d" % _nn] = ("multigpu", _nn / 100, None)
for _nnn in (37, 50, 72, 100, 200, 235, 250, 300):
    VARIANTS["cpu%03d" % _nnn] = ("cpu", _nnn / 1000, None)
for _skew in ("", "-scarce", "-inverse", "-whole"):
    for _nn in (5, 10, 20, 25, 33):
        VARIANTS["gpuspec%02d%s" % (_nn, _skew)] = ("gpuspec", _nn / 100, _skew[1:] or "prop")

# gpuspecNN-scarce: (allowed models, share of the constrained pods).
SCARCE_MIX = [("T4", 0.5), ("G2", 0.125), ("P100", 0.125), ("G3", 0.125),
              ("V100M16|V100M32", 0.125)]

COLUMNS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "creation_time",
           "deletion_time"]


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


def constrain(rng, pods, fraction, skew, nodes):
    """Gives `fraction` of the GPU pods (of the whole-GPU pods for skew "whole") a gpu_spec."""
    gpus_by_model = {}
    for n in nodes:
        if n["model"]:
            gpus_by_model[n["model"]] = gpus_by_model.get(n["model"], 0) + int(n["gpu"])
    total = sum(gpus_by_model.values())
    models = sorted(gpus_by_model)
    if skew == "inverse":
        models = [m for m in models if gpus_by_model[m] >= 0.02 * total]
        weights = [1 / gpus_by_model[m] for m in models]
    else:
        weights = [gpus_by_model[m] for m in models]
    if skew == "scarce":
        for spec, _ in SCARCE_MIX:
            for m in spec.split("|"):
                if m not in gpus_by_model:
                    die("gpuspec -scarce: the node list has no %s GPUs" % m)
    for p in pods:
        if int(p["num_gpu"]) == 0 or (skew == "whole" and kind(p) == "share"):
            continue
        if rng.random() >= fraction:
            continue
        if skew == "scarce":
            spec = rng.choices([m for m, _ in SCARCE_MIX], [w for _, w in SCARCE_MIX])[0]
            p["gpu_spec"] = spec
            continue
        chosen = {rng.choices(models, weights)[0]}
        if rng.random() < 0.5:
            chosen.add(rng.choices(models, weights)[0])
        p["gpu_spec"] = "|".join(sorted(chosen))


def make(name, pods, nodes, rng, count):
    family, value, skew = VARIANTS[name]
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
        constrain(rng, out, value, skew, nodes)
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
