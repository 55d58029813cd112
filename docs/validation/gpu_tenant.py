"""One PyTorch tenant of the real-GPU checks (docs/validation/run_gpu_checks.sh).

Each subcommand prints JSON lines on stdout (the last one is the result) and exits 0, or prints
{"name", "error"} and exits 1 when CUDA fails; 2 when PyTorch has no CUDA device.

  matmul   --name N --seconds S       a saturating loop of fp16 matrix products (--size, --batch
                                      products between two synchronisations): products per second
  latency  --name N --seconds S       an inference service: a small MLP forward on a batch of 8,
                                      then a synchronisation, every --gap-ms: latency p50/p90/p99
  overhead --name N --seconds S       a training step (MLP, SGD) and an inference replay of a
                                      CUDA graph (a transformer encoder layer), each measured in
                                      windows; the medians of the windows, in ms
  hold     --name N --gib G           allocates G GiB, prints its pid, sleeps until killed

--barrier DIR --peers K: after its warm-up a tenant creates DIR/NAME and waits until K tenants
have, so the measured seconds of concurrent tenants coincide (at most 120 s, then it starts).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

GIB = 1 << 30


def emit(d):
    print(json.dumps(d), flush=True)


def barrier(args):
    if not args.barrier:
        return
    os.makedirs(args.barrier, exist_ok=True)
    open(os.path.join(args.barrier, args.name), "w").close()
    deadline = time.time() + 120
    while len(os.listdir(args.barrier)) < args.peers and time.time() < deadline:
        time.sleep(0.0005)


def matmul(args):
    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
    b = torch.randn(args.size, args.size, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    for _ in range(4 * args.batch):  # warm-up: cuBLAS handle, kernel selection
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    barrier(args)
    count = 0
    begin = time.perf_counter()
    end = begin + args.seconds
    while time.perf_counter() < end:
        for _ in range(args.batch):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        count += args.batch
    elapsed = time.perf_counter() - begin
    emit({"name": args.name, "kind": "matmul", "matmuls": count, "seconds": round(elapsed, 3),
          "matmuls_per_s": round(count / elapsed, 2)})


def latency(args):
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
    ).cuda().half().eval()
    x = torch.randn(8, 1024, device="cuda", dtype=torch.float16)
    with torch.inference_mode():
        for _ in range(50):
            model(x)
        torch.cuda.synchronize()
        barrier(args)
        lat = []
        begin = time.perf_counter()
        while time.perf_counter() - begin < args.seconds:
            t = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            lat.append((time.perf_counter() - t) * 1000)
            time.sleep(args.gap_ms / 1000)
    lat.sort()

    def q(p):
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 3)

    emit({"name": args.name, "kind": "latency", "requests": len(lat), "p50_ms": q(0.50),
          "p90_ms": q(0.90), "p99_ms": q(0.99), "max_ms": round(lat[-1], 3)})


def windows(step, seconds, per_window):
    """Median over windows of the mean ms per step; each window is per_window steps."""
    means = []
    begin = time.perf_counter()
    while time.perf_counter() - begin < seconds or len(means) < 3:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(per_window):
            step()
        torch.cuda.synchronize()
        means.append((time.perf_counter() - t) * 1000 / per_window)
    return round(statistics.median(means), 4), len(means)


def overhead(args):
    model = torch.nn.Sequential(
        torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)
    ).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 4096, device="cuda")

    def train_step():
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    for _ in range(20):
        train_step()
    train_ms, train_windows = windows(train_step, args.seconds / 2, 25)

    layer = torch.nn.TransformerEncoderLayer(d_model=1024, nhead=16, batch_first=True)
    layer = layer.cuda().half().eval()
    src = torch.randn(8, 128, 1024, device="cuda", dtype=torch.float16)
    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                layer(src)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = layer(src)
        for _ in range(20):
            graph.replay()
        infer_ms, infer_windows = windows(graph.replay, args.seconds / 2, 50)
        del out
    emit({"name": args.name, "kind": "overhead", "train_step_ms": train_ms,
          "train_windows": train_windows, "graph_replay_ms": infer_ms,
          "graph_windows": infer_windows})


def hold(args):
    held = torch.empty(int(args.gib * GIB), dtype=torch.uint8, device="cuda")
    held.fill_(1)
    torch.cuda.synchronize()
    emit({"name": args.name, "kind": "hold", "pid": os.getpid(), "held_bytes": held.numel()})
    time.sleep(args.seconds)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["matmul", "latency", "overhead", "hold"])
    parser.add_argument("--name", required=True)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--barrier", default="")
    parser.add_argument("--peers", type=int, default=1)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--gib", type=float, default=1.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        emit({"name": args.name, "error": "no CUDA device"})
        return 2
    try:
        {"matmul": matmul, "latency": latency, "overhead": overhead, "hold": hold}[args.mode](args)
        return 0
    except Exception as e:  # a CUDA error is a finding: report it as the result
        emit({"name": args.name, "error": str(e).splitlines()[0] if str(e) else repr(e)})
        return 1


if __name__ == "__main__":
    sys.exit(main())
