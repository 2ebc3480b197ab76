/**
 * `deno task probe-sgmat`: what the f16 subgroup-matrix primitives cost on this adapter, and
 * whether several subgroups of one workgroup may each take their own matrices. Each timed
 * kernel loops `--iters` times over one kind of operation in workgroups of one subgroup of 32,
 * first one workgroup an SM (`--sms`), then `--per-sm` of them an SM; it prints ns per
 * iteration of one SM (the throughput figure) and of one subgroup alone (the latency figure).
 * README ("Writing a tensor-core kernel") quotes its H200 figures. Adapters without f16
 * subgroup matrices (lavapipe) get a message and exit 0.
 */
import { BufferUsage, describeGpu, hasSubgroupMatrix, MapMode, openGpu } from "../gpu/device.ts";
import { assembleWgsl, compileWgsl, WgslCompileError } from "../gpu/wgsl.ts";
import { f32ToF16Bits } from "../util/f16.ts";
import { parseArgs } from "./args.ts";
import { runCli } from "./run_cli.ts";
import process from "node:process";

/** The loop bodies, each between the shared set-up and the shared ending below. */
const BODIES: Record<string, { what: string; body: string }> = {
  mma8: {
    what: "8 independent 16x16x16 products (operands in registers)",
    body:
      `let l = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, 136u);
  let r = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, 16u, 136u);
  var a1 = acc; var a2 = acc; var a3 = acc; var a4 = acc; var a5 = acc; var a6 = acc; var a7 = acc;
  for (var it = 0u; it < ITERS; it++) {
    acc = subgroupMatrixMultiplyAccumulate(l, r, acc);
    a1 = subgroupMatrixMultiplyAccumulate(l, r, a1);
    a2 = subgroupMatrixMultiplyAccumulate(l, r, a2);
    a3 = subgroupMatrixMultiplyAccumulate(l, r, a3);
    a4 = subgroupMatrixMultiplyAccumulate(l, r, a4);
    a5 = subgroupMatrixMultiplyAccumulate(l, r, a5);
    a6 = subgroupMatrixMultiplyAccumulate(l, r, a6);
    a7 = subgroupMatrixMultiplyAccumulate(l, r, a7);
  }
  subgroupMatrixStore<row_major>(&wg.s, 0u, a1, 16u); subgroupMatrixStore<row_major>(&wg.s, 0u, a2, 16u);
  subgroupMatrixStore<row_major>(&wg.s, 0u, a3, 16u); subgroupMatrixStore<row_major>(&wg.s, 0u, a4, 16u);
  subgroupMatrixStore<row_major>(&wg.s, 0u, a5, 16u); subgroupMatrixStore<row_major>(&wg.s, 0u, a6, 16u);
  subgroupMatrixStore<row_major>(&wg.s, 0u, a7, 16u);`,
  },
  mma1: {
    what: "1 product depending on the one before (latency)",
    body:
      `let l = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, 136u);
  let r = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, 16u, 136u);
  for (var it = 0u; it < ITERS; it++) {
    acc = subgroupMatrixMultiplyAccumulate(l, r, acc);
  }`,
  },
  wgload: {
    what: "8 matrix loads from workgroup memory, 4 products",
    body: loads(
      "&wg.a",
      "(it % 4u) * 16u",
      ["0u", "32u", "16u", "48u", "64u", "32u", "8u", "40u"],
      "136u",
    ),
  },
  gload: {
    what: "8 matrix loads straight from storage (the data in cache), 4 products",
    body: loads(
      "&g",
      "((it * 7u + wid.x) % 64u) * 256u",
      ["0u", "4096u", "8192u", "12288u", "16384u", "20480u", "24576u", "28672u"],
      "16u",
    ),
  },
  sts16: {
    what: "64 f16 stores a lane to workgroup memory (4 KB), a barrier",
    body: `for (var it = 0u; it < ITERS; it++) {
    let b = (it % 2u) * 1024u + lid * 8u;
    for (var j = 0u; j < 8u; j++) {
      let at = b + (j * 128u) % 1024u;
      wg.a[at] = f16(f32(it)); wg.a[at + 1u] = f16(f32(j)); wg.a[at + 2u] = f16(1.0); wg.a[at + 3u] = f16(2.0);
      wg.a[at + 4u] = f16(3.0); wg.a[at + 5u] = f16(4.0); wg.a[at + 6u] = f16(5.0); wg.a[at + 7u] = f16(6.0);
    }
    workgroupBarrier();
  }
  acc = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, 136u), subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, 16u, 136u), acc);`,
  },
  stage12: {
    what: "the staged MoE gate/up step's stores: 12 words a lane as f16 (6 KB), a barrier",
    body: stagedStep(true, false),
  },
  stage12r: {
    what: "the same stores, each row group's 8 f16 in a rotated order (distinct banks)",
    body: stagedStep(true, false, true),
  },
  step: {
    what: "the staged MoE gate/up step without its storage loads: stores, 12 loads, 8 products",
    body: stagedStep(true, true),
  },
  steprot: {
    what: "the same step with the rotated stores",
    body: stagedStep(true, true, true),
  },
  stepmma: {
    what: "the same step without its stores: 12 matrix loads, 8 products, 2 barriers",
    body: stagedStep(false, true),
  },
  barrier: {
    what: "a workgroup barrier (and one workgroup-memory read)",
    body: `var x = 0.0;
  for (var it = 0u; it < ITERS; it++) {
    x += f32(wg.a[(it + lid) % 2176u]);
    workgroupBarrier();
  }
  wg.s[lid] = x;
  acc = subgroupMatrixMultiplyAccumulate(subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 0u, 136u), subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&wg.a, 16u, 136u), acc);`,
  },
};

