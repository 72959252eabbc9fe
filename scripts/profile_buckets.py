#!/usr/bin/env python3
"""Puts the samples of a `perf script` dump into buckets by what is on
their stacks, per controller process of a `wasmctrl-bench throughput` run.

    perf script -i perf.data -F pid,tid,comm,time,ip,sym > perf.txt
    scripts/profile_buckets.py perf.txt [--reconciles N] [--hz F]

A process is the API server if a stack of it names `wasmctrl_apiserver`,
the bench's driver (load generator) if one names
`wasmctrl_bench::throughput` or it ran `perf-exec`, and a controller if
it is neither and a stack names the host crate (`wasmctrl::`); other
processes (kernel threads, perf) are left out. Each controller's samples are put in the first bucket whose
patterns all occur in the stack (see BUCKETS); the rest are listed by
their leaf frame. With --reconciles (the reconciles the process ran over
its life) and --hz (perf's -F), each bucket is also given in µs per
reconcile. docs/BENCHMARKS.md (`throughput`, where a fresh wasm reconcile's
CPU goes) has its latest figures.
"""

import argparse
import collections
import re
import sys

# (bucket, patterns that must all match the stack, frames joined by " | ")
BUCKETS = [
    ("guest: host call, HTTP (object_text)", ["wasmtime_fiber_start", "object_text"]),
    ("guest: host call, cached get", ["wasmtime_fiber_start", "HostFn::entrypoint", r"cache::"]),
    ("guest: host call, the rest", ["wasmtime_fiber_start", "HostFn::entrypoint"]),
    ("guest: code and the wasmtime call", ["wasmtime_fiber_start"]),
    ("instance: instantiate", ["reconcile_through", "call::bounded"]),
    ("instance: store drop", ["reconcile_through", "StoreInner"]),
    ("instance: around the call", ["reconcile_through"]),
    ("hyper connection task", [r"Dispatcher<>::poll"]),
    ("kube client request", ["kube_client::client"]),
    ("informer", ["wasmctrl::control::informer::"]),
    ("workqueue", ["workqueue"]),
    ("controller loop", ["wasmctrl::control::controller"]),
    ("compile or load", ["cranelift|Module::from|CodeMemory|get_or_compile"]),
    ("tokio park", ["park"]),
    ("tokio, other", ["tokio::runtime"]),
]

HEADER = re.compile(r"\s*(\S.*?)\s+(\d+)/(\d+)\s+[\d.]+:")


def norm(frame):
    frame = re.sub(r"::h[0-9a-f]{16}$", "", frame)
    for _ in range(3):
        frame = re.sub(r"<[^<>]*>", "<>", frame)
    return frame


def samples(path):
    """Yields (pid, comm, [frames, leaf first]) per sample."""
    head, frames = None, []
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if head:
                    yield head[0], head[1], frames
                head, frames = None, []
            elif not line[0].isspace():
                m = HEADER.match(line)
                head, frames = ((m.group(2), m.group(1)) if m else None), []
            elif head:
                parts = line.strip().split(None, 1)
                frames.append(norm(parts[1]) if len(parts) > 1 else "?")
    if head:
        yield head[0], head[1], frames


def bucket(stack):
    for name, patterns in BUCKETS:
        if all(re.search(p, stack) for p in patterns):
            return name
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump")
    parser.add_argument("--reconciles", type=int, help="reconciles per controller process")
    parser.add_argument("--hz", type=float, default=5000.0, help="perf record -F (default 5000)")
    args = parser.parse_args()

    role = {}
    host = set()
    per_pid = collections.defaultdict(collections.Counter)
    leaves = collections.defaultdict(collections.Counter)
    totals = collections.Counter()
    for pid, comm, frames in samples(args.dump):
        if pid == "0":
            continue
        stack = " | ".join(frames)
        if "wasmctrl_apiserver" in stack:
            role[pid] = "API server"
        elif "wasmctrl_bench::throughput" in stack or comm == "perf-exec":
            role[pid] = "driver"
        elif "wasmctrl::" in stack:
            host.add(pid)
        totals[pid] += 1
        name = bucket(stack)
        if name:
            per_pid[pid][name] += 1
        else:
            leaves[pid][frames[0] if frames else "?"] += 1

    # One sample is 1/hz s of CPU.
    per = 1e6 / args.hz / args.reconciles if args.reconciles else None
    for pid in sorted(totals, key=int):
        if role.get(pid) or pid not in host:
            continue
        total = totals[pid]
        print(f"controller pid {pid}: {total} samples"
              + (f", {total * per:.1f} µs per reconcile" if per else ""))
        rows = list(per_pid[pid].most_common())
        rows.append(("other (by leaf frame below)", sum(leaves[pid].values())))
        for name, n in rows:
            extra = f"  {n * per:7.1f} µs" if per else ""
            print(f"  {n:7d} {100 * n / total:5.1f}%{extra}  {name}")
        for leaf, n in leaves[pid].most_common(8):
            print(f"  {'':7} {100 * n / total:5.1f}%  · {leaf[:100]}")
    for pid, r in sorted(role.items(), key=lambda x: int(x[0])):
        print(f"{r} pid {pid}: {totals[pid]} samples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
