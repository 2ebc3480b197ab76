import { test } from "uvu";
import * as assert from "uvu/assert";
import { readBuffer, uploadBuffer, writeBuffer } from "../../src/gpu/buffers.ts";
import type { Gpu } from "../../src/gpu/device.ts";
import { f16BitsToF32, f32ToF16Bits, roundToF16InPlace } from "../../src/util/f16.ts";
import { Rng } from "../../src/util/rng.ts";
import {
  MOE_FUSED_ROUTER_MIN_TOKENS,
  MoeBlock,
  type MoeBlockIo,
  type MoeBlockOptions,
  moeBlockRef,
  type MoeBlockShape,
  moeGemmVariantFor,
} from "../../kernels/moe_block.ts";
import {
  MOE_DISPATCH_CHUNK,
  moeDispatchParams,
  moeDispatchRef,
} from "../../kernels/moe_dispatch.ts";
import { moeRouterParams, moeRouterRef } from "../../kernels/moe_router.ts";
import { spec as gateUpSpec } from "../../kernels/moe_gemm_gate_up.ts";
import { supportedVariants, unsupportedReason, variantByName } from "../../kernels/kernel.ts";
import { rmsnormRef } from "../../kernels/rmsnorm.ts";
import { withPartials } from "../../kernels/moe_router_norm.ts";
import { tileExpertMatrices } from "../../kernels/expert_tiles.ts";
import { MOE_ROUTE_DISPATCH_MAX_TOKENS } from "../../kernels/moe_route_dispatch.ts";
import { sharedGpu } from "../shared_gpu.ts";
import * as gateUpTc from "../../kernels/moe_gemm_gate_up_tc.ts";
import * as downTc from "../../kernels/moe_gemm_down_tc.ts";
import * as gatherF16 from "../../kernels/moe_gather_f16.ts";
import * as castF16 from "../../kernels/cast_f16.ts";
import { spec as combineSpec } from "../../kernels/moe_combine.ts";
import { spec as combineNormSpec } from "../../kernels/moe_combine_norm.ts";
import { getPipeline } from "../../kernels/kernel.ts";
import { MOE_TC_PAD_ROWS } from "../../kernels/moe_tc_routing.ts";
import { createStorage } from "../../src/gpu/buffers.ts";
import { emulatedVariant } from "./tc_emulation.ts";

// Tiny shapes of the brief: hidden 64, 8 experts top-2, expert width 32.
const H = 64, I = 32, E = 8, K = 2;

/** The test block's shape: H, I, E experts, top-K. */
function blockShape(maxTokens: number, dtype: "f16" | "f32", normTopk = true): MoeBlockShape {
  return { hidden: H, inter: I, experts: E, topK: K, normTopk, maxTokens, dtype };
}

interface Layer {
  wGateUp: Float32Array;
  wDown: Float32Array;
}

function makeLayer(rng: Rng, dtype: "f16" | "f32"): Layer {
  const wGateUp = rng.fillNormal(new Float32Array(E * 2 * I * H), 1 / Math.sqrt(H));
  const wDown = rng.fillNormal(new Float32Array(E * H * I), 1 / Math.sqrt(I));
  if (dtype === "f16") {
    roundToF16InPlace(wGateUp);
    roundToF16InPlace(wDown);
  }
  return { wGateUp, wDown };
}

/**
 * Router logits of a routing pattern. "skewed": expert 0 is every token's first choice
 * and experts 4..7 are never chosen (experts that receive no token, one that receives all).
 */
function makeLogits(rng: Rng, tokens: number, pattern: "spread" | "skewed"): Float32Array {
  const logits = rng.fillNormal(new Float32Array(tokens * E));
  if (pattern === "skewed") {
    for (let t = 0; t < tokens; t++) {
      logits[t * E] += 20;
      for (let e = 4; e < E; e++) logits[t * E + e] -= 20;
    }
  }
  return logits;
}

function weightBuffer(gpu: Gpu, label: string, w: Float32Array, dtype: "f16" | "f32") {
  return uploadBuffer(gpu.device, label, dtype === "f16" ? f32ToF16Bits(w) : w);
}

/** A layer's logits, x, gate/up and down weights and residual on the GPU, in that order. */
function layerBuffers(
  gpu: Gpu,
  dtype: "f16" | "f32",
  logits: Float32Array,
  x: Float32Array,
  layer: Layer,
  residual: Float32Array,
): GPUBuffer[] {
  const d = gpu.device;
  return [
    uploadBuffer(d, "logits", logits),
    uploadBuffer(d, "x", x),
    weightBuffer(gpu, "w_gate_up", layer.wGateUp, dtype),
    weightBuffer(gpu, "w_down", layer.wDown, dtype),
    uploadBuffer(d, "residual", residual),
  ];
}

/**
 * Encodes and submits one step of `block` a pass a stage, as a profile records them; returns the
 * kernel each stage's pass ran (kernelOf).
 */
function submitByStage(gpu: Gpu, block: MoeBlock, io: MoeBlockIo): string[] {
  const enc = gpu.device.createCommandEncoder();
  const kernels: string[] = [];
  let open: GPUComputePassEncoder | null = null;
  block.encode((stage) => {
    kernels.push(block.kernelOf(stage, false));
    open?.end();
    open = enc.beginComputePass();
    return open;
  }, io);
  (open as GPUComputePassEncoder | null)?.end();
  gpu.device.queue.submit([enc.finish()]);
  return kernels;
}

async function runBlock(
  gpu: Gpu,
  shape: MoeBlockShape,
  gemm: string,
  tokens: number,
  logits: Float32Array[],
  xs: Float32Array[],
  layers: Layer[],
  residual: Float32Array,
  options: MoeBlockOptions = {},
): Promise<{ out: Float32Array; args: Uint32Array }> {
  const block = await MoeBlock.create(gpu, shape, { ...options, gemm });
  const d = gpu.device;
  const made: GPUBuffer[] = [];
  const keep = (b: GPUBuffer) => (made.push(b), b);
  const res = keep(uploadBuffer(d, "residual", residual));
  block.setTokens(tokens);
  const enc = d.createCommandEncoder();
  const pass = enc.beginComputePass();
  layers.forEach((layer, l) => {
    block.encode(pass, {
      routerLogits: keep(uploadBuffer(d, "logits", logits[l])),
      x: keep(uploadBuffer(d, "x", xs[l])),
      wGateUp: keep(weightBuffer(gpu, "w_gate_up", layer.wGateUp, shape.dtype)),
      wDown: keep(weightBuffer(gpu, "w_down", layer.wDown, shape.dtype)),
      residual: res,
    });
  });
  pass.end();
  d.queue.submit([enc.finish()]);
  const out = new Float32Array(await readBuffer(d, res, tokens * shape.hidden * 4));
  const args = new Uint32Array(await readBuffer(d, block.scratch.dispatchArgs, 24));
  block.destroy();
  for (const b of made) b.destroy();
  return { out, args };
}

function assertClose(
  got: Float32Array,
  want: Float32Array,
  what: string,
  rtol = 1e-4,
  atol = 1e-4,
) {
  assert.is(got.length, want.length);
  for (let i = 0; i < want.length; i++) {
    const tol = atol + rtol * Math.abs(want[i]);
    if (!(Math.abs(got[i] - want[i]) <= tol)) {
      assert.unreachable(`${what}: out[${i}] = ${got[i]}, expected ${want[i]}`);
    }
  }
}