/**
 * The staged MoE gate/up step (moe_gemm_gate_up_tcs.wgsl) without its storage loads: a lane's
 * 12 words (runtime values) stored to 32 weight rows and 16 rows of a as f16, 72 apart (lanes
 * lid / 8 rows, lid % 8 words; `rotate`: each row group starts at another f16 of the word, so a
 * store instruction's lanes hit distinct banks), a barrier, then unless `stores` only: the
 * step's 12 matrix loads and 8 products (two chains of 4), and a barrier.
 */
function stagedStep(stage: boolean, products: boolean, rotate = false): string {
  // word q of a row group's rotation (constant component indices: a vector indexed at run time
  // went to local memory on the H200)
  const comp = "xyzw";
  const word = (v: string, q: number) =>
    rotate
      ? `select(select(${v}.${comp[q]}, ${v}.${comp[(q + 1) % 4]}, lr == 1u), select(${v}.${
        comp[(q + 2) % 4]
      }, ${v}.${comp[(q + 3) % 4]}, lr == 3u), lr >= 2u)`
      : `${v}.${comp[q]}`;
  const put = (row: string, v: string) => {
    const lines = [];
    for (let j = 0; j < 8; j++) {
      const q = j >> 1;
      const at = rotate ? `2u * ((${q}u + lr) % 4u) + ${j % 2}u` : `${j}u`;
      lines.push(
        `wg.a[${row} * 72u + 8u * lk + ${at}] = bitcast<vec2<f16>>(${word(v, q)})[${j % 2}u];`,
      );
    }
    return lines.join(" ");
  };
  const lines = [
    "let lr = lid / 8u; let lk = lid % 8u;",
    "var u = acc;",
    "for (var it = 0u; it < ITERS; it++) {",
    "  let v = vec4<u32>(it, it ^ lid, it + lid, it * 3u);",
  ];
  if (stage) {
    lines.push(
      `  for (var i = 0u; i < 12u; i++) { let w = v + vec4<u32>(i); ${put("(4u * i + lr)", "w")} }`,
    );
  }
  lines.push("  workgroupBarrier();");
  if (products) {
    for (let c = 0; c < 4; c++) {
      lines.push(
        `  let a${c} = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.a, 2304u + ${
          16 * c
        }u, 72u);`,
        `  let g${c} = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, ${
          16 * c
        }u, 72u);`,
        `  let u${c} = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, col_major>(&wg.a, 1152u + ${
          16 * c
        }u, 72u);`,
        `  acc = subgroupMatrixMultiplyAccumulate(a${c}, g${c}, acc);`,
        `  u = subgroupMatrixMultiplyAccumulate(a${c}, u${c}, u);`,
      );
    }
    lines.push("  workgroupBarrier();");
  }
  lines.push("}", "subgroupMatrixStore<row_major>(&wg.s, 0u, u, 16u);");
  return lines.join("\n  ");
}

/** A loop of 4 (left, right) matrix loads from `src` at base + each offset, 4 products. */
function loads(src: string, base: string, offs: readonly string[], stride: string): string {
  const lines = ["for (var it = 0u; it < ITERS; it++) {", `    let o = ${base};`];
  for (let i = 0; i < 4; i++) {
    const major = i < 2 ? "col_major" : "row_major";
    lines.push(
      `    let l${i} = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(${src}, o + ${
        offs[2 * i]
      }, ${stride});`,
      `    let r${i} = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, ${major}>(${src}, o + ${
        offs[2 * i + 1]
      }, ${stride});`,
    );
  }
  for (let i = 0; i < 4; i++) {
    lines.push(`    acc = subgroupMatrixMultiplyAccumulate(l${i}, r${i}, acc);`);
  }
  lines.push("  }");
  return lines.join("\n");
}

