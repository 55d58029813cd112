"""Real-GPU check of Tessera's MPS mode with PyTorch (issue 19): one MPS client's loop.

Run by docs/validation/run_mps_check.sh under `tessera run` on a `tesserad --mps` node, so the
process is an MPS client (CUDA_MPS_PIPE_DIRECTORY and, from --core/--mem, its
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT are in its environment).
It multiplies two square matrices in a loop from the common start instant and prints one JSON
line per --report-every seconds ({"name", "t", "matmuls_per_s"}) and a last one with the total,
or, when CUDA fails, {"name", "t", "error"} and exits 1 (what this client saw of a neighbour's
death or fault). --fault-after S makes this client raise a device-side assert after S seconds
(an out-of-bounds index: a fatal GPU exception, the kind MPS reports to every client of the GPU).
Exits 2 when PyTorch has no CUDA device.
"""
import argparse
import json
import os
import sys
import time

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--start-at", type=float, default=0.0)
    parser.add_argument("--report-every", type=float, default=1.0)
    parser.add_argument("--fault-after", type=float, default=0.0)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"name": args.name, "error": "no CUDA device"}))
        return 2
    env = {k: v for k, v in os.environ.items() if k.startswith("CUDA_MPS_")}
    print(json.dumps({"name": args.name, "pid": os.getpid(), "mps_env": env}), flush=True)
    begin = 0.0
    try:
        a = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
        b = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
        c = torch.empty_like(a)
        for _ in range(4 * args.batch):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        while time.time() < args.start_at:
            time.sleep(0.001)
        total = 0
        begin = time.perf_counter()
        mark, marked = begin, 0
        while time.perf_counter() - begin < args.seconds:
            for _ in range(args.batch):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
            total += args.batch
            now = time.perf_counter()
            if args.fault_after and now - begin >= args.fault_after:
                print(json.dumps({"name": args.name, "t": round(now - begin, 3),
                                  "event": "raising a device-side assert"}), flush=True)
                x = torch.zeros(16, device="cuda")
                x[torch.tensor([1 << 20], device="cuda")] = 1.0
                torch.cuda.synchronize()
            if now - mark >= args.report_every:
                print(json.dumps({"name": args.name, "t": round(now - begin, 3),
                                  "matmuls_per_s": round((total - marked) / (now - mark), 2)}),
                      flush=True)
                mark, marked = now, total
        elapsed = time.perf_counter() - begin
        print(json.dumps({"name": args.name, "matmuls": total, "seconds": round(elapsed, 3),
                          "matmuls_per_s": round(total / elapsed, 2)}), flush=True)
        return 0
    except Exception as e:  # what a neighbour's fault or death looks like from here
        t = round(time.perf_counter() - begin, 3) if begin else None
        print(json.dumps({"name": args.name, "t": t, "error": str(e).splitlines()[0]}), flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