async function gemmVariants(): Promise<{ gpu: Gpu; names: string[] }> {
  const gpu = await sharedGpu();
  // the forms that read row-by-row weights (their tiled twins: the expert-tiles test below)
  const names = supportedVariants(gpu, gateUpSpec).filter((v) => !v.expertTiles).map((v) => v.name);
  assert.ok(names.length >= 2, `only ${names.join(", ")} GEMM variants run here`);
  return { gpu, names };
}

for (const pattern of ["spread", "skewed"] as const) {
  test(`the GPU MoE block (router, dispatch, grouped GEMMs, combine) matches the CPU block on 1/5/37 tokens, ${pattern} routing, every GEMM variant`, async () => {
    const { gpu, names } = await gemmVariants();
    for (const gemm of names) {
      const dtype = gemm.startsWith("f16") ? "f16" : "f32";
      for (const tokens of [1, 5, 37]) {
        for (const normTopk of [true, false]) {
          const shape = blockShape(40, dtype, normTopk);
          const rng = Rng.fromSeed(`moe block ${pattern} ${tokens}`);
          const logits = makeLogits(rng, tokens, pattern);
          const x = rng.fillNormal(new Float32Array(tokens * H));
          const layer = makeLayer(rng, dtype);
          const residual = rng.fillNormal(new Float32Array(tokens * H));
          const { out, args } = await runBlock(gpu, shape, gemm, tokens, [logits], [x], [
            layer,
          ], residual);
          const want = moeBlockRef(
            { routerLogits: logits, x, ...layer, residual },
            shape,
            tokens,
          );
          const what = `${gemm} tokens=${tokens} norm=${normTopk}`;
          assertClose(out, want, what);
          // The indirect launches cover exactly the (expert, tile) work items needed.
          const ids = moeRouterRef(
            logits,
            moeRouterParams({ tokens, experts: E, topK: K, normTopk }),
          ).ids;
          const items = moeDispatchRef(
            ids,
            moeDispatchParams({ tokens, topK: K, experts: E, gridXGateUp: 1, gridXDown: 1 }),
          ).workItems[0];
          assert.is(args[1], items, `${what}: gate/up work items`);
          assert.is(args[4], items, `${what}: down work items`);
          if (pattern === "skewed") assert.ok(items <= 4, `${what}: ${items} work items`);
        }
      }
    }
  });
}

test("a step of more assignments than one dispatch chunk (several dispatch workgroups) matches the CPU block", async () => {
  const gpu = await sharedGpu();
  // 2500 tokens x top-2: three chunks of the dispatch, the last one short
  const tokens = 2500;
  assert.ok(tokens * K > 2 * MOE_DISPATCH_CHUNK);
  for (const pattern of ["spread", "skewed"] as const) {
    const shape = blockShape(tokens, "f32");
    const rng = Rng.fromSeed(`moe chunks ${pattern}`);
    const logits = makeLogits(rng, tokens, pattern);
    const x = rng.fillNormal(new Float32Array(tokens * H));
    const layer = makeLayer(rng, "f32");
    const residual = rng.fillNormal(new Float32Array(tokens * H));
    const { out, args } = await runBlock(
      gpu,
      shape,
      "auto",
      tokens,
      [logits],
      [x],
      [layer],
      residual,
    );
    const want = moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, tokens);
    assertClose(out, want, `${tokens} tokens ${pattern}`);
    const ids =
      moeRouterRef(logits, moeRouterParams({ tokens, experts: E, topK: K, normTopk: true })).ids;
    const items = moeDispatchRef(
      ids,
      moeDispatchParams({ tokens, topK: K, experts: E, gridXGateUp: 1, gridXDown: 1 }),
    ).workItems[0];
    assert.is(args[1], items, `${pattern}: gate/up work items`);
  }
});

test("auto picks each stage's form by rows per expert (gate/up and down may differ) and matches the CPU block", async () => {
  const gpu = await sharedGpu();
  // 3 rows an expert: both stages take dec on 8-wide subgroups (lavapipe); on 32-wide ones
  // gate/up would take dec-w32 (the choice is tested below)
  const tokens = (3 * E) / K;
  for (const dtype of ["f32", "f16"] as const) {
    const shape = blockShape(tokens, dtype);
    const rng = Rng.fromSeed(`moe auto ${dtype}`);
    const logits = makeLogits(rng, tokens, "spread");
    const x = rng.fillNormal(new Float32Array(tokens * H));
    const layer = makeLayer(rng, dtype);
    const residual = rng.fillNormal(new Float32Array(tokens * H));
    const { out } = await runBlock(gpu, shape, "auto", tokens, [logits], [x], [layer], residual);
    const want = moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, tokens);
    assertClose(out, want, `auto ${dtype}`);
    const block = await MoeBlock.create(gpu, shape);
    block.setTokens(tokens);
    // each stage's first choice that runs here (on lavapipe both dec)
    const runs = (name: string) => unsupportedReason(gpu, variantByName(gateUpSpec, name)) === null;
    const pick = (stage: "gate_up" | "down") =>
      moeGemmVariantFor(dtype, tokens, K, E, false, stage).find(runs);
    const [gu, dn] = [pick("gate_up"), pick("down")];
    assert.is(block.gemmVariant, gu === dn ? gu : `gate_up ${gu}, down ${dn}`);
    block.destroy();
  }
});

