#!/usr/bin/env python3
"""PyTorch peer for webfpm's perf-decode / perf-prefill: the same Qwen3-30B-A3B shapes
(hidden 2048, 48 layers, 32 q / 4 kv heads x 128, 128 experts top-8, width 768, vocab
151936), random bf16 weights, one GPU. Decode steps are captured whole in a CUDA graph
(and also timed eager); prefill runs eager. Attention is SDPA over a contiguous KV cache,
experts go through torch._grouped_mm (fallback: a loop over experts, eager only).

Usage:
  python3 scripts/peers/torch_moe_peer.py decode --batch 1,8,32,64,128 --ctx 1024,8192 --out peer-decode.json
  python3 scripts/peers/torch_moe_peer.py prefill --shapes 1x2048,8x2048,64x512 --out peer-prefill.json
Writes {"torch", "device", "mode", "points": [...]} with ms per step (median of --iters).
This is a peer to compare against, never part of webfpm itself.
"""
import argparse
import json
import math
import time

import torch
import torch.nn.functional as F

H, L, NQ, NKV, HD, E, K, I, V = 2048, 48, 32, 4, 128, 128, 8, 768, 151936
EPS, THETA = 1e-6, 1e6
DT = torch.bfloat16


def make_weights(layers, dev):
    g = torch.Generator(device=dev)
    g.manual_seed(0)

    def rnd(*shape, fan_in):
        return (torch.randn(*shape, device=dev, dtype=torch.float32, generator=g) / math.sqrt(fan_in)).to(DT)

    ws = []
    for _ in range(layers):
        ws.append({
            "in_norm": torch.ones(H, device=dev, dtype=DT),
            "post_norm": torch.ones(H, device=dev, dtype=DT),
            "qkv": rnd((NQ + 2 * NKV) * HD, H, fan_in=H),
            "o": rnd(H, NQ * HD, fan_in=NQ * HD),
            "q_norm": torch.ones(HD, device=dev, dtype=DT),
            "k_norm": torch.ones(HD, device=dev, dtype=DT),
            "router": rnd(E, H, fan_in=H),
            # grouped_mm takes b as [E, K, N]
            "w_gate_up": rnd(E, H, 2 * I, fan_in=H),
            "w_down": rnd(E, I, H, fan_in=I),
        })
    embed = rnd(V, H, fan_in=1)
    lm_head = rnd(V, H, fan_in=H)
    return ws, embed, lm_head


def rms(x, w):
    # one fused kernel on CUDA (f32 inside, as HF's Qwen3RMSNorm); the peer's own hand-written
    # chain of eight f32 kernels, four times a layer, slowed it by ~3 ms a decode step
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


def rope_tables(max_pos, dev):
    inv = 1.0 / (THETA ** (torch.arange(0, HD, 2, device=dev, dtype=torch.float64) / HD))
    ang = torch.arange(max_pos, device=dev, dtype=torch.float64)[:, None] * inv[None]
    ang = torch.cat([ang, ang], -1)
    return ang.cos().to(DT), ang.sin().to(DT)


def apply_rope(x, cos, sin):
    # x [..., T, HD]; cos/sin [T, HD]: HF's q * cos + rotate_half(q) * sin, in the model dtype
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


# What this version of the peer runs, written into its JSON (form 1, before 2026-12-05, wrote
# RMSNorm and RoPE as chains of f32 eager kernels and combined the experts through an f32
# buffer: 3.0-3.9 ms a decode step slower than GPU.md's PyTorch column, 27% in prefill)
FORM = "2: F.rms_norm, HF RoPE in bf16, the experts combined by one bmm"

GROUPED = {"ok": None}