const HEAD = `enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
`;

function timedKernel(body: string, iters: number): string {
  return `${HEAD}const ITERS: u32 = ${iters}u;
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
${body.includes("&g,") ? "@group(0) @binding(1) var<storage, read> g: array<f16>;" : ""}
struct Wg { a: array<f16, 3456>, s: array<f32, 256> }
var<workgroup> wg: Wg;
@compute @workgroup_size(32)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  for (var i = lid; i < 16u * 136u; i += 32u) { wg.a[i] = f16(f32(i % 7u) * 0.01); }
  workgroupBarrier();
  var acc = subgroup_matrix_result<f32, 16, 16>();
  ${body}
  subgroupMatrixStore<row_major>(&wg.s, 0u, acc, 16u);
  workgroupBarrier();
  if (lid == 0u) { out[wid.x] = wg.s[3]; }
}`;
}

/** 4 subgroups, each multiplying its own block of `a` (offsets differ between subgroups). */
const SEVERAL = `
@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
struct Wg { wa: array<f16, 1024> }
var<workgroup> wg: Wg;
@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32) {
  let sg = lid / 32u;
  for (var i = lid; i < 1024u; i += 128u) { wg.wa[i] = a[i]; }
  workgroupBarrier();
  let l = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>, row_major>(&wg.wa, sg * 256u, 16u);
  let r = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>, row_major>(&b, 0u, 16u);
  var acc = subgroup_matrix_result<f32, 16, 16>();
  acc = subgroupMatrixMultiplyAccumulate(l, r, acc);
  subgroupMatrixStore<row_major>(&c, sg * 256u, acc, 16u);
}`;