test("decodeForms replaces a stage's decode form by name; a form that is none is refused", async () => {
  const gpu = await sharedGpu();
  const tokens = (3 * E) / K;
  const shape = blockShape(tokens, "f32");
  const block = await MoeBlock.create(gpu, shape, {
    decodeForms: { gateUp: "dec8c4", down: "dec" },
  });
  block.setTokens(tokens);
  assert.is(block.gemmVariant, "gate_up f32-dec8c4, down f32-dec");
  block.destroy();
  let refused = "";
  await MoeBlock.create(gpu, shape, { decodeForms: { down: "staged" } }).catch((e) =>
    refused = e.message
  );
  assert.match(
    refused,
    /decodeForms\.down 'staged' is no decode GEMM form that runs here \(.*f32-dec8/,
  );
});

test("the 16-byte-word forms run only where both reduction widths are whole words of 8", async () => {
  const gpu = await sharedGpu();
  if (!gpu.f16) return; // the forms store f16 weights
  // inter 40: dec-ww compiles and is taken when asked
  const fits: MoeBlockShape = { ...blockShape(4, "f16"), inter: 40 };
  const block = await MoeBlock.create(gpu, fits, { decodeForms: { gateUp: "dec-ww" } });
  block.setTokens(1);
  assert.match(block.gemmVariant, /gate_up f16-dec-ww/);
  block.destroy();
  // inter 36: down's rows are not whole words, so no -ww form is compiled, and one named is refused
  const odd: MoeBlockShape = { ...blockShape(4, "f16"), inter: 36 };
  let refused = "";
  await MoeBlock.create(gpu, odd, { decodeForms: { gateUp: "dec-ww" } }).catch((e) =>
    refused = e.message
  );
  assert.match(refused, /decodeForms\.gateUp 'dec-ww' is no decode GEMM form that runs here/);
  refused = "";
  await MoeBlock.create(gpu, odd, { gemm: "f16-dec-ww" }).catch((e) => refused = e.message);
  assert.match(refused, /f16-dec-ww reads 16-byte words of 8 values: hidden and inter must be/);
});

test("with the expert weights in tiles every form the block takes matches the CPU block on row-by-row weights", async () => {
  const gpu = await sharedGpu();
  // hidden 192 and inter 128: several 64-column tiles a row (with 64 a row is one tile, and
  // tiles lie as rows do)
  const H3 = 192, I2 = 128;
  const shape: MoeBlockShape = {
    ...blockShape(40, "f16"),
    hidden: H3,
    inter: I2,
    expertTiles: true,
  };
  const tiled = supportedVariants(gpu, gateUpSpec).filter((v) => v.expertTiles);
  assert.ok(tiled.length >= 2, `only ${tiled.map((v) => v.name).join(", ")} run here`);
  for (const gemm of ["auto", ...tiled.map((v) => v.name.replace(/-t16$/, ""))]) {
    for (const tokens of [1, 37]) {
      const rng = Rng.fromSeed(`moe block tiles ${tokens}`);
      const logits = makeLogits(rng, tokens, "spread");
      const x = rng.fillNormal(new Float32Array(tokens * H3));
      const wGateUp = roundToF16InPlace(
        rng.fillNormal(new Float32Array(E * 2 * I2 * H3), 1 / Math.sqrt(H3)),
      );
      const wDown = roundToF16InPlace(
        rng.fillNormal(new Float32Array(E * H3 * I2), 1 / Math.sqrt(I2)),
      );
      const residual = rng.fillNormal(new Float32Array(tokens * H3));
      const stored = {
        wGateUp: tileExpertMatrices(wGateUp, 2 * I2, H3),
        wDown: tileExpertMatrices(wDown, H3, I2),
      };
      const { out } = await runBlock(gpu, shape, gemm, tokens, [logits], [x], [stored], residual);
      const want = moeBlockRef(
        { routerLogits: logits, x, wGateUp, wDown, residual },
        shape,
        tokens,
      );
      assertClose(out, want, `${gemm} tokens=${tokens}`);
    }
  }
  // a form without a tiled twin, and shapes that are not whole tiles, are refused by name
  const staged = await MoeBlock.create(gpu, shape, { gemm: "f16-staged" }).catch((e) => e.message);
  assert.match(staged, /f16-staged-t16 does not exist \(with the expert weights in tiles/);
  const narrow = await MoeBlock.create(gpu, { ...shape, inter: 32 }).catch((e) => e.message);
  assert.match(narrow, /tiles need hidden and inter multiples of 64 \(have 192, 32\)/);
});

test("two MoE layers encoded in one pass update the residual like two CPU blocks in a row", async () => {
  const { gpu, names } = await gemmVariants();
  for (const gemm of names) {
    const dtype = gemm.startsWith("f16") ? "f16" : "f32";
    const tokens = 5;
    const shape = blockShape(8, dtype);
    const rng = Rng.fromSeed(`moe two layers ${gemm}`);
    const logits = [makeLogits(rng, tokens, "spread"), makeLogits(rng, tokens, "skewed")];
    const xs = [0, 1].map(() => rng.fillNormal(new Float32Array(tokens * H)));
    const layers = [makeLayer(rng, dtype), makeLayer(rng, dtype)];
    const residual = rng.fillNormal(new Float32Array(tokens * H));
    const { out } = await runBlock(gpu, shape, gemm, tokens, logits, xs, layers, residual);
    let want = residual;
    for (let l = 0; l < 2; l++) {
      want = moeBlockRef(
        { routerLogits: logits[l], x: xs[l], ...layers[l], residual: want },
        shape,
        tokens,
      );
    }
    assertClose(out, want, gemm);
  }
});

test("steps of 1 to routeDispatchMaxTokens tokens route and dispatch in one workgroup and match the CPU block; 0 keeps the two dispatches", async () => {
  const { gpu } = await gemmVariants();
  for (const most of [0, 1, 4]) {
    const probe = await MoeBlock.create(gpu, blockShape(40, "f32"), {
      routeDispatchMaxTokens: most,
    });
    for (const tokens of [1, 3, 5]) {
      assert.is(
        probe.routesAndDispatchesAt(tokens),
        tokens <= most,
        `most ${most} tokens ${tokens}`,
      );
      const shape = blockShape(40, "f32", tokens !== 3);
      const rng = Rng.fromSeed(`moe route dispatch ${tokens}`);
      const logits = makeLogits(rng, tokens, "spread");
      const x = rng.fillNormal(new Float32Array(tokens * H));
      const layer = makeLayer(rng, "f32");
      const residual = rng.fillNormal(new Float32Array(tokens * H));
      const { out, args } = await runBlock(
        gpu,
        shape,
        "f32",
        tokens,
        [logits],
        [x],
        [layer],
        residual,
        {
          routeDispatchMaxTokens: most,
        },
      );
      const what = `routeDispatchMaxTokens ${most} tokens=${tokens}`;
      assertClose(
        out,
        moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, tokens),
        what,
      );
      assert.ok(args[1] >= 1, `${what}: work items`);
    }
    probe.destroy();
  }
  const refused = await MoeBlock.create(gpu, blockShape(40, "f32"), { routeDispatchMaxTokens: 65 })
    .then(() => "", (err: Error) => err.message);
  assert.match(refused, /routeDispatchMaxTokens 65 must be an integer in 0\.\.64/);
  // the one-pass router's steps keep moe_dispatch (f16, 2 tokens and more)
  const f16 = await MoeBlock.create(gpu, blockShape(40, "f16"), {
    routeDispatchMaxTokens: 4,
    splitRouterMaxTokens: 0,
  });
  assert.ok(f16.routesAndDispatchesAt(1));
  assert.is(f16.routesAndDispatchesAt(2), !f16.routesInOnePassAt(2));
  f16.destroy();
  // the split router's steps rank their logits in it (the split router's own test runs them)
  const split = await MoeBlock.create(gpu, blockShape(40, "f16"), {
    routeDispatchMaxTokens: 4,
    splitRouterMaxTokens: 4,
  });
  assert.ok(split.splitsRouterAt(2) && split.routesAndDispatchesAt(2));
  split.destroy();
});

test("batch-1 steps rank their logits in the gate/up GEMM's routed twin (no routing dispatch), write the routing in rank order and match the CPU block; routedGateUp false keeps moe_route_dispatch", async () => {
  const { gpu, names } = await gemmVariants();
  const d = gpu.device;
  const lane = names.filter((n) => n.includes("-dec"));
  assert.ok(lane.length > 0, `no lane-group decode form runs here (${names.join(", ")})`);
  for (const gemm of [...lane, "f32"]) {
    for (const routedGateUp of [true, false]) {
      const dtype = variantByName(gateUpSpec, gemm).dtype as "f16" | "f32";
      const shape = blockShape(4, dtype, gemm !== "f32");
      const block = await MoeBlock.create(gpu, shape, { gemm, routedGateUp });
      const what = `${gemm} routedGateUp ${routedGateUp}`;
      block.setTokens(1);
      // only the lane-group forms have a routed twin
      const routed = routedGateUp && gemm !== "f32";
      assert.is(block.routesInGateUpAt(1), routed, what);
      block.setTokens(2);
      assert.not.ok(block.routesInGateUpAt(2), `${what}: 2 tokens`);
      block.setTokens(1);
      const rng = Rng.fromSeed(`moe routed gate/up ${gemm}`);
      const logits = makeLogits(rng, 1, "spread");
      const x = rng.fillNormal(new Float32Array(H));
      const layer = makeLayer(rng, dtype);
      const residual = rng.fillNormal(new Float32Array(H));
      const made = layerBuffers(gpu, dtype, logits, x, layer, residual);
      const [lg, xb, wgu, wdn, res] = made;
      const kernels = submitByStage(gpu, block, {
        routerLogits: lg,
        x: xb,
        wGateUp: wgu,
        wDown: wdn,
        residual: res,
      });
      // (the lane-group forms' down GEMM adds to the residual itself: moe_gemm_down_combine)
      const fused = gemm !== "f32";
      assert.is(block.combinesInDownAt(1), fused, `${what}: combine in the down GEMM`);
      const downs = fused ? ["moe_gemm_down_combine"] : ["moe_gemm_down", "moe_combine"];
      assert.equal(
        kernels,
        routed
          ? ["moe_gemm_gate_up_routed", ...downs]
          : ["moe_route_dispatch", "moe_gemm_gate_up", ...downs],
        what,
      );
      assertClose(
        new Float32Array(await readBuffer(d, res, H * 4)),
        moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, 1),
        what,
      );
      // the routing the kernels after it read: the top-k in rank order (rows too, where routed)
      const want = moeRouterRef(
        logits,
        moeRouterParams({ tokens: 1, experts: E, topK: K, normTopk: shape.normTopk }),
      );
      const sc = block.scratch;
      const ids = new Int32Array(await readBuffer(d, sc.topkIds, K * 4));
      assert.equal([...ids], [...want.ids], `${what}: topk_ids`);
      assertClose(
        new Float32Array(await readBuffer(d, sc.topkWeights, K * 4)),
        want.weights,
        `${what}: topk_weights`,
      );
      const rowOf = [...new Uint32Array(await readBuffer(d, sc.rowOf, K * 4))];
      const items = new Uint32Array(await readBuffer(d, sc.workItems, 16 * (1 + K)));
      const args = [...new Uint32Array(await readBuffer(d, sc.dispatchArgs, 24))];
      assert.is(items[0], K, `${what}: work items`);
      for (let j = 0; j < K; j++) {
        // item rowOf[j] is the j-th choice's expert and row
        assert.equal([...items.subarray(4 + 4 * rowOf[j], 7 + 4 * rowOf[j])], [
          want.ids[j],
          rowOf[j],
          rowOf[j] + 1,
        ], `${what}: choice ${j}`);
      }
      if (routed) assert.equal(rowOf, [0, 1], `${what}: rows in rank order`);
      assert.equal(args.slice(4), [K, 1], `${what}: moe_gemm_down's items`);
      block.destroy();
      for (const b of made) b.destroy();
    }
  }
  // devices that bind fewer storage buffers a stage keep moe_route_dispatch
  const few = { ...gpu, limits: { ...gpu.limits, maxStorageBuffersPerShaderStage: 8 } } as Gpu;
  const laneDtype = variantByName(gateUpSpec, lane[0]).dtype as "f16" | "f32";
  const narrow = await MoeBlock.create(few, blockShape(4, laneDtype), { gemm: lane[0] });
  assert.not.ok(narrow.routesInGateUpAt(1), "8 storage buffers a stage");
  narrow.destroy();
});