def experts(h, w, topk_ids, topk_w):
    # h [T, H]; returns [T, H]
    T = h.shape[0]
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rows = h[order // K]
    # scatter_add keeps the count on the GPU (bincount syncs to size its output)
    counts = torch.zeros(E, device=h.device, dtype=torch.int64).scatter_add_(0, flat, torch.ones_like(flat))
    offs = torch.cumsum(counts, 0).to(torch.int32)
    if GROUPED["ok"] is not False:
        try:
            gu = torch._grouped_mm(rows, w["w_gate_up"], offs=offs)
            act = F.silu(gu[:, :I]) * gu[:, I:]
            y = torch._grouped_mm(act, w["w_down"], offs=offs)
            GROUPED["ok"] = True
        except Exception as e:  # noqa: BLE001
            GROUPED["ok"] = False
            GROUPED["why"] = repr(e)
    if GROUPED["ok"] is False:
        y = torch.empty_like(rows)
        start = 0
        for e, c in enumerate(counts.tolist()):
            if c:
                gu = rows[start:start + c] @ w["w_gate_up"][e]
                y[start:start + c] = (F.silu(gu[:, :I]) * gu[:, I:]) @ w["w_down"][e]
            start += c
    # back to (token, slot) order, then the weighted sum over the K slots as one batched GEMM
    # (f32 accumulation inside it), not through an f32 [T*K, H] buffer
    inv = torch.empty_like(order).scatter_(0, order, torch.arange(order.numel(), device=order.device))
    yk = y[inv].view(T, K, H)
    return torch.bmm(topk_w.to(DT).unsqueeze(1), yk).squeeze(1)


def layer(x, w, kc, vc, pos, cos, sin, causal):
    # x [B, T, H]; kc/vc [B, NKV, S, HD]; pos: first position of this step's tokens
    B, T, _ = x.shape
    h = rms(x, w["in_norm"])
    qkv = h @ w["qkv"].t()
    q, k, v = qkv.split([NQ * HD, NKV * HD, NKV * HD], -1)
    q = rms(q.view(B, T, NQ, HD), w["q_norm"]).transpose(1, 2)
    k = rms(k.view(B, T, NKV, HD), w["k_norm"]).transpose(1, 2)
    v = v.view(B, T, NKV, HD).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    kc[:, :, pos:pos + T] = k
    vc[:, :, pos:pos + T] = v
    attn = F.scaled_dot_product_attention(
        q, kc[:, :, : pos + T], vc[:, :, : pos + T], is_causal=causal, enable_gqa=True
    )
    x = x + attn.transpose(1, 2).reshape(B, T, NQ * HD) @ w["o"].t()
    h = rms(x, w["post_norm"]).view(B * T, H)
    probs = torch.softmax((h @ w["router"].t()).float(), -1)
    tw, ti = torch.topk(probs, K, -1)
    tw = tw / tw.sum(-1, keepdim=True)
    return x + experts(h, w, ti, tw).view(B, T, H)


def timed(fn, iters):
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def decode(args, dev):
    ws, embed, lm_head = make_weights(L, dev)
    cos, sin = rope_tables(max(args.ctx) + 8, dev)
    points = []
    for ctx in args.ctx:
        for b in args.batch:
            need = 2 * L * b * NKV * (ctx + 1) * HD * 2
            if need > args.kv_gb * 2**30:
                points.append({"batch": b, "ctx": ctx, "skipped": f"KV {need / 2**30:.1f} GiB > {args.kv_gb}"})
                continue
            kcs = [torch.zeros(b, NKV, ctx + 1, HD, device=dev, dtype=DT) for _ in range(L)]
            vcs = [torch.zeros(b, NKV, ctx + 1, HD, device=dev, dtype=DT) for _ in range(L)]
            ids = torch.randint(1, V, (b, 1), device=dev)
            pos = ctx - 1
            c, s = cos[pos:pos + 1], sin[pos:pos + 1]

            def step():
                x = embed[ids]
                for l in range(L):
                    x = layer(x, ws[l], kcs[l], vcs[l], pos, c, s, False)
                logits = rms(x[:, -1], torch.ones(H, device=dev, dtype=DT)) @ lm_head.t()
                return torch.argmax(logits, -1)

            for _ in range(3):
                step()
            eager = timed(step, args.iters)
            graph_ms = None
            if GROUPED["ok"]:
                g = torch.cuda.CUDAGraph()
                st = torch.cuda.Stream()
                st.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(st):
                    for _ in range(2):
                        step()
                torch.cuda.current_stream().wait_stream(st)
                with torch.cuda.graph(g):
                    step()
                for _ in range(3):
                    g.replay()
                graph_ms = timed(g.replay, args.iters)
                del g
            points.append({"batch": b, "ctx": ctx, "eager_ms": round(eager, 3),
                           "graph_ms": None if graph_ms is None else round(graph_ms, 3)})
            print(points[-1], flush=True)
            del kcs, vcs
            torch.cuda.empty_cache()
    return points


def prefill(args, dev):
    ws, embed, lm_head = make_weights(L, dev)
    points = []
    for shape in args.shapes:
        b, t = shape
        cos, sin = rope_tables(t, dev)
        kcs = [torch.zeros(b, NKV, t, HD, device=dev, dtype=DT) for _ in range(L)]
        vcs = [torch.zeros(b, NKV, t, HD, device=dev, dtype=DT) for _ in range(L)]
        ids = torch.randint(1, V, (b, t), device=dev)

        def step():
            x = embed[ids]
            for l in range(L):
                x = layer(x, ws[l], kcs[l], vcs[l], 0, cos, sin, True)
            logits = rms(x[:, -1], torch.ones(H, device=dev, dtype=DT)) @ lm_head.t()
            return torch.argmax(logits, -1)

        with torch.no_grad():
            step()
            ms = timed(step, args.iters)
        toks = b * t
        # 2 * active params per token + causal attention (4 * S^2/2 * NQ * HD per layer)
        active = L * ((NQ + 2 * NKV) * HD * H + H * NQ * HD + E * H + K * 3 * I * H) + V * H / t
        flops = 2 * active * toks + L * b * 4 * (t * t / 2) * NQ * HD
        points.append({"batch": b, "tokens": t, "ms": round(ms, 3), "tokens_per_s": round(toks / ms * 1e3),
                       "tflops": round(flops / ms / 1e9, 1)})
        print(points[-1], flush=True)
        del kcs, vcs
        torch.cuda.empty_cache()
    return points


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["decode", "prefill"])
    p.add_argument("--batch", default="1,8,32,64,128")
    p.add_argument("--ctx", default="1024,8192")
    p.add_argument("--shapes", default="1x2048,8x2048,64x512")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--kv-gb", type=float, default=60)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    a.batch = [int(x) for x in a.batch.split(",")]
    a.ctx = [int(x) for x in a.ctx.split(",")]
    a.shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes.split(",")]
    dev = torch.device("cuda")
    t0 = time.time()
    with torch.inference_mode():
        points = decode(a, dev) if a.mode == "decode" else prefill(a, dev)
    out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "mode": a.mode,
           "form": FORM,
           "grouped_mm": GROUPED.get("ok"), "grouped_mm_error": GROUPED.get("why"),
           "seconds": round(time.time() - t0, 1), "points": points}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