await runCli(async () => {
  const opts = parseArgs(
    "probe-sgmat",
    "Costs of the f16 subgroup-matrix primitives, and several subgroups a workgroup.",
    {
      iters: { type: "number", integer: true, min: 16, default: 32768, help: "loop iterations" },
      sms: { type: "number", integer: true, min: 1, default: 132, help: "SMs of the GPU" },
      perSm: {
        type: "number",
        integer: true,
        min: 1,
        default: 16,
        help: "workgroups an SM in the throughput run",
      },
      warmupS: {
        type: "number",
        min: 0,
        default: 2,
        help: "seconds of untimed products first (clocks up: on a fresh H200 the first kernel " +
          "timed 7x slower without)",
      },
    },
    process.argv.slice(2),
  );
  const gpu = await openGpu();
  console.log(describeGpu(gpu));
  if (!hasSubgroupMatrix(gpu, "f16", "f32", 16, 16, 16) || gpu.subgroupMaxSize !== 32) {
    console.log(
      "probe-sgmat: this adapter has no f16 16x16x16 subgroup matrices on 32-wide subgroups",
    );
    gpu.destroy();
    return 0;
  }
  const dev = gpu.device;
  const compile = async (code: string, label: string) => {
    try {
      const module = await compileWgsl(dev, assembleWgsl([{ file: label, text: code }]), label);
      return {
        pipeline: dev.createComputePipeline({
          layout: "auto",
          compute: { module, entryPoint: "main" },
        }),
      };
    } catch (err) {
      if (!(err instanceof WgslCompileError)) throw err;
      // the first message, without its place
      return { error: err.messages[0].replace(/^\s*.*?:\d+:\d+: /, "").split("\n")[0] };
    }
  };
  const storage = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;

  // several subgroups a workgroup: refused without the diagnostic, exact with it
  const refused = await compile(HEAD + SEVERAL, "several subgroups");
  console.log(`several subgroups, uniformity check on: ${refused.error ?? "compiles"}`);
  const several = await compile(
    HEAD + "diagnostic(off, chromium.subgroup_matrix_uniformity);\n" + SEVERAL,
    "several subgroups, check off",
  );
  if (!several.pipeline) {
    console.log(`several subgroups, check off: ${several.error}`);
  } else {
    // quarters in [-1.5, 1.5]: exact in f16, and their products' sums exact in f32
    const A = new Float32Array(1024).map((_, i) => ((i * 7919) % 13) / 4 - 1.5);
    const B = new Float32Array(256).map((_, i) => ((i * 104729) % 11) / 4 - 1.25);
    const bufs = [f32ToF16Bits(A), f32ToF16Bits(B)].map((d) => {
      const buf = dev.createBuffer({ size: d.byteLength, usage: storage });
      dev.queue.writeBuffer(buf, 0, d);
      return buf;
    });
    const cBuf = dev.createBuffer({ size: 4096, usage: storage });
    const bg = dev.createBindGroup({
      layout: several.pipeline.getBindGroupLayout(0),
      entries: [...bufs, cBuf].map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
    const read = dev.createBuffer({
      size: 4096,
      usage: BufferUsage.MAP_READ | BufferUsage.COPY_DST,
    });
    const enc = dev.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(several.pipeline);
    pass.setBindGroup(0, bg);
    pass.dispatchWorkgroups(1);
    pass.end();
    enc.copyBufferToBuffer(cBuf, 0, read, 0, 4096);
    dev.queue.submit([enc.finish()]);
    await read.mapAsync(MapMode.READ);
    const C = new Float32Array(read.getMappedRange().slice(0));
    read.unmap();
    let maxErr = 0;
    for (let s = 0; s < 4; s++) {
      for (let i = 0; i < 16; i++) {
        for (let j = 0; j < 16; j++) {
          let ref = 0;
          for (let k = 0; k < 16; k++) ref += A[s * 256 + i * 16 + k] * B[k * 16 + j];
          maxErr = Math.max(maxErr, Math.abs(ref - C[s * 256 + i * 16 + j]));
        }
      }
    }
    console.log(
      `several subgroups, check off: compiles; 4 subgroups' products, max |error| ${maxErr}`,
    );
  }

  // the timed loops
  const g = dev.createBuffer({ size: 196608, usage: storage });
  const out = dev.createBuffer({ size: opts.sms * opts.perSm * 4, usage: storage });
  await warmUp(dev, compile, opts.warmupS, opts.sms * opts.perSm, out);
  console.log(
    `\nns an iteration (${opts.iters} iterations; one SM at ${opts.perSm} workgroups an SM; one subgroup alone)`,
  );
  for (const [name, { what, body }] of Object.entries(BODIES)) {
    const k = await compile(timedKernel(body, opts.iters), name);
    if (!k.pipeline) {
      console.log(`${name.padEnd(8)} does not compile: ${k.error}`);
      continue;
    }
    const bg = dev.createBindGroup({
      layout: k.pipeline.getBindGroupLayout(0),
      entries: [out, ...(body.includes("&g,") ? [g] : [])].map((buffer, binding) => ({
        binding,
        resource: { buffer },
      })),
    });
    const ms = async (workgroups: number, reps: number) => {
      const t0 = performance.now();
      const enc = dev.createCommandEncoder();
      const pass = enc.beginComputePass();
      pass.setPipeline(k.pipeline!);
      pass.setBindGroup(0, bg);
      for (let i = 0; i < reps; i++) pass.dispatchWorkgroups(workgroups);
      pass.end();
      dev.queue.submit([enc.finish()]);
      await dev.queue.onSubmittedWorkDone();
      return (performance.now() - t0) / reps;
    };
    await ms(opts.sms * opts.perSm, 1);
    const alone = (await ms(opts.sms, 3)) * 1e6 / opts.iters;
    const full = (await ms(opts.sms * opts.perSm, 3)) * 1e6 / opts.iters / opts.perSm;
    console.log(
      `${name.padEnd(8)} ${full.toFixed(2).padStart(8)} an SM ${
        alone.toFixed(1).padStart(8)
      } alone  ${what}`,
    );
  }
  gpu.destroy();
  return 0;
});

/** Runs the 8-product loop for `seconds` (until the GPU's clocks are up). */
async function warmUp(
  dev: GPUDevice,
  compile: (code: string, label: string) => Promise<{ pipeline?: GPUComputePipeline }>,
  seconds: number,
  workgroups: number,
  out: GPUBuffer,
): Promise<void> {
  const k = await compile(timedKernel(BODIES.mma8.body, 1024), "warm-up");
  if (!k.pipeline || seconds <= 0) return;
  const bg = dev.createBindGroup({
    layout: k.pipeline.getBindGroupLayout(0),
    entries: [{ binding: 0, resource: { buffer: out } }],
  });
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const enc = dev.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(k.pipeline);
    pass.setBindGroup(0, bg);
    for (let i = 0; i < 20; i++) pass.dispatchWorkgroups(workgroups);
    pass.end();
    dev.queue.submit([enc.finish()]);
    await dev.queue.onSubmittedWorkDone();
  }
}