/** The router logits x . w[e] of `tokens` rows (f64 sums), as the router's GEMV writes them. */
function routerLogitsRef(x: Float32Array, wRouter: Float32Array, tokens: number): Float32Array {
  const logits = new Float32Array(tokens * E);
  for (let t = 0; t < tokens; t++) {
    for (let e = 0; e < E; e++) {
      let sum = 0;
      for (let i = 0; i < H; i++) sum += x[t * H + i] * wRouter[e * H + i];
      logits[t * E + e] = sum;
    }
  }
  return logits;
}

/** A router-norm step's inputs: residual rows at different scales, f16 norm and router weights. */
function routerNormInputs(rng: Rng, tokens: number) {
  const residual = rng.fillNormal(new Float32Array(tokens * H));
  for (let i = 0; i < residual.length; i++) residual[i] *= 1 + Math.floor(i / H);
  const normWeight = roundToF16InPlace(rng.fillUniform(new Float32Array(H), 0.5, 1.5));
  const wRouter = roundToF16InPlace(rng.fillNormal(new Float32Array(E * H), 1 / Math.sqrt(H)));
  return { residual, normWeight, wRouter, layer: makeLayer(rng, "f16") };
}

/**
 * Their buffers (`made`, to destroy) and the block's io over them: logits (-1) and x (NaN) for
 * the router to write, the router, gate/up and down weights, the residual (the norm's input and
 * the combine's) and the norm weight.
 */
function routerNormBuffers(
  gpu: Gpu,
  tokens: number,
  inp: ReturnType<typeof routerNormInputs>,
) {
  const d = gpu.device;
  const lg = uploadBuffer(d, "logits", new Float32Array(tokens * E).fill(-1));
  const xb = uploadBuffer(d, "x", new Float32Array(tokens * H).fill(NaN));
  const wr = weightBuffer(gpu, "w_router", inp.wRouter, "f16");
  const wgu = weightBuffer(gpu, "w_gate_up", inp.layer.wGateUp, "f16");
  const wd = weightBuffer(gpu, "w_down", inp.layer.wDown, "f16");
  const res = uploadBuffer(d, "residual", inp.residual);
  const nw = weightBuffer(gpu, "norm", inp.normWeight, "f16");
  return {
    made: [lg, xb, wr, wgu, wd, res, nw],
    io: {
      routerLogits: lg,
      wRouter: wr,
      routerNorm: { input: res, weight: nw },
      x: xb,
      wGateUp: wgu,
      wDown: wd,
      residual: res,
    },
    got: { lg, xb, res },
  };
}

/**
 * The o projection's split-K partial sums a step owes, the residual the reduce would have left
 * (they added in order), and that residual's normed rows and router logits.
 */
function owedPartials(
  rng: Rng,
  tokens: number,
  splits: number,
  inp: ReturnType<typeof routerNormInputs>,
) {
  const part = rng.fillNormal(new Float32Array(splits * tokens * H), 0.5);
  const owed = withPartials(inp.residual, part, splits, tokens * H);
  const x = rmsnormRef(owed, inp.normWeight, tokens, H, 1e-5);
  return { part, owed, x, logits: routerLogitsRef(x, inp.wRouter, tokens) };
}

/** Asserts a routed step's normed rows (xb), logits (lg) and new residual (res). */
async function assertRouted(
  gpu: Gpu,
  what: string,
  tokens: number,
  got: { lg: GPUBuffer; xb: GPUBuffer; res: GPUBuffer },
  want: { x: Float32Array; logits: Float32Array; residual: Float32Array },
): Promise<void> {
  const d = gpu.device;
  assertClose(new Float32Array(await readBuffer(d, got.xb, tokens * H * 4)), want.x, `${what}: x`);
  assertClose(
    new Float32Array(await readBuffer(d, got.lg, tokens * E * 4)),
    want.logits,
    `${what}: logits`,
  );
  assertClose(
    new Float32Array(await readBuffer(d, got.res, tokens * H * 4)),
    want.residual,
    `${what}: residual`,
  );
}

