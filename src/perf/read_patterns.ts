/**
 * Loads-only kernels that read a layer's MoE expert weights the way the staged decode GEMMs
 * (moe_gemm_*_tcs) do, to tell the memory system's part of their time from their own:
 * one subgroup of 32 a workgroup, a grid of column tiles x experts, each lane loading WORDS
 * words of 16 bytes a step with a barrier a step, the words of the next step loaded before
 * this step's are used (then folded into an XOR each lane writes once). A pattern says where
 * a lane's load i of step s lands; a config adds a workgroup array (so that an SM holds as many
 * workgroups as the real kernel's workgroup memory allows), 16 words a lane a step, 4-byte
 * "touch" loads of the words some steps ahead (meant to bring them into L2 early), or staging:
 * each step's words written to workgroup memory and read back before they are folded in, as 8
 * f16 stores and loads a word (`sh`: how the staged kernels must write them, a subgroup matrix
 * loading only from an array of f16) or as one 16-byte store and load (`sw`), so that the
 * staging's cost can be told from the loads'. Two more knobs tell whether the barriers hold
 * loads back: `r2` keeps two register sets of words (even and odd steps), each loaded again as
 * soon as it is used, so that two steps' loads are in flight (the gate/up GEMM's form), and `nb`
 * leaves out the barriers (one subgroup a workgroup: its lanes' staging stays in order in
 * practice, though WGSL promises nothing without a barrier; a probe, not a kernel). `aN` has each
 * workgroup first load a few words of the workgroup N places on, so that the address
 * translations of a buffer read cold (probe-reads --layers) are walked before they are needed.
 *
 * Every word of the matrix is read exactly once without touch loads, so the XOR of all the
 * lanes' results equals the XOR of the buffer's words (readPatternXor): the check that a
 * pattern's addresses cover the matrix.
 */
import type { Gpu } from "../gpu/device.ts";
import { assembleWgsl, compileWgsl } from "../gpu/wgsl.ts";

/** The expert matrix a pattern reads: rows x words of 16 bytes, `experts` of them. */
export interface ExpertMatrix {
  readonly experts: number;
  readonly rows: number;
  readonly words: number;
}

/** Qwen3-30B-A3B's gate/up ([1536, 2048] f16 an expert) and down ([2048, 768]) weights. */
export const QWEN3_MOE_MATRICES = {
  gu: { rows: 1536, words: 256 },
  dn: { rows: 2048, words: 96 },
} as const;

export interface ReadPattern {
  readonly name: string;
  readonly what: string;
  readonly matrix: "gu" | "dn";
  /** WGSL: word index of load i (0..7) at step s for lane lid of tile t of expert e. */
  readonly addr: (m: ExpertMatrix) => string;
}

/** Rows a staged gate/up workgroup reads: 16 gate rows, then the 16 up rows `inter` below. */
const guRow = (inter: number) =>
  `select(${inter}u + t * 16u + 4u * i + lid / 8u - 16u, t * 16u + 4u * i + lid / 8u, 4u * i + lid / 8u < 16u)`;

