/**
 * `deno task perf-decode`: decode-step latency of the model at (batch, context) points,
 * next to its HBM roofline (bytes touched / measured read bandwidth) and the PyTorch peer.
 * Steps run back to back with the next step's input token on the GPU (as serving does);
 * host wall per step is the gap between consecutive output arrivals. "encode ms" is the host
 * time forward() takes before its submit (planning, inputs and every dispatch's encoding):
 * where it nears the GPU time, the step is host-bound. "of it inputs / begin" are two parts of
 * it that are Dawn calls which may wait on the device (GpuModel.lastEncodeParts). "submit ms" is
 * the step's submit after it (Dawn records the Vulkan commands there), "forward ms" the whole
 * forward() call: with the wait for the previous step's output, the host's share of a step.
 */
import process from "node:process";
import { readFileSync } from "node:fs";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { holdCollections } from "../gpu/event_pacing.ts";
import { type DecodeAttentionForm, DEEP_DECODE_KEYS, GpuModel } from "../model/gpu_model.ts";
import { rooflineBytes } from "../model/step_cost.ts";
import { GPU_MD_DECODE } from "../model/peer_reference.ts";
import { readRoof } from "./bandwidth_roof.ts";
import { SyntheticDecode } from "../perf/synthetic_steps.ts";
import { reportStepProfile } from "../perf/kernel_profile.ts";
import {
  formatStageCosts,
  measureStageCosts,
  STAGE_METHODS,
  stageCostsJson,
  type StageMethod,
} from "../perf/stage_costs.ts";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";
import { intList, parseArgs, sizePairs, UsageError } from "./args.ts";
import { runCli } from "./run_cli.ts";
import { runRecord } from "./run_record.ts";
import { round3, upperMedian } from "../util/sample_stats.ts";
import { TENSOR_CORE_OPTIONS, tensorCoreOptions } from "./model_options.ts";
import { checkedModel } from "./model_spec.ts";
import { BoundaryGc } from "../bench/gc_policy.ts";

