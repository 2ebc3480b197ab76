/**
 * `deno task perf-prefill`: prefill throughput of the model (tokens/s, TFLOP/s) at
 * (batch x tokens) shapes, next to the PyTorch peer. A shape larger than one step's token
 * budget runs as several steps of whole sequences (as a serving engine would schedule it);
 * its time is their sum.
 */
import process from "node:process";
import { readFileSync } from "node:fs";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { GpuModel } from "../model/gpu_model.ts";
import { GPU_MD_PREFILL } from "../model/peer_reference.ts";
import { syntheticPrefill } from "../perf/synthetic_steps.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { parseArgs, sizePairs, UsageError } from "./args.ts";
import { runCli } from "./run_cli.ts";
import { runRecord } from "./run_record.ts";
import { upperMedian } from "../util/sample_stats.ts";
import { TENSOR_CORE_OPTIONS, tensorCoreOptions } from "./model_options.ts";
import { checkedModel } from "./model_spec.ts";
import { reportStepProfile } from "../perf/kernel_profile.ts";

const SPEC = {
  model: {
    type: "string",
    default: "synthetic:qwen3-30b-a3b",
    help: "checkpoint folder or synthetic:NAME",
  },
  shapes: {
    type: "list",
    default: ["1x2048", "8x2048", "64x512"],
    help: "BATCHxTOKENS shapes",
  },
  reps: { type: "number", default: 3, integer: true, min: 1, help: "timed repetitions per shape" },
  warmupS: {
    type: "number",
    default: 2,
    min: 0,
    help: "seconds of untimed steps of the largest shape before the first one is timed (clocks " +
      "up; as perf-decode's)",
  },
  maxNumTokens: {
    type: "number",
    default: 16384,
    integer: true,
    min: 16,
    help: "tokens one step carries (larger shapes run as several steps)",
  },
  kvCacheGb: { type: "number", min: 0.01, help: "KV cache size" },
  dtype: { type: "string", values: ["f16", "f32"], help: "weight and KV storage type" },
  peer: {
    type: "string",
    help: "JSON written by scripts/peers/torch_moe_peer.py prefill in the same session",
  },
  json: { type: "string", help: "write the points as JSON (benchmarks/h200-prefill.json)" },
  ...TENSOR_CORE_OPTIONS,
  profile: {
    type: "string",
    help: "also profile one step per kernel at BATCHxTOKENS shapes (one step each: at most " +
      "--max-num-tokens tokens)",
  },
  profileJson: {
    type: "string",
    help: "write the profile as JSON (several shapes: FILE-BxT.json each)",
  },
} as const;

interface PeerPoint {
  batch: number;
  tokens: number;
  ms: number;
  tokens_per_s: number;
}