test("given the router weight, f16 steps of 2 to fusedRouterMaxTokens tokens route in one pass and write the logits; the others read them", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  for (const dtype of ["f32", "f16"] as const) {
    const shape = blockShape(40, dtype);
    const block = await MoeBlock.create(gpu, shape, {
      fusedRouterMaxTokens: 5,
      splitRouterMaxTokens: 0,
    });
    for (const tokens of [1, 2, 5, 37]) {
      const rng = Rng.fromSeed(`moe one-pass router ${dtype} ${tokens}`);
      const x = rng.fillNormal(new Float32Array(tokens * H));
      const wRouter = rng.fillNormal(new Float32Array(E * H), 1 / Math.sqrt(H));
      if (dtype === "f16") roundToF16InPlace(wRouter);
      const layer = makeLayer(rng, dtype);
      const residual = rng.fillNormal(new Float32Array(tokens * H));
      // the logits the router's GEMV would write, in f64
      const logits = routerLogitsRef(x, wRouter, tokens);
      block.setTokens(tokens);
      // f16 routers only (f32 ones keep the GEMV and moe_router), from 2 tokens
      const onePass = dtype === "f16" && tokens >= MOE_FUSED_ROUTER_MIN_TOKENS && tokens <= 5;
      assert.is(block.routesInOnePass, onePass, `${dtype} tokens=${tokens}`);
      // the larger step reads these; the one-pass steps overwrite them
      const logitsBuf = uploadBuffer(
        d,
        "logits",
        onePass ? new Float32Array(tokens * E).fill(-1) : logits,
      );
      const made = [
        logitsBuf,
        uploadBuffer(d, "x", x),
        weightBuffer(gpu, "w_router", wRouter, dtype),
        weightBuffer(gpu, "w_gate_up", layer.wGateUp, dtype),
        weightBuffer(gpu, "w_down", layer.wDown, dtype),
        uploadBuffer(d, "residual", residual),
      ];
      const [, xBuf, wr, wgu, wd, res] = made;
      const enc = d.createCommandEncoder();
      const pass = enc.beginComputePass();
      block.encode(pass, {
        routerLogits: logitsBuf,
        wRouter: wr,
        x: xBuf,
        wGateUp: wgu,
        wDown: wd,
        residual: res,
      });
      pass.end();
      d.queue.submit([enc.finish()]);
      const out = new Float32Array(await readBuffer(d, res, tokens * shape.hidden * 4));
      const gotLogits = new Float32Array(await readBuffer(d, logitsBuf, tokens * E * 4));
      const what = `one-pass router ${dtype} tokens=${tokens}`;
      // without routerNorm the one-pass steps run moe_router_fused (and the caller norms)
      if (onePass) assert.is(block.kernelOf("router", false), "moe_router_fused", what);
      assertClose(gotLogits, logits, `${what}: logits`);
      assertClose(
        out,
        moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, tokens),
        what,
      );
      for (const b of made) b.destroy();
    }
    block.destroy();
  }
});

test("given routerNorm, the one-pass router norms the residual rows itself, writes them to x and routes on them", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const shape = { ...blockShape(40, "f16" as const), rmsNormEps: 1e-5 };
  const off = await MoeBlock.create(gpu, shape, { fusedRouterNorm: false });
  assert.not.ok(off.normsInRouterAt(2), "fusedRouterNorm false: the caller norms");
  off.destroy();
  const refused = await MoeBlock.create(gpu, shape, { fusedRouterMinTokens: 0 })
    .then(() => "", (err: Error) => err.message);
  assert.match(refused, /fusedRouterMinTokens 0 must be a positive integer/);
  // by default from 2 tokens; with fusedRouterMinTokens 1 batch-1 steps too
  const steps: { fewest?: number; tokens: number }[] = [
    { tokens: 1 },
    { tokens: 2 },
    { tokens: 5 },
    { fewest: 1, tokens: 1 },
  ];
  for (const { fewest, tokens } of steps) {
    const block = await MoeBlock.create(gpu, shape, {
      fusedRouterMaxTokens: 5,
      fusedRouterMinTokens: fewest,
      splitRouterMaxTokens: 0,
    });
    block.setTokens(tokens);
    // only the steps that route in one pass norm in the router
    const onePass = tokens >= (fewest ?? MOE_FUSED_ROUTER_MIN_TOKENS);
    assert.is(block.normsInRouter, onePass, `fewest ${fewest} tokens=${tokens}`);
    if (!onePass) {
      block.destroy();
      continue;
    }
    const rng = Rng.fromSeed(`moe router norm ${tokens}`);
    // the residual rows at different scales; the norm and the combine both read this buffer,
    // as in the model
    const { residual, normWeight, wRouter, layer } = routerNormInputs(rng, tokens);
    const x = rmsnormRef(residual, normWeight, tokens, H, 1e-5);
    const logits = routerLogitsRef(x, wRouter, tokens);
    const { made, io, got } = routerNormBuffers(gpu, tokens, {
      residual,
      normWeight,
      wRouter,
      layer,
    });
    const enc = d.createCommandEncoder();
    const pass = enc.beginComputePass();
    block.encode(pass, io);
    pass.end();
    d.queue.submit([enc.finish()]);
    // a profile's span names the router that ran
    assert.is(block.kernelOf("router", false), "moe_router_norm");
    const what = `router norm tokens=${tokens}`;
    await assertRouted(gpu, what, tokens, got, {
      x,
      logits,
      residual: moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, tokens),
    });
    for (const b of made) b.destroy();
    block.destroy();
  }
});

test("a batch-1 step that combines in the down GEMM leaves the next layer's input weighted by its norm weight and the residual's squares (normNext); other steps and a missing nextNorm are refused", async () => {
  const { gpu, names } = await gemmVariants();
  const d = gpu.device;
  const gemm = names.find((n) => n.startsWith("f32-dec"))!;
  const shape = blockShape(4, "f32");
  const block = await MoeBlock.create(gpu, shape, { gemm });
  assert.ok(block.combinesInDownAt(1), `${gemm}: the combine in the down GEMM at batch 1`);
  assert.not.ok(block.combinesInDownAt(2));
  assert.throws(() => block.setTokens(2, { normNext: true }), /does not run moe_gemm_down_combine/);
  block.setTokens(1, { normNext: true });
  const rng = Rng.fromSeed("moe block norm next");
  const logits = makeLogits(rng, 1, "spread");
  const x = rng.fillNormal(new Float32Array(H));
  const layer = makeLayer(rng, "f32");
  const residual = rng.fillNormal(new Float32Array(H));
  const weight = Float32Array.from({ length: H }, () => rng.int(4, 17) / 8);
  const made = layerBuffers(gpu, "f32", logits, x, layer, residual);
  const [lg, xb, wgu, wdn, res] = made;
  const parts = block.downCombineParts;
  const h = uploadBuffer(d, "h", new Float32Array(H));
  const ss = uploadBuffer(d, "ss_part", new Float32Array(parts));
  const wb = uploadBuffer(d, "norm weight", weight);
  made.push(h, ss, wb);
  const io = { routerLogits: lg, x: xb, wGateUp: wgu, wDown: wdn, residual: res };
  const enc = d.createCommandEncoder();
  const pass = enc.beginComputePass();
  assert.throws(() => block.encode(pass, io), /no nextNorm/);
  block.encode(pass, { ...io, nextNorm: { weight: wb, h, ssPart: ss } });
  pass.end();
  d.queue.submit([enc.finish()]);
  const want = moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, 1);
  assertClose(new Float32Array(await readBuffer(d, res, H * 4)), want, "residual");
  assertClose(
    new Float32Array(await readBuffer(d, h, H * 4)),
    want.map((v, c) => v * weight[c]),
    "h",
  );
  // the block sums add up to the new residual's sum of squares
  const got = new Float32Array(await readBuffer(d, ss, parts * 4)).reduce((a, b) => a + b, 0);
  const sq = want.reduce((a, v) => a + v * v, 0);
  assert.ok(Math.abs(got - sq) <= 1e-4 * sq, `ss_part sums to ${got}, want ${sq}`);
  block.destroy();
  for (const b of made) b.destroy();
});