const SPEC = {
  model: {
    type: "string",
    default: "synthetic:qwen3-30b-a3b",
    help: "checkpoint folder or synthetic:NAME",
  },
  batch: { type: "list", default: ["1", "8", "32", "64", "128"], help: "batch sizes" },
  ctx: { type: "list", default: ["1024", "8192"], help: "KV context lengths" },
  steps: { type: "number", default: 10, integer: true, min: 3, help: "timed steps per point" },
  warmup: { type: "number", default: 3, integer: true, min: 1, help: "untimed steps per point" },
  warmupS: {
    type: "number",
    default: 2,
    min: 0,
    help: "seconds of untimed steps before the first point (clocks up: on the H200 the first " +
      "point read 27 ms a step for its first 4 steps, 19.7 after)",
  },
  kvCacheGb: {
    type: "number",
    min: 0.01,
    help: "KV cache size in GiB (default: the model's, 16 on a GPU; a point that needs more " +
      "blocks is skipped with its need: 64 x 8192 of synthetic:qwen3-30b-a3b takes 49)",
  },
  dtype: { type: "string", values: ["f16", "f32"], help: "weight and KV storage type" },
  bandwidthGbps: {
    type: "number",
    min: 1,
    help: "read bandwidth for the roofline (default: measured)",
  },
  peer: {
    type: "string",
    help: "JSON written by scripts/peers/torch_moe_peer.py decode in the same session",
  },
  json: { type: "string", help: "write the points as JSON (benchmarks/h200-decode.json format)" },
  gemvMaxRows: {
    type: "number",
    integer: true,
    min: 0,
    help: "linear layers use the one-row GEMV up to this many rows (default 1 with the decode " +
      "forms, which read each weight once per row there: more rows re-read it)",
  },
  decodeAttention: {
    type: "string",
    values: ["tiled", "direct", "lanes", "tcdw", "tcdw2", "tcdw4", "tcdw2h"],
    help: "decode attention form (default: on a GPU tcdw2h (tcdw2 past 8 query heads a kv head) " +
      `for steps of ${DEEP_DECODE_KEYS} keys or more where it runs, else tiled; direct on a ` +
      "CPU adapter; tcdw: the tensor cores, f16 KV, blocks of multiples of 16; tcdw2 / tcdw4: " +
      "the head's dims split among 2 or 4 subgroups; tcdw2h: tcdw2 whose softmax takes only the " +
      "first 8 rows, for at most 8 query heads a kv head)",
  },
  splitWorkgroups: {
    type: "number",
    integer: true,
    min: 1,
    help:
      "decode attention: about this many (split, seq, kv head) workgroups a step (default: whole waves on the tensor-core forms, see --split-waves, 2048 on the others)",
  },
  splitWaves: {
    type: "number",
    integer: true,
    min: 1,
    help:
      "decode attention: the fewest whole waves of this many workgroups whose splits fit the form (default 1536 on the tensor-core forms: as many as the H200 holds at once)",
  },
  splitMinTokens: {
    type: "number",
    integer: true,
    min: 1,
    help: "decode attention: at least this many keys a split (default: 32 on the tiled forms, " +
      "64 on the others)",
  },
  stagedMaxRows: {
    type: "number",
    integer: true,
    min: 0,
    help: "linear layers take a several-row GEMV up to this many rows, the GEMM above (128)",
  },
  moeGateUp: {
    type: "string",
    help: "MoE gate/up decode form instead of the block's choice (dec, dec-w32, dec8, ...)",
  },
  moeDown: { type: "string", help: "MoE down decode form instead of the block's choice" },
  manyByKind: {
    type: "list",
    help: "per linear kind (qkv, o, router, lmHead), its 9-128-row form (a GEMV form or " +
      "gemm), over the defaults (on 32-wide subgroups router=dec8-w32c2-rb,lmHead=gemm); a " +
      "GEMV form keeps its rows from the tensor cores, gemm means them where they run",
  },
  linearOne: {
    type: "string",
    help: "GEMV form of linear layers with up to --gemv-max-rows rows (default dec-w32u8 on " +
      "32-wide subgroups, else dec; dec-w32, dec-w32u16: 4 and 16 loads in flight a lane)",
  },
  linearFew: {
    type: "string",
    help: "GEMV form of linear layers with 2-8 rows (default dec8-w32c2 on 32-wide " +
      "subgroups, else dec8; dec8-w32); the tensor cores take them first where they run " +
      "(--tensor-core-rows 0 or 9 to compare)",
  },
  linearMany: {
    type: "string",
    help: "form of linear layers with 9-128 rows: a GEMV form (default staged; dec8-w32c2-rb, " +
      "...) or gemm; the tensor cores take them first where they run (--tensor-core-rows 0 to " +
      "compare)",
  },
  ...TENSOR_CORE_OPTIONS,
  profile: {
    type: "string",
    help: "also profile one step per kernel at BATCHxCTX points (e.g. 1x1024,64x1024)",
  },
  profileJson: {
    type: "string",
    help: "write the profile as JSON (several points: FILE-BxC.json each)",
  },
  stageCosts: {
    type: "string",
    help: "also measure what each stage costs inside the step at BATCHxCTX points (e.g. " +
      "8x1024,64x1024): the step timed with each stage's dispatches issued twice in turn, less " +
      "the step as it is (src/perf/stage_costs.ts says how to read them); in --json as " +
      "stage_costs",
  },
  stageMethod: {
    type: "string",
    default: "repeat",
    values: [...STAGE_METHODS, "both"],
    help: "how --stage-costs takes a stage's cost: its dispatches twice (repeat), the step " +
      "without them (drop), or both in turn",
  },
} as const;

/** `kind=form` pairs of --many-by-kind. */
function kindForms(pairs: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const m = /^(qkv|o|router|lmHead)=(\S+)$/.exec(pair.trim());
    if (!m) {
      throw new UsageError(`--many-by-kind: '${pair}' is not KIND=FORM (qkv, o, router, lmHead)`);
    }
    out[m[1]] = m[2];
  }
  return out;
}

interface PeerPoint {
  batch: number;
  ctx: number;
  graph_ms: number;
  eager_ms?: number;
}

/** The bench's collections at point boundaries, here before each point's timed steps. */
const BOUNDARY_GC = new BoundaryGc();