export const READ_PATTERNS: readonly ReadPattern[] = [
  {
    name: "gu.rows",
    what: "gate/up as stored: 32 rows x 128 bytes a step (16 gate, 16 up), rows 4 KB apart",
    matrix: "gu",
    addr: (m) => `(e * ${m.rows}u + ${guRow(m.rows / 2)}) * ${m.words}u + s * 8u + lid % 8u`,
  },
  {
    name: "gu.runs256",
    what: "gate/up as stored, 16 rows x 256 bytes a step",
    matrix: "gu",
    addr: (m) =>
      `(e * ${m.rows}u + t * 32u + (s / ${
        m.words / 16
      }u) * 16u + 2u * i + lid / 16u) * ${m.words}u + (s % ${m.words / 16}u) * 16u + lid % 16u`,
  },
  {
    name: "gu.runs512",
    what: "gate/up as stored, 8 rows x 512 bytes a step",
    matrix: "gu",
    addr: (m) =>
      `(e * ${m.rows}u + t * 32u + (s / ${m.words / 32}u) * 8u + i) * ${m.words}u + (s % ${
        m.words / 32
      }u) * 32u + lid`,
  },
  {
    name: "gu.tiles",
    what: "gate/up stored in 2 KB tiles (16 rows x 64 of k, a band's tiles consecutive): the " +
      "gate tile, then the up tile a step",
    matrix: "gu",
    addr: (m) =>
      `select(((e * ${m.rows / 16}u + ${m.rows / 32}u + t) * ${
        m.words / 8
      }u + s) * 128u + (i - 4u) * 32u + lid, ((e * ${m.rows / 16}u + t) * ${
        m.words / 8
      }u + s) * 128u + i * 32u + lid, i < 4u)`,
  },
  {
    name: "dn.rows",
    what: "down as stored: 32 rows x 128 bytes a step, rows 1.5 KB apart",
    matrix: "dn",
    addr: (m) => `(e * ${m.rows}u + t * 32u + 4u * i + lid / 8u) * ${m.words}u + s * 8u + lid % 8u`,
  },
  {
    name: "dn.tiles",
    what: "down stored in 2 KB tiles (16 rows x 64 of k, a band's tiles consecutive, as " +
      "--moe-expert-tiles stores them): a tile of each of two bands a step",
    matrix: "dn",
    addr: (m) =>
      `((e * ${m.rows / 16}u + 2u * t + i / 4u) * ${
        m.words / 8
      }u + s) * 128u + (i % 4u) * 32u + lid`,
  },
  {
    name: "dn.tiles32",
    what:
      "down stored in 4 KB tiles (32 rows x 64 of k, a band's tiles consecutive): a tile a step",
    matrix: "dn",
    addr: (m) => `((e * ${m.rows / 32}u + t) * ${m.words / 8}u + s) * 256u + i * 32u + lid`,
  },
];

/** Workgroups along x an expert: each takes 32 rows (the staged GEMMs' 16 gate and 16 up, or
 * 32 down rows). */
function tilesOf(m: ExpertMatrix): number {
  return m.rows / 32;
}

/** Steps of 8 words a lane a workgroup walks: its 32 rows' words, 8 words x 32 lanes a step. */
function stepsOf(m: ExpertMatrix): number {
  return m.words / 8;
}

/** What a run adds to a pattern's loads. */
export interface ReadConfig {
  /** Bytes of a dummy workgroup array (0: none). */
  readonly workgroupBytes: number;
  /** Words of 16 bytes a lane a step: 8, or 16 (two of the pattern's steps at once). */
  readonly words: 8 | 16;
  /** Touch loads of the words this many steps ahead (0: none). */
  readonly touch: number;
  /**
   * Each step's words staged through workgroup memory before use: "sh" as 8 f16 a word (the
   * staged kernels' put8a / put8b), "sw" as one vec4<u32> a word, "" not at all.
   */
  readonly stage?: "" | "sh" | "sw";
  /** Two register sets (even and odd steps), each loaded two steps ahead and never copied. */
  readonly sets2?: boolean;
  /** No barriers (one subgroup a workgroup). */
  readonly noBarrier?: boolean;
  /**
   * Workgroups ahead (0: none): at its start each workgroup loads the first and last words of
   * each of its 8 load slots for the workgroup this many places on in the grid's linear order,
   * folded in where they cannot change the result (the matrix's words are never 0), so that
   * the address translations of what that workgroup reads are walked before it starts.
   */
  readonly ahead?: number;
}

export function configLabel(c: ReadConfig): string {
  return `wg${Math.round(c.workgroupBytes / 1024)}k.w${c.words}${c.touch ? `.t${c.touch}` : ""}${
    c.stage ? `.${c.stage}` : ""
  }${c.sets2 ? ".r2" : ""}${c.noBarrier ? ".nb" : ""}${c.ahead ? `.a${c.ahead}` : ""}`;
}