test("moe_router_norm adds the residual's split-K partial sums first where setTokens says it owes them; other routers refuse them", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const shape = { ...blockShape(40, "f16" as const), rmsNormEps: 1e-5 };
  const block = await MoeBlock.create(gpu, shape, {
    fusedRouterMaxTokens: 8,
    splitRouterMaxTokens: 2,
  });
  // batch 1 splits its router (moe_router_logits) and steps past 8 keep the GEMV: no partials
  assert.not.ok(block.takesResidualPartialsAt(1));
  assert.not.ok(block.takesResidualPartialsAt(9));
  assert.throws(
    () => block.setTokens(9, { residualPartials: 2 }),
    /runs neither moe_router_norm nor moe_router_logits/,
  );
  const tokens = 5, splits = 3;
  assert.ok(block.takesResidualPartialsAt(tokens));
  block.setTokens(tokens, { residualPartials: splits });
  const rng = Rng.fromSeed("moe router norm partials");
  const inputs = routerNormInputs(rng, tokens);
  const { layer } = inputs;
  const { part, owed, x, logits } = owedPartials(rng, tokens, splits, inputs);
  const { made, io: owing, got } = routerNormBuffers(gpu, tokens, inputs);
  const pb = uploadBuffer(d, "partials", part);
  made.push(pb);
  const io = { ...owing, routerNorm: { ...owing.routerNorm, partials: pb } };
  const enc = d.createCommandEncoder();
  const pass = enc.beginComputePass();
  assert.throws(() => block.encode(pass, owing), /owes partial sums/);
  block.encode(pass, io);
  pass.end();
  d.queue.submit([enc.finish()]);
  assertClose(new Float32Array(await readBuffer(d, got.xb, tokens * H * 4)), x, "partials: x");
  assertClose(
    new Float32Array(await readBuffer(d, got.res, tokens * H * 4)),
    moeBlockRef({ routerLogits: logits, x, ...layer, residual: owed }, shape, tokens),
    "partials: the residual with the partials and the experts' sum",
  );
  for (const b of made) b.destroy();
  block.destroy();
});

test("the split router reads the residual's split-K partial sums and the combine adds them (moe_combine, or moe_combine_norm given the next layer's norm)", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const shape = { ...blockShape(40, "f16" as const), rmsNormEps: 1e-5 };
  const block = await MoeBlock.create(gpu, shape, {
    splitRouterMaxTokens: 8,
    routeDispatchMaxTokens: 8,
  });
  const tokens = 5, splits = 3;
  assert.ok(block.takesSplitPartialsAt(tokens));
  assert.not.ok(block.takesResidualPartialsAt(tokens));
  const rng = Rng.fromSeed("moe split router partials");
  const inputs = routerNormInputs(rng, tokens);
  const { layer } = inputs;
  const { part, owed, x, logits } = owedPartials(rng, tokens, splits, inputs);
  const want = moeBlockRef({ routerLogits: logits, x, ...layer, residual: owed }, shape, tokens);
  const nextWeight = Float32Array.from({ length: H }, () => rng.int(4, 17) / 8);
  for (const withNorm of [false, true]) {
    block.setTokens(tokens, { residualPartials: splits });
    const { made, io: owing, got } = routerNormBuffers(gpu, tokens, inputs);
    const pb = uploadBuffer(d, "partials", part);
    const nw = weightBuffer(gpu, "next norm", nextWeight, "f16");
    const normed = uploadBuffer(d, "normed", new Float32Array(tokens * H).fill(NaN));
    made.push(pb, nw, normed);
    const io = {
      ...owing,
      routerNorm: { ...owing.routerNorm, partials: pb },
      ...(withNorm ? { norm: { weight: nw, out: normed } } : {}),
    };
    const kernels = submitByStage(gpu, block, io);
    // (no splitk_reduce: the o projection's partial sums go to the router and the combine)
    assert.equal(kernels, [
      "moe_router_logits",
      "moe_route_dispatch",
      "moe_gemm_gate_up",
      "moe_gemm_down",
      "moe_combine",
    ]);
    const what = `split router + ${splits} partials${withNorm ? ", combine norm" : ""}`;
    await assertRouted(gpu, what, tokens, got, { x, logits, residual: want });
    if (withNorm) {
      assertClose(
        new Float32Array(await readBuffer(d, normed, tokens * H * 4)),
        rmsnormRef(want, nextWeight, tokens, H, 1e-5),
        `${what}: the next layer's input`,
      );
    }
    for (const b of made) b.destroy();
  }
  block.destroy();
});

test("a layer's cached bind groups follow the buffer its partial sums come from", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const shape = { ...blockShape(40, "f16" as const), rmsNormEps: 1e-5 };
  const block = await MoeBlock.create(gpu, shape, { splitRouterMaxTokens: 8 });
  const tokens = 4, splits = 2;
  const rng = Rng.fromSeed("moe partials key");
  const inputs = routerNormInputs(rng, tokens);
  // two steps of one layer (one key, the same buffers), their partial sums in two buffers, as
  // the model's steps take them from the o GEMV's parts or the tensor-core GEMM's partials
  const { made, io: owing, got } = routerNormBuffers(gpu, tokens, inputs);
  for (const which of ["first", "second"]) {
    const { part, owed, x, logits } = owedPartials(rng, tokens, splits, inputs);
    writeBuffer(d, got.res, 0, inputs.residual);
    const pb = uploadBuffer(d, `partials ${which}`, part);
    made.push(pb);
    block.setTokens(tokens, { residualPartials: splits });
    submitByStage(gpu, block, {
      ...owing,
      routerNorm: { ...owing.routerNorm, partials: pb },
      key: "l0",
    });
    const residual = moeBlockRef(
      { routerLogits: logits, x, ...inputs.layer, residual: owed },
      shape,
      tokens,
    );
    await assertRouted(gpu, `${which} partials buffer`, tokens, got, { x, logits, residual });
  }
  for (const b of made) b.destroy();
  block.destroy();
});

test("given routerNorm, f16 steps of splitRouterMinTokens to splitRouterMaxTokens tokens norm and take the logits over the GPU, then rank them apart", async () => {
  const gpu = await sharedGpu();
  const shape = { ...blockShape(40, "f16" as const), rmsNormEps: 1e-5 };
  const off = await MoeBlock.create(gpu, shape, { fusedRouterNorm: false });
  assert.not.ok(off.splitsRouterAt(2), "fusedRouterNorm false: no split router");
  off.destroy();
  const f32 = await MoeBlock.create(gpu, blockShape(40, "f32"));
  assert.not.ok(f32.splitsRouterAt(2), "f32 routers keep the GEMV");
  f32.destroy();
  for (const bad of [{ splitRouterMinTokens: 0 }, { splitRouterMaxTokens: -1 }]) {
    const refused = await MoeBlock.create(gpu, shape, bad).then(() => "", (e: Error) => e.message);
    assert.match(refused, /splitRouter(Min|Max)Tokens -?\d+ must be a/);
  }
  const block = await MoeBlock.create(gpu, shape, {
    splitRouterMinTokens: 1,
    splitRouterMaxTokens: 37,
  });
  // up to MOE_ROUTE_DISPATCH_MAX_TOKENS (16) tokens: moe_route_dispatch ranks and dispatches (or,
  // at 1, the routed gate/up GEMM); more: moe_router, then moe_dispatch
  for (const tokens of [1, 2, 5, 37, 38]) {
    block.setTokens(tokens);
    const split = tokens <= 37;
    assert.is(block.splitsRouterAt(tokens), split, `tokens=${tokens}`);
    if (!split) continue;
    assert.ok(block.normsInRouter && block.routesInOnePass, `tokens=${tokens}: no caller norm`);
    const rng = Rng.fromSeed(`moe split router ${tokens}`);
    const { residual, normWeight, wRouter, layer } = routerNormInputs(rng, tokens);
    const x = rmsnormRef(residual, normWeight, tokens, H, 1e-5);
    const logits = routerLogitsRef(x, wRouter, tokens);
    const { made, io, got } = routerNormBuffers(gpu, tokens, {
      residual,
      normWeight,
      wRouter,
      layer,
    });
    const kernels = submitByStage(gpu, block, io);
    // (at 1 token the gate/up GEMM's routed twin ranks them where the form has one)
    const oneWorkgroup = tokens <= MOE_ROUTE_DISPATCH_MAX_TOKENS;
    assert.is(block.routesAndDispatchesAt(tokens), oneWorkgroup, `tokens=${tokens}`);
    const ranking = !oneWorkgroup
      ? "moe_router"
      : block.routesInGateUpAt(tokens)
      ? "moe_gemm_gate_up_routed"
      : "moe_route_dispatch";
    assert.equal(kernels.slice(0, 2), ["moe_router_logits", ranking], `tokens=${tokens}`);
    assert.is(kernels.includes("moe_dispatch"), !oneWorkgroup, `tokens=${tokens}: moe_dispatch`);
    const what = `split router tokens=${tokens}`;
    await assertRouted(gpu, what, tokens, got, {
      x,
      logits,
      residual: moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, tokens),
    });
    for (const b of made) b.destroy();
  }
  block.destroy();
});

