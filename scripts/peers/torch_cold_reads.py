#!/usr/bin/env python3
"""CUDA's side of webfpm's `probe-reads --layers`: how much slower a layer's weights read when
their buffer was last touched a whole step ago (cold) than when it was just read (warm), with
PyTorch's allocator (cudaMalloc, which maps large allocations in 2 MB pages) on the same GPU.

Per size (bytes a layer; defaults: Qwen3-30B-A3B's expert gate/up and down weights, 805,306,368
and 402,653,184), `--layers` buffers of that size, each filled once; then
  warm: buffer 0 read `--reps` times back to back (each read finds it just read),
  cold: the buffers read in turn for `--rounds` rounds (each read finds its buffer untouched
        since `--layers` - 1 other reads), as a decode step reads its layers.
A read is one reduction over the buffer as int32 words (torch.sum, every byte once), timed by
CUDA events around it; the upper median of the warm reads past the first and of the cold reads
past the first round.

Usage:
  python3 scripts/peers/torch_cold_reads.py --layers 48 --out cold-reads.json
Writes {"torch", "device", "layers", "points": [{"bytes", "warm_us", "cold_us", "warm_gbps",
"cold_gbps", "cold_over_warm"}]} atomically. A peer to compare against, never part of webfpm.
"""
import argparse
import json
import os

import torch


def upper_median(xs):
    s = sorted(xs)
    return s[len(s) // 2]


def timed_read(buf, start, end):
    start.record()
    torch.sum(buf)
    end.record()


def measure(size, layers, reps, rounds):
    if size % 4 != 0 or size <= 0:
        raise SystemExit(f"torch_cold_reads: size {size} is not a positive multiple of 4 bytes")
    bufs = [torch.ones(size // 4, dtype=torch.int32, device="cuda") for _ in range(layers)]
    torch.cuda.synchronize()
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731

    pairs = [(ev(), ev()) for _ in range(reps)]
    for s, e in pairs:
        timed_read(bufs[0], s, e)
    torch.cuda.synchronize()
    warm = [s.elapsed_time(e) * 1000 for s, e in pairs[1:]]

    cold_pairs = [[(ev(), ev()) for _ in range(layers)] for _ in range(rounds)]
    for r in range(rounds):
        for i in range(layers):
            timed_read(bufs[i], *cold_pairs[r][i])
    torch.cuda.synchronize()
    cold = [s.elapsed_time(e) * 1000 for rnd in cold_pairs[1:] for s, e in rnd]
    del bufs
    torch.cuda.empty_cache()
    w, c = upper_median(warm), upper_median(cold)
    return {
        "bytes": size,
        "warm_us": round(w, 2),
        "cold_us": round(c, 2),
        "warm_gbps": round(size / w / 1e3, 1),
        "cold_gbps": round(size / c / 1e3, 1),
        "cold_over_warm": round(c / w, 4),
        "warm_samples_us": [round(x, 2) for x in warm],
        "cold_samples_us": [round(x, 2) for x in cold],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="805306368,402653184", help="bytes a layer, comma-separated")
    ap.add_argument("--layers", type=int, default=48, help="buffers read in turn (cold)")
    ap.add_argument("--reps", type=int, default=21, help="back-to-back reads of one buffer (warm)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the buffers (cold)")
    ap.add_argument("--out", required=True, help="JSON file to write")
    a = ap.parse_args()
    if a.layers < 2 or a.reps < 2 or a.rounds < 2:
        raise SystemExit("torch_cold_reads: --layers, --reps and --rounds must be at least 2")
    if not torch.cuda.is_available():
        raise SystemExit("torch_cold_reads: no CUDA device")
    points = []
    for size in (int(x) for x in a.sizes.split(",")):
        p = measure(size, a.layers, a.reps, a.rounds)
        points.append(p)
        print(
            f"{size} B: warm {p['warm_us']} us ({p['warm_gbps']} GB/s), cold {p['cold_us']} us "
            f"({p['cold_gbps']} GB/s), cold/warm {p['cold_over_warm']}",
            flush=True,
        )
    out = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
        "layers": a.layers,
        "read": "torch.sum over int32 words, CUDA events around each read",
        # (expandable segments map memory otherwise than cudaMalloc's)
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "points": points,
    }
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=2)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
