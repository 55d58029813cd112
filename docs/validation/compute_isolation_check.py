"""Real-GPU check of Tessera's compute isolation with PyTorch (issue 4): one tenant's loop.

Run by docs/validation/run_compute_check.sh, alone (with and without the shim) and two at a time
under `tessera run --core PCT` (policy 3) or `--weight N` (policy 2). It multiplies two square
matrices in a loop, waits until the common start instant (so the tenants measure the same
seconds), then counts the multiplications completed in --seconds and prints one JSON line:
  {"name": ..., "matmuls": N, "seconds": S, "matmuls_per_s": R}
Exits 2 when PyTorch has no CUDA device.
"""
import argparse
import json
import sys
import time

import torch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--start-at", type=float, default=0.0,
                        help="time.time() instant at which to start counting (0: at once)")
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8,
                        help="multiplications between two synchronisations")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"name": args.name, "error": "no CUDA device"}))
        return 2
    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
    b = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    for _ in range(4 * args.batch):  # warm-up: cuBLAS handles, kernel selection
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    while time.time() < args.start_at:
        time.sleep(0.001)
    count = 0
    begin = time.perf_counter()
    end = begin + args.seconds
    while time.perf_counter() < end:
        for _ in range(args.batch):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        count += args.batch
    elapsed = time.perf_counter() - begin
    print(json.dumps({"name": args.name, "matmuls": count, "seconds": round(elapsed, 3),
                      "matmuls_per_s": round(count / elapsed, 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