/**
 * Parses `wg8k.w16.t3`-style labels (each part optional; defaults wg0k, w8, no touch, no
 * staging, one register set, barriers; `sh` / `sw` stage the words, `r2` and `nb` as
 * ReadConfig says).
 */
export function parseConfig(label: string): ReadConfig {
  let workgroupBytes = 0, words: 8 | 16 = 8, touch = 0;
  let stage: "" | "sh" | "sw" = "";
  let sets2 = false, noBarrier = false, ahead = 0;
  for (const part of label.split(".").filter((p) => p)) {
    let m: RegExpExecArray | null;
    if ((m = /^wg(\d+)k$/.exec(part))) workgroupBytes = Number(m[1]) * 1024;
    else if ((m = /^w(8|16)$/.exec(part))) words = Number(m[1]) as 8 | 16;
    else if ((m = /^t(\d+)$/.exec(part))) touch = Number(m[1]);
    else if (part === "sh" || part === "sw") stage = part;
    else if (part === "r2") sets2 = true;
    else if (part === "nb") noBarrier = true;
    else if ((m = /^a(\d+)$/.exec(part))) ahead = Number(m[1]);
    else {
      throw new Error(
        `read config '${label}': '${part}' is not wgNk, w8, w16, tN, sh, sw, r2, nb or aN`,
      );
    }
  }
  if (workgroupBytes > 40 * 1024) {
    throw new Error(`read config '${label}': at most 40 KB of workgroup array`);
  }
  if (sets2 && touch) throw new Error(`read config '${label}': r2 takes no touch loads`);
  return {
    workgroupBytes,
    words,
    touch,
    ...(stage ? { stage } : {}),
    ...(sets2 ? { sets2 } : {}),
    ...(noBarrier ? { noBarrier } : {}),
    ...(ahead ? { ahead } : {}),
  };
}

/** `workgroupBarrier();`, or nothing under `nb`. */
function barrierWgsl(c: ReadConfig): string {
  return c.noBarrier ? "" : "workgroupBarrier();";
}

/**
 * The WGSL that folds the register set `set` (c.words words a lane) into acc, staged through
 * workgroup memory first where the config says.
 */
function useWgsl(c: ReadConfig, set: string): string {
  return c.stage
    ? stageWgsl(c, set)
    : `for (var i = 0u; i < ${c.words}u; i++) { acc ^= ${set}[i]; }`;
}

/** The WGSL that stages `set` (c.words words a lane) and folds the words read back into acc. */
function stageWgsl(c: ReadConfig, set: string): string {
  const n = c.words;
  if (c.stage === "sw") {
    return `for (var i = 0u; i < ${n}u; i++) { wg.sw[i * 32u + lid] = ${set}[i]; }
    ${barrierWgsl(c)}
    for (var i = 0u; i < ${n}u; i++) { acc ^= wg.sw[i * 32u + lid]; }`;
  }
  const put = [0, 1, 2, 3].map((j) => {
    const comp = "xyzw"[j];
    return `let h${j} = bitcast<vec2<f16>>(v.${comp}); wg.sh[b + ${2 * j}u] = h${j}.x; ` +
      `wg.sh[b + ${2 * j + 1}u] = h${j}.y;`;
  }).join("\n      ");
  const get = [0, 1, 2, 3].map((j) =>
    `bitcast<u32>(vec2<f16>(wg.sh[b + ${2 * j}u], wg.sh[b + ${2 * j + 1}u]))`
  ).join(", ");
  return `for (var i = 0u; i < ${n}u; i++) {
      let v = ${set}[i];
      let b = 8u * (i * 32u + lid);
      ${put}
    }
    ${barrierWgsl(c)}
    for (var i = 0u; i < ${n}u; i++) {
      let b = 8u * (i * 32u + lid);
      acc ^= vec4<u32>(${get});
    }`;
}