test("given the next layer's norm, the combine also writes that RMSNorm of the new residual (f16 rows too, or alone, where asked)", async () => {
  const gpu = await sharedGpu();
  const d = gpu.device;
  const runs = [
    { dtype: "f32", f16Only: false },
    { dtype: "f16", f16Only: false },
    { dtype: "f16", f16Only: true },
  ] as const;
  for (const { dtype, f16Only } of runs) {
    const tokens = 5;
    const shape = { ...blockShape(8, dtype), rmsNormEps: 1e-5 };
    const block = await MoeBlock.create(gpu, shape);
    const rng = Rng.fromSeed(`moe combine norm ${dtype}`);
    const what = `combine norm ${dtype}${f16Only ? ", f16 rows alone" : ""}`;
    const logits = makeLogits(rng, tokens, "spread");
    const x = rng.fillNormal(new Float32Array(tokens * H));
    const layer = makeLayer(rng, dtype);
    const residual = rng.fillNormal(new Float32Array(tokens * H));
    const normWeight = rng.fillUniform(new Float32Array(H), 0.5, 1.5);
    if (dtype === "f16") roundToF16InPlace(normWeight);
    const made = [
      ...layerBuffers(gpu, dtype, logits, x, layer, residual),
      weightBuffer(gpu, "norm", normWeight, dtype),
      uploadBuffer(d, "normed", new Float32Array(tokens * H).fill(NaN)),
      uploadBuffer(d, "normed16", new Uint16Array(tokens * H).fill(0x7e00)),
    ];
    const [lg, xb, wgu, wd, res, nw, normed, normed16] = made;
    // the f16 block also writes the rows as f16 (the next tensor-core GEMM's operand), or only
    // them
    block.setTokens(tokens, { normF16: dtype === "f16", normF32: !f16Only });
    const enc = d.createCommandEncoder();
    const pass = enc.beginComputePass();
    block.encode(pass, {
      routerLogits: lg,
      x: xb,
      wGateUp: wgu,
      wDown: wd,
      residual: res,
      norm: { weight: nw, out: normed, out16: normed16 },
    });
    pass.end();
    d.queue.submit([enc.finish()]);
    const got16 = f16BitsToF32(new Uint16Array(await readBuffer(d, normed16, tokens * H * 2)));
    const out = new Float32Array(await readBuffer(d, res, tokens * shape.hidden * 4));
    const gotNormed = new Float32Array(await readBuffer(d, normed, tokens * H * 4));
    const want = moeBlockRef({ routerLogits: logits, x, ...layer, residual }, shape, tokens);
    assertClose(out, want, `${what}: residual`);
    const wantNormed = rmsnormRef(want, normWeight, tokens, H, 1e-5);
    if (f16Only) {
      assert.ok(gotNormed.every(Number.isNaN), `${what}: the f32 rows are left alone`);
      assertClose(got16, wantNormed, `${what}: f16 rows`, 1e-3);
    } else {
      assertClose(gotNormed, wantNormed, what);
    }
    if (dtype === "f16" && !f16Only) {
      assert.equal([...got16], [...roundToF16InPlace(new Float32Array(gotNormed))], "f16 rows");
    } else if (dtype === "f32") {
      assert.ok(got16.every(Number.isNaN), "f32 block: the f16 rows are left alone");
    }
    for (const b of made) b.destroy();
    block.destroy();
  }
});

test("the MoE block refuses a step larger than its scratch and encode before setTokens", async () => {
  const gpu = await sharedGpu();
  const shape = blockShape(4, "f32");
  const block = await MoeBlock.create(gpu, shape);
  assert.throws(() => block.setTokens(5), /tokens = 5 must be in 0..4/);
  const enc = gpu.device.createCommandEncoder();
  const pass = enc.beginComputePass();
  const dummy = block.scratch.y;
  assert.throws(
    () =>
      block.encode(pass, {
        routerLogits: dummy,
        x: dummy,
        wGateUp: dummy,
        wDown: dummy,
        residual: dummy,
      }),
    /setTokens before encode/,
  );
  pass.end();
  enc.finish();
  block.destroy();
  let refused = "";
  await MoeBlock.create(gpu, { ...shape, hidden: 62 }).catch((e) => refused = e.message);
  assert.match(refused, /hidden = 62 must be a positive multiple of 4/);
});

test("the GEMM forms by rows per expert: decode forms, then staged (f16 words when packed), tiled else", () => {
  // up to 1 row an expert: gate/up dec-w32c2, down dec-w32c4u3r1 (its short rows), each f16
  // form's 16-byte-word twin first
  const rest = ["f16-dec-w32", "f16-dec", "f16-dec8", "f16-staged", "f16"];
  const fewRows = ["f16-dec-w32c2-ww", "f16-dec-w32c2", ...rest];
  assert.equal(moeGemmVariantFor("f16", 1, 8, 128), fewRows);
  assert.equal(moeGemmVariantFor("f16", 16, 8, 128, false, "down"), [
    "f16-dec-w32c4u3r1-ww",
    "f16-dec-w32c4u3r1",
    "f16-dec-w32c2",
    ...rest,
  ]);
  // up to 2: gate/up dec-w32c2 still, down dec-w32c2u3r2
  assert.equal(moeGemmVariantFor("f16", 32, 8, 128), fewRows);
  assert.equal(moeGemmVariantFor("f16", 32, 8, 128, false, "down"), [
    "f16-dec-w32c2u3r2-ww",
    "f16-dec-w32c2u3r2",
    "f16-dec",
    "f16-dec-w32",
    "f16-dec8",
    "f16-staged",
    "f16",
  ]);
  // f32 weights have no such twins
  assert.equal(moeGemmVariantFor("f32", 1, 8, 128)[0], "f32-dec-w32c2");
  // up to 4: gate/up dec-w32, down dec (faster than dec8 and dec-w32 on the H200 at 4)
  assert.equal(moeGemmVariantFor("f16", 64, 8, 128)[0], "f16-dec-w32");
  assert.equal(moeGemmVariantFor("f16", 64, 8, 128, false, "down"), [
    "f16-dec",
    "f16-dec-w32",
    "f16-dec8",
    "f16-staged",
    "f16",
  ]);
  // up to 16: gate/up dec-w32-wg256, down dec8
  assert.equal(moeGemmVariantFor("f16", 128, 8, 128, true), [
    "f16-dec-w32-wg256",
    "f16-dec8",
    "f16-dec-w32",
    "f16-staged-packed",
    "f16",
  ]);
  assert.equal(moeGemmVariantFor("f32", 128, 8, 128, true, "down"), [
    "f32-dec8",
    "f32-dec-w32",
    "f32-staged",
    "f32",
  ]);
  assert.equal(moeGemmVariantFor("f16", 2048, 8, 128, true), ["f16"]);
});

