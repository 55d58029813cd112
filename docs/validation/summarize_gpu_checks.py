"""The summary table of docs/validation/run_gpu_checks.sh: reads its results.jsonl (one JSON object
per measurement, each with a "name") and prints what each check shows, with the goal beside it.
Prints what it has; a missing measurement is shown as missing, never guessed."""
import json
import sys


def main() -> int:
    r = {}
    memory = []
    for line in open(sys.argv[1]):
        line = line.strip()
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        if d.get("name") == "memory":
            memory.append(d)
        else:
            r[d.get("name")] = d
    rows = []

    def row(check, value, goal="", ok=None):
        mark = "" if ok is None else ("ok" if ok else "MISSED")
        rows.append((check, value, goal, mark))

    info = r.get("info", {})
    row("GPU", f'{info.get("gpu")} ({info.get("sms")} SMs), torch {info.get("torch")}, '
        f'CUDA {info.get("cuda")}')
    for m in memory:
        row(f'memory: {m.get("allocator") or "native"}',
            f'total {m.get("mem_get_info_total", 0) / 2**30:.2f} GiB, 5 GiB OOM: '
            f'{m.get("oom_at_5gib")}, train step {m.get("train_step_ms", 0):.2f} ms',
            "4 GiB, OOM", bool(m.get("total_is_4gib") and m.get("oom_at_5gib")))
    if "nvidia-smi-in-container" in r:
        s = r["nvidia-smi-in-container"]
        row("nvidia-smi in a container", f'total {s["memory_total_mib"]} MiB, used '
            f'{s["memory_used_mib"]} MiB, processes {s["apps"]}', "4096 MiB, own only",
            s["cap_shown"] and s["only_own_processes"])
    if "sigkill-release" in r:
        s = r["sigkill-release"]
        row("SIGKILLed tenant's memory freed", f'{s["released_ms"]} ms '
            f'({s["used_before_bytes"] / 2**30:.2f} GiB -> {s["used_after_bytes"]})', "<= 1 s",
            s["within_1s"])

    def rate(name):
        return r.get(name, {}).get("matmuls_per_s")

    alone = rate("alone-native")
    if alone:
        row("matmul alone, native", f"{alone:.1f} /s")
        if rate("alone-shim"):
            row("matmul alone under the shim", f'{rate("alone-shim") / alone:.3f} of native',
                ">= 0.99", rate("alone-shim") / alone >= 0.99)
        a, b = rate("pair-native-a"), rate("pair-native-b")
        if a and b:
            row("two natively (time slicing)", f"{a / alone:.3f} + {b / alone:.3f} = "
                f"{(a + b) / alone:.3f}; ratio {a / b:.2f}")
        for x, y, target, label in (("p3-30", "p3-70", 30 / 70, "policy 3, 30/70"),
                                    ("p2-w1", "p2-w2", 1 / 2, "policy 2, 1:2")):
            a, b = rate(x), rate(y)
            if a and b:
                err = abs(a / b / target - 1) * 100
                row(label, f"{a / alone:.3f} + {b / alone:.3f} = {(a + b) / alone:.3f} busy; "
                    f"ratio {a / b:.3f} (target {target:.3f}, off {err:.1f} %)",
                    "ratio within 5 %, busy >= 0.95", err <= 5 and (a + b) / alone >= 0.95)
        if rate("mps-alone"):
            row("MPS client alone", f'{rate("mps-alone") / alone:.3f} of native')
        a, b = rate("mps-30"), rate("mps-70")
        if a and b:
            row("MPS 30/70", f"{a / alone:.3f} + {b / alone:.3f} = {(a + b) / alone:.3f}; "
                f"ratio {a / b:.3f}")
    for name, label in (("lat-alone", "service alone"),
                        ("lat-native", "service + 2 trainers, native"),
                        ("lat-tessera", "service (high prio) + 2 trainers, Tessera")):
        if name in r and "p50_ms" in r[name]:
            d = r[name]
            row(f"latency: {label}", f'p50 {d["p50_ms"]} ms, p99 {d["p99_ms"]} ms, max '
                f'{d["max_ms"]} ms ({d["requests"]} requests)')
    for key, label in (("train_step_ms", "training step"), ("graph_replay_ms", "CUDA-graph replay")):
        nat = [r[f"ovh-native-{i}"][key] for i in (1, 2) if key in r.get(f"ovh-native-{i}", {})]
        shim = [r[f"ovh-shim-{i}"][key] for i in (1, 2) if key in r.get(f"ovh-shim-{i}", {})]
        if nat and shim:
            n, s = min(nat), min(shim)
            row(f"overhead: {label}", f"native {n:.4f} ms, shim {s:.4f} ms: "
                f"{(s / n - 1) * 100:+.2f} %", "< 1 %", s / n - 1 < 0.01)
    for name, d in r.items():
        if not name.startswith("shim_real_bench") or "error" in d:
            continue
        for key, label in (("alloc_free_1mib_pair", "cuMemAlloc+cuMemFree"),
                           ("launch_call", f'cuLaunchKernel {d.get("kernel_ns", 0)} ns (call)'),
                           ("launch_with_sync", f'cuLaunchKernel {d.get("kernel_ns", 0)} ns (+sync)')):
            p = d[key]
            row(f"{name}: {label}", f'real {p["real_ns"]:.0f} ns, shim '
                f'{p["shim_ns"]:.0f} ns, added {p["added_ns"]:+.0f} ns')
    for name, d in r.items():
        if "error" in d:
            row(f"error: {name}", d["error"][:100])
    width = max(len(c) for c, *_ in rows)
    for check, value, goal, mark in rows:
        print(f"{check:<{width}}  {value}" + (f"  [goal {goal}: {mark}]" if goal else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