/** The WGSL of one pattern under one config. */
export function readPatternWgsl(p: ReadPattern, m: ExpertMatrix, c: ReadConfig): string {
  const steps = (stepsOf(m) * 8) / c.words;
  if (!Number.isInteger(steps) || steps < 1) {
    throw new Error(`${p.name}: ${stepsOf(m)} steps of 8 words do not make steps of ${c.words}`);
  }
  const padWords = Math.floor(c.workgroupBytes / 4);
  const pad = padWords >= 32;
  const per = c.words / 8;
  const load = (set: string, step: string) =>
    `for (var i = 0u; i < ${c.words}u; i++) { ${set}[i] = w[at(e, t, lid, i % 8u, (${step}) * ${per}u + i / 8u)]; }`;
  const touch = c.touch
    ? `let st = min(s + ${c.touch}u, ${steps - 1}u);
    for (var i = 0u; i < 8u; i++) { tacc ^= tv[i]; tv[i] = w[at(e, t, lid, i, st * ${per}u)].x; }`
    : "";
  const members = [
    pad ? `pad: array<u32, ${padWords}u>,` : "",
    c.stage === "sh" ? `sh: array<f16, ${8 * 32 * c.words}u>,` : "",
    c.stage === "sw" ? `sw: array<vec4<u32>, ${32 * c.words}u>,` : "",
  ].filter((x) => x);
  return `${c.stage === "sh" ? "enable f16;" : ""}
@group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
${members.length ? `struct Wg { ${members.join(" ")} }\nvar<workgroup> wg: Wg;` : ""}
fn at(e: u32, t: u32, lid: u32, i: u32, s: u32) -> u32 { return ${p.addr(m)}; }
@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let e = wid.y;
  let t = wid.x;
  ${pad ? "wg.pad[lid] = 0u;" : ""}
  ${aheadWgsl(c, m, steps)}
  ${c.sets2 ? sets2Loop(c, steps, load) : oneSetLoop(c, steps, load, touch)}
  var r = acc.x ^ acc.y ^ acc.z ^ acc.w ^ tacc;
  ${c.ahead ? "r ^= select(0u, 1u, ahead_word == 0u);" : ""}
  ${pad ? "r ^= wg.pad[(lid + 1u) % 32u];" : ""}
  out[(e * ${tilesOf(m)}u + t) * 32u + lid] = r;
}`;
}

/**
 * The `aN` loads: lanes 0-7 the first word of load slot `lid` of the workgroup c.ahead places on
 * (x fastest), lanes 8-15 that slot's word of the last step; the others none.
 */
function aheadWgsl(c: ReadConfig, m: ExpertMatrix, steps: number): string {
  if (!c.ahead) return "";
  const tiles = tilesOf(m);
  return `var ahead_word = 1u;
  let ahead = e * ${tiles}u + t + ${c.ahead}u;
  if (lid < 16u && ahead < ${tiles * m.experts}u) {
    let slot = lid % 8u;
    let step = select(0u, ${steps * (c.words / 8) - 1}u, lid >= 8u);
    ahead_word = w[at(ahead / ${tiles}u, ahead % ${tiles}u, 0u, slot, step)].x;
  }`;
}

/**
 * The step loop with one register set: the next step's words loaded before this step's are
 * used, then moved into `cur` after the barrier.
 */
function oneSetLoop(
  c: ReadConfig,
  steps: number,
  load: (set: string, step: string) => string,
  touch: string,
): string {
  return `var cur = array<vec4<u32>, ${c.words}>();
  var nx = array<vec4<u32>, ${c.words}>();
  ${load("cur", "0u")}
  var acc = vec4<u32>(0u);
  var tv = array<u32, 8>();
  var tacc = 0u;
  for (var s = 0u; s < ${steps}u; s++) {
    ${touch}
    if (s + 1u < ${steps}u) {
      ${load("nx", "s + 1u")}
    }
    ${useWgsl(c, "cur")}
    ${barrierWgsl(c)}
    cur = nx;
  }`;
}

/**
 * The step loop with two register sets (`r2`): set x holds the even steps, y the odd ones, and
 * each is loaded again (two steps on) right after its words are used.
 */