await runCli(async () => {
  const o = parseArgs(
    "perf-decode",
    "Decode step latency vs the HBM roofline and the PyTorch peer.",
    SPEC,
    process.argv.slice(2),
  );
  if (o.profileJson && !o.profile) throw new UsageError("--profile-json needs --profile");
  const batches = intList("--batch", o.batch);
  // the profile points, checked before minutes of GPU work
  const profilePoints = o.profile ? sizePairs("--profile", o.profile.split(","), "BATCHxCTX") : [];
  const stagePoints = o.stageCosts
    ? sizePairs("--stage-costs", o.stageCosts.split(","), "BATCHxCTX")
    : [];
  const ctxs = intList("--ctx", o.ctx);
  const peer: PeerPoint[] = o.peer ? readPeer(userPath(o.peer)) : [];
  const { spec: modelSpec } = checkedModel(o.model);
  const gpu = await openGpu();
  console.log(describeGpu(gpu));
  const bw = await readRoof(gpu, o.bandwidthGbps);
  if (!bw) throw new Error("perf-decode needs timestamp queries (the adapter has none)");
  console.log(`read bandwidth: ${(bw.bytesPerSecond / 1e9).toFixed(0)} GB/s (${bw.variant})`);

  const maxSteps = o.warmup + o.steps + 1;
  // the engine holds the sweep's points and the profiled ones
  const extraPoints = [...profilePoints, ...stagePoints];
  const maxBatch = Math.max(...batches, ...extraPoints.map(([b]) => b));
  const maxCtx = Math.max(...ctxs, ...extraPoints.map(([, c]) => c));
  const model0 = await GpuModel.load(gpu, modelSpec, {
    dtype: o.dtype as "f16" | "f32" | undefined,
    kvCacheBytes: o.kvCacheGb ? o.kvCacheGb * 2 ** 30 : undefined,
    maxNumSeqs: Math.max(maxBatch, 1),
    maxNumTokens: Math.max(maxBatch, 16),
    maxModelLen: Math.min(maxCtx + maxSteps + 16, Number.MAX_SAFE_INTEGER),
    gemvMaxRows: o.gemvMaxRows,
    stagedMaxRows: o.stagedMaxRows,
    decodeAttention: o.decodeAttention as DecodeAttentionForm | undefined,
    decodeSplit: { workgroups: o.splitWorkgroups, wave: o.splitWaves, minTokens: o.splitMinTokens },
    moeDecodeForms: { gateUp: o.moeGateUp, down: o.moeDown },
    linearFewRows: o.linearFew,
    linearOneRow: o.linearOne,
    linearManyRows: o.linearMany,
    manyRowsByKind: o.manyByKind ? kindForms(o.manyByKind) : undefined,
    ...tensorCoreOptions(o),
  }, (m) => console.log(m));
  const model = model0;
  // the profile and stage points, which run after the sweep, checked against the pool now
  for (
    const [points, flag, steps] of [[profilePoints, "--profile", 4], [
      stagePoints,
      "--stage-costs",
      maxSteps,
    ]] as const
  ) {
    for (const [b, c] of points) {
      try {
        new SyntheticDecode(model, b, c, steps);
      } catch (err) {
        throw new UsageError(`${flag} ${b}x${c}: ${(err as Error).message}`);
      }
    }
  }
  const lv = model.linearVariants;
  console.log(
    `kernels: linear ${lv.gemv}, GEMM ${lv.gemm}, decode attention ${lv.decodeAttention}, ` +
      `prefill attention ${lv.prefillAttention}, moe by step`,
  );
  console.log(
    `KV cache: ${model.numBlocks} blocks of ${model.blockSize} (${
      (model.kv.bytes / 2 ** 30).toFixed(1)
    } GiB${model.kv.placement === "arena" ? ", in arenas" : ""})`,
  );

  // The GPU at full clocks before anything is timed: the first point that fits, untimed.
  const warmShape = ctxs.flatMap((c) => batches.map((b) => [b, c] as const)).find(([b, c]) => {
    try {
      new SyntheticDecode(model, b, c, maxSteps);
      return true;
    } catch {
      return false; // skipped below, with its reason
    }
  });
  const warmEnd = performance.now() + o.warmupS * 1000;
  while (warmShape && performance.now() < warmEnd) {
    const steps = new SyntheticDecode(model, warmShape[0], warmShape[1], maxSteps);
    await timeDecode(model, steps, maxSteps - 1, 1);
  }
  const rows: string[][] = [];
  const points: Record<string, unknown>[] = [];
  for (const ctx of ctxs) {
    for (const batch of batches) {
      let steps: SyntheticDecode;
      try {
        steps = new SyntheticDecode(model, batch, ctx, maxSteps);
      } catch (err) {
        console.log(`skip ${batch} x ${ctx}: ${(err as Error).message}`);
        continue;
      }
      const r = await timeDecode(model, steps, o.warmup, o.steps);
      // the decode attention's variant and split plan of the point's last timed step
      const split = model.lastDecodeSplit;
      const cost = decodeStepCost(model, batch, timedContext(ctx, o.warmup, o.steps));
      const roofMs = (rooflineBytes(cost) / bw.bytesPerSecond) * 1e3;
      const ref = GPU_MD_DECODE.find((p) => p.batch === batch && p.ctx === ctx);
      // the same call's peer where it timed a graph at this point, else GPU.md's; GPU.md's
      // figure is shown beside it either way (a faster PyTorch than the peer's form 1)
      const measuredMs = peer.find((p) => p.batch === batch && p.ctx === ctx)?.graph_ms ?? null;
      const torchMs = measuredMs ?? ref?.torchGraphMs ?? null;
      const gpuMdMs = ref?.torchGraphMs ?? null;
      rows.push([
        `${batch} x ${ctx}`,
        r.gpuMs.toFixed(2),
        r.wallMs.toFixed(2),
        roofMs.toFixed(2),
        (r.gpuMs / roofMs).toFixed(2) + "x",
        (r.wallMs / r.gpuMs).toFixed(2) + "x",
        r.encodeMs.toFixed(2),
        `${r.inputsMs.toFixed(2)} / ${r.beginMs.toFixed(2)}`,
        r.submitMs.toFixed(2),
        r.forwardMs.toFixed(2),
        torchMs === null ? "-" : torchMs.toFixed(2),
        torchMs === null ? "-" : (torchMs / r.gpuMs).toFixed(2) + "x",
        measuredMs !== null ? "measured" : ref ? "GPU.md" : "-",
        gpuMdMs === null ? "-" : (gpuMdMs / r.gpuMs).toFixed(2) + "x",
      ]);
      points.push({
        batch,
        ctx,
        gpu_ms: round3(r.gpuMs),
        wall_ms: round3(r.wallMs),
        encode_ms: round3(r.encodeMs),
        encode_inputs_ms: round3(r.inputsMs),
        encode_begin_ms: round3(r.beginMs),
        submit_ms: round3(r.submitMs),
        forward_ms: round3(r.forwardMs),
        roofline_ms: round3(roofMs),
        torch_graph_ms: torchMs,
        torch_source: measuredMs !== null ? `measured: ${o.peer}` : ref ? "GPU.md" : null,
        gpu_md_torch_graph_ms: gpuMdMs,
        moe_gemm: model.moeGemmVariant,
        decode_attention: split && `${split.variant} ${split.splitTokens}x${split.numSplits}`,
        o_splits: model.lastOSplits,
        gpu_ms_samples: r.gpuSamples.map(round3),
        wall_ms_samples: r.wallSamples.map(round3),
      });
      console.log(
        `${batch} x ${ctx}: GPU ${r.gpuMs.toFixed(2)} ms, wall ${
          r.wallMs.toFixed(2)
        } ms, roofline ${roofMs.toFixed(2)} ms (moe ${model.moeGemmVariant ?? "-"}; attention ${
          split ? `${split.variant}, splits of ${split.splitTokens} keys x ${split.numSplits}` : "-"
        }${model.lastOSplits > 1 ? `; o GEMV in ${model.lastOSplits} k parts` : ""})`,
      );
    }
  }
  console.log("");
  console.log(formatTable(
    [
      "batch x ctx",
      "GPU ms",
      "wall ms",
      "roofline ms",
      "GPU/roof",
      "wall/GPU",
      "encode ms",
      "of it inputs / begin",
      "submit ms",
      "forward ms",
      "torch graph ms",
      "torch/GPU",
      "torch from",
      "GPU.md torch/GPU",
    ],
    rows,
  ));
  for (const [pb, pc] of profilePoints) {
    const steps = new SyntheticDecode(model, pb, pc, 4);
    await model.forward(steps.next()).sampled;
    await model.forward(steps.next()).sampled;
    model.profile = true;
    await model.forward(steps.next()).sampled;
    model.profile = false;
    const spans = await model.lastStepSpans();
    const cost = decodeStepCost(model, pb, pc + 2);
    reportStepProfile(
      spans,
      cost,
      bw.bytesPerSecond,
      `one decode step at ${pb} x ${pc}`,
      o.profileJson
        ? {
          path: o.profileJson,
          several: profilePoints.length > 1,
          tag: `${pb}x${pc}`,
          fields: { batch: pb, ctx: pc },
        }
        : undefined,
    );
  }
  const stageCostRows: Record<string, unknown>[] = [];
  const methods: readonly StageMethod[] = o.stageMethod === "both"
    ? STAGE_METHODS
    : [o.stageMethod as StageMethod];
  for (const [sb, sc] of stagePoints) {
    const cost = decodeStepCost(model, sb, timedContext(sc, o.warmup, o.steps));
    for (const method of methods) {
      const costs = await measureStageCosts(model, async () => {
        const steps = new SyntheticDecode(model, sb, sc, maxSteps);
        return (await timeDecode(model, steps, o.warmup, o.steps)).gpuMs;
      }, method);
      const how = method === "repeat"
        ? "each stage's dispatches issued twice, less the step as it is"
        : "the step as it is, less the step without each stage's dispatches";
      console.log("");
      console.log(
        `stage costs at ${sb} x ${sc} (${how}: ${
          costs.baseMs.map((m) => m.toFixed(3)).join(" / ")
        } ms before / after)`,
      );
      console.log(formatStageCosts(costs, cost, bw.bytesPerSecond));
      stageCostRows.push({
        batch: sb,
        ctx: sc,
        ...stageCostsJson(costs, cost, bw.bytesPerSecond),
      });
    }
  }
  if (o.json) {
    writeJsonAtomic(userPath(o.json), {
      ...runRecord(gpu),
      model: o.model,
      dtype: model.weights.dtype,
      read_bandwidth_gbps: round3(bw.bytesPerSecond / 1e9),
      weight_placement: model.weights.placement,
      kv_placement: model.kv.placement,
      kernels: {
        linear: lv.gemv,
        gemm: lv.gemm,
        decode_attention: lv.decodeAttention,
        moe: "per point",
      },
      points,
      ...(stageCostRows.length ? { stage_costs: stageCostRows } : {}),
    });
  }
  model.destroy();
  gpu.destroy();
  return 0;
});