await runCli(async () => {
  const o = parseArgs(
    "perf-prefill",
    "Prefill throughput vs the PyTorch peer.",
    SPEC,
    process.argv.slice(2),
  );
  if (o.profileJson && !o.profile) throw new UsageError("--profile-json needs --profile");
  const shapes = sizePairs("--shapes", o.shapes, "BATCHxTOKENS").map(([batch, tokens]) => ({
    batch,
    tokens,
  }));
  // the profiled shapes, checked before minutes of GPU work
  const profileShapes = o.profile
    ? sizePairs("--profile", o.profile.split(","), "BATCHxTOKENS")
    : [];
  for (const [b, t] of profileShapes) {
    if (b * t > o.maxNumTokens) {
      throw new UsageError(
        `--profile ${b}x${t}: more than --max-num-tokens ${o.maxNumTokens} tokens`,
      );
    }
  }
  const peer: PeerPoint[] = o.peer ? readPeer(userPath(o.peer)) : [];
  const { spec: modelSpec } = checkedModel(o.model);
  const gpu = await openGpu();
  console.log(describeGpu(gpu));
  const maxSeqTokens = Math.max(...shapes.map((s) => s.tokens), ...profileShapes.map(([, t]) => t));
  const maxSeqs = Math.max(
    ...shapes.map((s) => Math.min(s.batch, Math.floor(o.maxNumTokens / s.tokens))),
    ...profileShapes.map(([b]) => b),
  );
  if (maxSeqTokens > o.maxNumTokens) {
    throw new UsageError(
      `a sequence of ${maxSeqTokens} tokens exceeds --max-num-tokens ${o.maxNumTokens}`,
    );
  }
  const model = await GpuModel.load(gpu, modelSpec, {
    dtype: o.dtype as "f16" | "f32" | undefined,
    kvCacheBytes: o.kvCacheGb ? o.kvCacheGb * 2 ** 30 : undefined,
    maxNumTokens: o.maxNumTokens,
    maxNumSeqs: Math.max(maxSeqs, 1),
    maxModelLen: maxSeqTokens + 16,
    ...tensorCoreOptions(o),
  }, (m) => console.log(m));
  console.log(
    `kernels: linear ${model.linearVariants.gemm} (GEMM), attention ${model.linearVariants.prefillAttention}, moe auto`,
  );
  const rows: string[][] = [];
  const points: Record<string, unknown>[] = [];
  // The GPU at full clocks before anything is timed: steps of the most tokens a step, untimed.
  // On the H200 the small shapes measured first read 2-4x the GPU time that the same steps
  // read after larger ones in bench (1 x 1: 17.7-19.3 ms against 5.3).
  // a shape's steps: the sequences each carries (as many as --max-num-tokens holds, >= 1)
  const stepsOf = (batch: number, tokens: number) => {
    const perStep = Math.max(1, Math.floor(o.maxNumTokens / tokens));
    const steps: number[] = [];
    for (let left = batch; left > 0; left -= perStep) steps.push(Math.min(perStep, left));
    return steps;
  };
  const firstStepTokens = (s: { batch: number; tokens: number }) =>
    stepsOf(s.batch, s.tokens)[0] * s.tokens;
  const warm = shapes.reduce((a, x) => (firstStepTokens(x) > firstStepTokens(a) ? x : a));
  const warmBatch = stepsOf(warm.batch, warm.tokens)[0];
  const warmEnd = performance.now() + o.warmupS * 1000;
  while (performance.now() < warmEnd) {
    await model.forward(syntheticPrefill(model, warmBatch, warm.tokens)).sampled;
  }
  for (const { batch, tokens } of shapes) {
    const steps = stepsOf(batch, tokens);
    const once = async () => {
      let ms = 0;
      for (const b of steps) {
        const out = model.forward(syntheticPrefill(model, b, tokens));
        await out.sampled;
        ms += (await out.gpuMs) ?? NaN;
      }
      return ms;
    };
    await once(); // warm-up: pipelines of this shape
    const times: number[] = [];
    const t0 = performance.now();
    for (let r = 0; r < o.reps; r++) times.push(await once());
    const wallMs = (performance.now() - t0) / o.reps;
    const gpuMs = upperMedian(times);
    const flops = steps.reduce(
      (f, b) =>
        f +
        model.stepCost({
          seqs: Array.from({ length: b }, () => ({ queryLen: tokens, contextLen: tokens })),
          sampledRows: b,
        }).totalFlops,
      0,
    );
    const tps = (batch * tokens) / (gpuMs / 1e3);
    const tflops = flops / (gpuMs / 1e3) / 1e12;
    const measured = peer.find((p) => p.batch === batch && p.tokens === tokens)?.tokens_per_s ??
      null;
    const ref = GPU_MD_PREFILL.find((p) => p.batch === batch && p.tokens === tokens);
    const peerTps = measured ?? ref?.tokensPerSecond ?? null;
    const gpuMdTps = ref?.tokensPerSecond ?? null;
    rows.push([
      `${batch} x ${tokens}`,
      String(steps.length),
      gpuMs.toFixed(1),
      wallMs.toFixed(1),
      Math.round(tps).toString(),
      tflops.toFixed(1),
      peerTps === null ? "-" : String(peerTps),
      peerTps === null ? "-" : ((tps / peerTps) * 100).toFixed(0) + "%",
      measured !== null ? "measured" : ref ? "GPU.md" : "-",
      gpuMdTps === null ? "-" : ((tps / gpuMdTps) * 100).toFixed(0) + "%",
    ]);
    points.push({
      batch,
      tokens,
      steps: steps.length,
      gpu_ms: gpuMs,
      wall_ms: wallMs,
      tokens_per_s: tps,
      tflops,
      torch_tokens_per_s: peerTps,
      torch_source: measured !== null ? `measured: ${o.peer}` : ref ? "GPU.md" : null,
      gpu_md_torch_tokens_per_s: gpuMdTps,
    });
    console.log(`${batch} x ${tokens}: ${gpuMs.toFixed(1)} ms GPU, ${Math.round(tps)} tokens/s`);
  }
  console.log("");
  console.log(formatTable(
    [
      "batch x tokens",
      "steps",
      "GPU ms",
      "wall ms",
      "tokens/s",
      "TFLOP/s",
      "torch tokens/s",
      "of torch",
      "torch from",
      "of GPU.md torch",
    ],
    rows,
  ));
  for (const [pb, pt] of profileShapes) {
    await model.forward(syntheticPrefill(model, pb, pt)).sampled; // this shape's pipelines
    model.profile = true;
    await model.forward(syntheticPrefill(model, pb, pt)).sampled;
    model.profile = false;
    const spans = await model.lastStepSpans();
    const cost = model.stepCost({
      seqs: Array.from({ length: pb }, () => ({ queryLen: pt, contextLen: pt })),
      sampledRows: pb,
    });
    reportStepProfile(
      spans,
      cost,
      null,
      `one prefill step at ${pb} x ${pt}`,
      o.profileJson
        ? {
          path: o.profileJson,
          several: profileShapes.length > 1,
          tag: `${pb}x${pt}`,
          fields: { batch: pb, tokens: pt },
        }
        : undefined,
    );
  }
  if (o.json) {
    writeJsonAtomic(userPath(o.json), {
      ...runRecord(gpu),
      model: o.model,
      dtype: model.weights.dtype,
      kernels: {
        gemm: model.linearVariants.gemm,
        attention: model.linearVariants.prefillAttention,
        moe_last_shape: model.moeGemmVariant,
      },
      points,
    });
  }
  model.destroy();
  gpu.destroy();
  return 0;
});

function readPeer(path: string): PeerPoint[] {
  let points: unknown;
  try {
    points = JSON.parse(readFileSync(path, "utf8"))?.points;
  } catch (err) {
    throw new UsageError(`--peer ${path}: ${(err as Error).message}`);
  }
  if (!Array.isArray(points)) throw new UsageError(`--peer ${path}: no "points" list`);
  return points as PeerPoint[];
}