function sets2Loop(
  c: ReadConfig,
  steps: number,
  load: (set: string, step: string) => string,
): string {
  return `var x = array<vec4<u32>, ${c.words}>();
  var y = array<vec4<u32>, ${c.words}>();
  ${load("x", "0u")}
  if (${steps}u > 1u) {
    ${load("y", "1u")}
  }
  var acc = vec4<u32>(0u);
  let tacc = 0u;
  for (var s = 0u; s < ${steps}u; s += 2u) {
    ${useWgsl(c, "x")}
    ${barrierWgsl(c)}
    if (s + 2u < ${steps}u) {
      ${load("x", "s + 2u")}
    }
    if (s + 1u < ${steps}u) {
      ${useWgsl(c, "y")}
      ${barrierWgsl(c)}
      if (s + 3u < ${steps}u) {
        ${load("y", "s + 3u")}
      }
    }
  }`;
}

/** A compiled pattern: its pipeline and grid. */
export interface ReadPatternPipeline {
  readonly pipeline: GPUComputePipeline;
  readonly grid: readonly [number, number];
  /** Lanes that write a result (the `out` buffer's u32 count). */
  readonly lanes: number;
  /** Bytes of weights the pattern reads (once each). */
  readonly bytes: number;
}

export async function compileReadPattern(
  gpu: Gpu,
  p: ReadPattern,
  m: ExpertMatrix,
  c: ReadConfig,
): Promise<ReadPatternPipeline> {
  const label = `${p.name}.${configLabel(c)}`;
  const module = await compileWgsl(
    gpu.device,
    assembleWgsl([{ file: label, text: readPatternWgsl(p, m, c) }]),
    label,
  );
  const pipeline = gpu.device.createComputePipeline({
    label,
    layout: "auto",
    compute: { module, entryPoint: "main" },
  });
  const tiles = tilesOf(m);
  return {
    pipeline,
    grid: [tiles, m.experts],
    lanes: tiles * m.experts * 32,
    bytes: m.experts * m.rows * m.words * 16,
  };
}

/** XOR of every u32 of `words` (what the lanes' results XOR to without touch loads). */
export function readPatternXor(words: Uint32Array): number {
  let x = 0;
  for (let i = 0; i < words.length; i++) x ^= words[i];
  return x >>> 0;
}

/**
 * A pretouch: one 4-byte load every `strideBytes` of a `bytes`-long weights buffer, one lane a
 * load, written nowhere unless it equals a value no word holds. Run just before a pattern reads
 * the buffer, it tells whether the pattern's first read of a buffer it has not touched for a
 * while pays for something a sparse touch brings in (address translations: one load a page),
 * against the same read of a buffer it has just read.
 */
export interface Pretouch {
  readonly pipeline: GPUComputePipeline;
  readonly grid: readonly [number, number];
  readonly loads: number;
}

export async function compilePretouch(
  gpu: Gpu,
  bytes: number,
  strideBytes: number,
): Promise<Pretouch> {
  if (!Number.isInteger(strideBytes) || strideBytes < 4 || strideBytes % 4 !== 0) {
    throw new Error(`pretouch stride ${strideBytes} bytes must be a positive multiple of 4`);
  }
  const loads = Math.ceil(bytes / strideBytes);
  const label = `pretouch.${strideBytes}`;
  const text = `@group(0) @binding(0) var<storage, read> w: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let n = g.x + g.y * 65535u * 64u;
  if (n < ${loads}u) {
    let v = w[n * ${strideBytes / 4}u];
    // (the words readPatternWgsl's buffers hold have both halves' exponents nonzero)
    if (v == 0u) { out[0] = n; }
  }
}`;
  const module = await compileWgsl(gpu.device, assembleWgsl([{ file: label, text }]), label);
  const pipeline = gpu.device.createComputePipeline({
    label,
    layout: "auto",
    compute: { module, entryPoint: "main" },
  });
  const workgroups = Math.ceil(loads / 64);
  return { pipeline, grid: [Math.min(workgroups, 65535), Math.ceil(workgroups / 65535)], loads };
}