test("readsTokenRows follows each step's expert GEMM forms (tensor-core pipes stood in)", async () => {
  // lavapipe has no subgroup matrices, so the tensor-core pipelines are stood in by their
  // variants (setTokens reads nothing else of them); nothing is dispatched
  const gpu = await sharedGpu();
  const block = await MoeBlock.create(gpu, {
    hidden: 512,
    inter: 256,
    experts: 128,
    topK: 8,
    normTopk: true,
    maxTokens: 2048,
    dtype: "f16",
  });
  const pair = (name: string) => ({
    gateUp: { variant: variantByName(gateUpTc.spec, name) },
    down: { variant: variantByName(downTc.spec, name) },
  });
  const b = block as unknown as { pipes: Record<string, unknown> };
  b.pipes = {
    ...b.pipes,
    tc: {
      gather: { variant: gatherF16.spec.variants[0] },
      cast: { variant: castF16.spec.variants[0] },
      prefill: pair("f16-tcp4x2"),
      combineY16: null,
      decode: pair("f16-tcs"),
    },
  };
  // the prefill forms from 8 rows an expert, the staged decode forms from 2, else neither; a
  // step off the tensor cores after a prefill step reads x again (the model writes it then)
  for (
    const [tokens, reads] of [[2048, true], [16, false], [64, false], [2048, true], [8, false]]
  ) {
    block.setTokens(tokens as number);
    assert.is(block.readsTokenRows, reads, `${tokens} tokens`);
  }
  block.destroy();
});

test("the MoE block on its prefill tensor-core forms (emulated) matches the CPU block, its down rows in f32 and in f16, through both combines", async () => {
  // lavapipe has no subgroup matrices: the block's tensor-core pipes are stood in by the
  // prefill forms with the matrix operations emulated (tc_emulation.ts), at one column group
  // (32 KB of workgroup memory); everything else is the block's own
  const gpu = await sharedGpu();
  if (!gpu.f16) return;
  const d = gpu.device;
  const emulated = [
    emulatedVariant(gateUpTc.spec, variantByName(gateUpTc.spec, "f16-tcp4x2"), { WN: 1, CW: 32 }),
    emulatedVariant(downTc.spec, variantByName(downTc.spec, "f16-tcp4x2"), { WN: 1, CW: 64 }),
    emulatedVariant(downTc.spec, variantByName(downTc.spec, "f16-tcp4x2-y16"), { WN: 1, CW: 64 }),
  ];
  try {
    const [gateUp, down, down16, cast, gather, combine16, combineNorm16] = await Promise.all([
      getPipeline(gpu, gateUpTc.spec, emulated[0].variant),
      getPipeline(gpu, downTc.spec, emulated[1].variant),
      getPipeline(gpu, downTc.spec, emulated[2].variant),
      getPipeline(gpu, castF16.spec, castF16.spec.variants[0]),
      getPipeline(gpu, gatherF16.spec, gatherF16.spec.variants[0]),
      getPipeline(gpu, combineSpec, variantByName(combineSpec, "f16-y16")),
      getPipeline(gpu, combineNormSpec, variantByName(combineNormSpec, "f16-y16")),
    ]);
    // 37 tokens top-2 of 8: 9.25 rows an expert, past MOE_TC_ROWS_PER_EXPERT (the prefill form)
    const tokens = 37;
    for (const y16 of [false, true]) {
      for (const normed of [false, true]) {
        const what = `${y16 ? "f16" : "f32"} down rows, ${
          normed ? "moe_combine_norm" : "moe_combine"
        }`;
        const shape = { ...blockShape(tokens, "f16"), rmsNormEps: 1e-5 };
        const block = await MoeBlock.create(gpu, shape);
        const b = block as unknown as {
          pipes: Record<string, unknown>;
          scratch: Record<string, unknown>;
        };
        b.pipes = {
          ...b.pipes,
          tc: {
            gather,
            cast,
            prefill: { gateUp, down: y16 ? down16 : down },
            combineY16: y16 ? { combine: combine16, combineNorm: combineNorm16 } : null,
            decode: null,
          },
        };
        const padded = tokens * K + MOE_TC_PAD_ROWS;
        b.scratch = {
          ...b.scratch,
          a16: createStorage(d, "a16", padded * H * 2),
          act16: createStorage(d, "act16", padded * I * 2),
        };
        const rng = Rng.fromSeed(`moe block tcp ${y16} ${normed}`);
        const logits = makeLogits(rng, tokens, "spread");
        const x = rng.fillNormal(new Float32Array(tokens * H));
        const layer = makeLayer(rng, "f16");
        const residual = rng.fillNormal(new Float32Array(tokens * H));
        const normWeight = roundToF16InPlace(rng.fillUniform(new Float32Array(H), 0.5, 1.5));
        const made = [
          ...layerBuffers(gpu, "f16", logits, x, layer, residual),
          weightBuffer(gpu, "norm", normWeight, "f16"),
          uploadBuffer(d, "normed", new Float32Array(tokens * H).fill(NaN)),
        ];
        const [lg, xb, wgu, wd, res, nw, out] = made;
        block.setTokens(tokens);
        const kernels = submitByStage(gpu, block, {
          routerLogits: lg,
          x: xb,
          wGateUp: wgu,
          wDown: wd,
          residual: res,
          norm: normed ? { weight: nw, out } : undefined,
        });
        assert.ok(block.gemmVariant.includes("f16-tcp4x2"), block.gemmVariant);
        assert.is(block.gemmVariant.includes("-y16"), y16, block.gemmVariant);
        // (the cast of the token rows, then the GEMM, both in the gate/up stage; then down and
        // the combine)
        assert.equal(
          kernels.slice(2),
          ["moe_gemm_gate_up", "moe_gemm_gate_up", "moe_gemm_down", "moe_combine"],
          what,
        );
        const got = new Float32Array(await readBuffer(d, res, tokens * H * 4));
        // the tensor-core path's roundings: the token rows, the activations, and (y16) the rows
        const want = moeBlockRef(
          { routerLogits: logits, x, ...layer, residual },
          shape,
          tokens,
          { x: true, act: true, y: y16 },
        );
        // (an f16 row value the GPU's f32 sum and the reference's f64 one round apart: one f16
        // step, 2^-10 of the value, times the expert's weight; a wrong row is off by far more)
        const atol = y16 ? 2e-3 : 1e-4;
        assertClose(got, want, `${what}: residual`, 1e-3, atol);
        if (normed) {
          const gotNormed = new Float32Array(await readBuffer(d, out, tokens * H * 4));
          const wantNormed = rmsnormRef(want, normWeight, tokens, H, 1e-5);
          assertClose(gotNormed, wantNormed, `${what}: norm`, 1e-3, atol);
        }
        for (const m of made) m.destroy();
        block.destroy();
      }
    }
  } finally {
    for (const e of emulated) e.remove();
  }
});

test.run();