async function timeDecode(model: GpuModel, steps: SyntheticDecode, warmup: number, timed: number) {
  const arrivals: number[] = [];
  const gpu: Promise<number | null>[] = [];
  const encode: number[] = [];
  const inputs: number[] = [];
  const begin: number[] = [];
  const submit: number[] = [];
  const forward: number[] = [];
  // Two steps in flight at most, as the engine's async scheduling keeps them. Collections are
  // held as the bench holds them inside a point (event_pacing.ts): unheld, a full one comes every
  // 200 ms of waiting, inside a point's timed steps (session 26's 1 x 1024 row has a 12.3 ms
  // gap followed by a 0.97 ms one: an arrival made late).
  let inFlight: Promise<Int32Array> | null = null;
  // a collection first, as the bench makes one at each point's boundary: the hold counts from
  // here, and without it nothing collected between points but V8 itself, at any moment
  BOUNDARY_GC.collect();
  holdCollections(true);
  try {
    for (let i = 0; i < warmup + timed; i++) {
      const out = model.forward(steps.next());
      gpu.push(out.gpuMs);
      if (i >= warmup) {
        encode.push(model.lastEncodeMs);
        inputs.push(model.lastEncodeParts.inputsMs);
        begin.push(model.lastEncodeParts.beginMs);
        submit.push(model.lastEncodeParts.submitMs);
        forward.push(model.lastEncodeParts.forwardMs);
      }
      if (inFlight) {
        await inFlight;
        arrivals.push(performance.now());
      }
      inFlight = out.sampled;
    }
    await inFlight;
    arrivals.push(performance.now());
  } finally {
    holdCollections(false);
  }
  const gpuTimes = (await Promise.all(gpu)).slice(warmup).map((g) => g ?? NaN);
  const walls = arrivals.slice(warmup).map((t, i) => t - arrivals[warmup + i - 1]).filter((x) =>
    !Number.isNaN(x)
  );
  return {
    gpuMs: upperMedian(gpuTimes),
    wallMs: upperMedian(walls),
    gpuSamples: gpuTimes,
    wallSamples: walls,
    encodeMs: upperMedian(encode),
    inputsMs: upperMedian(inputs),
    beginMs: upperMedian(begin),
    submitMs: upperMedian(submit),
    forwardMs: upperMedian(forward),
  };
}

/**
 * The keys a point's timed steps read, on average: step i of SyntheticDecode reads ctx + i
 * keys, and the timed steps come after the warm-up ones (the roofline prices those steps).
 */
function timedContext(ctx: number, warmup: number, timed: number): number {
  return ctx + warmup + Math.round((timed - 1) / 2);
}

/** What a decode step of `batch` sequences at `ctx` keys touches (the step cost model). */
function decodeStepCost(model: GpuModel, batch: number, ctx: number) {
  return model.stepCost({
    seqs: Array.from({ length: batch }, () => ({ queryLen: 1, contextLen: ctx })),
    sampledRows: batch,
  });
}

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
