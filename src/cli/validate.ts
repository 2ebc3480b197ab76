/**
 * `deno task validate`: every kernel x case x variant on the present adapter against its
 * CPU reference, one row each with errors, tolerance, pass/fail, GPU time and throughput.
 * Exit code 1 on any failure, 2 when there is no adapter or an unknown kernel is named.
 */
import process from "node:process";
import { writeJsonAtomic } from "../util/atomic_file.ts";
import { describeGpu, openGpu } from "../gpu/device.ts";
import { paced } from "../gpu/event_pacing.ts";
import { kernelByName, KERNELS } from "../../kernels/index.ts";
import { unsupportedReason, type Variant } from "../../kernels/kernel.ts";
import type { KernelCase, KernelModule } from "../../kernels/case.ts";
import type { ParamFields } from "../../kernels/params.ts";
import { validateCase, type ValidationRow } from "../../kernels/validate.ts";
import { ReferencePool } from "../../kernels/reference_pool.ts";
import { InputCache, inputsKind } from "../../kernels/case_inputs.ts";
import { availableParallelism } from "node:os";
import { parseArgs, UsageError } from "./args.ts";
import { runCli } from "./run_cli.ts";
import { formatTable } from "../util/table.ts";
import { userPath } from "../util/user_path.ts";

const SPEC = {
  kernel: { type: "list", help: "only these kernels (comma-separated names)" },
  variant: { type: "list", help: "only these variants (f32, f16, f16-sg, f16-sgmat, ...)" },
  reps: {
    type: "number",
    integer: true,
    min: 0,
    help: "timed dispatches per row (default: 10 on a GPU, 2 on a CPU adapter)",
  },
  maxBytes: { type: "number", min: 0, help: "skip cases that move more bytes than this" },
  json: { type: "string", help: "also write the rows as JSON to this file" },
  noF16: { type: "boolean", default: false, help: "refuse shader-f16 (exercise the f32 fallback)" },
  noSubgroups: { type: "boolean", default: false, help: "refuse subgroups and subgroup matrices" },
  referenceWorkers: {
    type: "number",
    integer: true,
    min: 0,
    help: "threads computing CPU references ahead of the GPU (default: cores - 1, at most 8; " +
      "0: inline)",
  },
  caseTimeout: {
    type: "number",
    min: 0,
    help: "seconds one case may take before it is reported as hung and validate stops " +
      "(default: 120 on a GPU, 900 on a CPU adapter)",
  },
} as const;

/** A case that gave no result in time (a kernel that never ends keeps the GPU busy). */
class CaseTimeout extends Error {}

/** `work`, or a CaseTimeout after `ms`. */
function withTimeout<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new CaseTimeout(
            `no result after ${ms / 1000} s: the kernel may never end on this adapter (${what})`,
          ),
        ),
      ms,
    );
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

await runCli(async () => {
  const opts = parseArgs(
    "validate",
    "Validates every WGSL kernel against its CPU reference.",
    SPEC,
    process.argv.slice(2),
  );
  const modules = opts.kernel
    ? opts.kernel.map((n) => {
      try {
        return kernelByName(n);
      } catch (e) {
        throw new UsageError((e as Error).message);
      }
    })
    : KERNELS;
  if (opts.variant) {
    const known = new Set(modules.flatMap((m) => m.spec.variants.map((v) => v.name)));
    const unknown = opts.variant.filter((v) => !known.has(v));
    if (unknown.length > 0) {
      throw new UsageError(
        `--variant: ${unknown.join(", ")} is no variant of ${
          opts.kernel ? opts.kernel.join(", ") : "any kernel"
        } (known: ${[...known].join(", ")})`,
      );
    }
  }
  const gpu = await openGpu({ noF16: opts.noF16, noSubgroups: opts.noSubgroups });
  const reps = opts.reps ?? (gpu.adapter.type === "cpu" ? 2 : 10);
  console.log(describeGpu(gpu));
  console.log("");
  const rows: ValidationRow[] = [];
  const notes: string[] = [];
  const t0 = performance.now();
  // The JSON report is rewritten (atomically) after every row: complete=false until the end.
  const writeReport = (complete: boolean) =>
    writeJsonAtomic(userPath(opts.json!), {
      adapter: gpu.adapter,
      features: [...gpu.features],
      subgroupMatrixConfigs: gpu.subgroupMatrixConfigs,
      complete,
      rows,
    });
  const caseMs = (opts.caseTimeout ?? (gpu.adapter.type === "cpu" ? 900 : 120)) * 1000;
  // Every row to run, in order: a kernel's cases, each on every variant, so a case's inputs
  // are drawn once per storage type (InputCache). The reference of each (kernel, case, dtype)
  // is requested from the worker pool up front, so CPU references run ahead of the GPU.
  const plan: { module: KernelModule; variant: Variant; kcase: KernelCase<ParamFields> }[] = [];
  const inputs = new InputCache();
  for (const module of modules) {
    const variants = module.spec.variants.filter((variant) => {
      if (opts.variant && !opts.variant.includes(variant.name)) return false;
      const reason = unsupportedReason(gpu, variant);
      if (reason) notes.push(`${module.spec.name}/${variant.name}: not run (${reason})`);
      return reason === null;
    });
    for (const kcase of module.cases) {
      for (const variant of variants) {
        if (kcase.variants && !kcase.variants.includes(variant.name)) continue;
        if (opts.maxBytes !== undefined && kcase.bytes(variant) > opts.maxBytes) continue;
        plan.push({ module, variant, kcase });
        inputs.expect(module, kcase, variant);
      }
    }
  }
  const pool = ReferencePool.create(
    opts.referenceWorkers ?? Math.min(8, availableParallelism() - 1),
  );
  for (const { module, variant, kcase } of plan) {
    pool?.request(
      { kernel: module.spec.name, caseIndex: module.cases.indexOf(kcase), variant: variant.name },
      kcase.label,
      inputsKind(variant),
    );
  }
  let hung: ValidationRow | null = null;
  try {
    for (const { module, variant, kcase } of plan) {
      let timedOut = false;
      try {
        // Taken first, so a row that fails below still counts as the inputs' use.
        const caseInputs = inputs.take(module, kcase, variant);
        // The case's bound is for the GPU: wait for its CPU reference outside it.
        await pool?.ready(module.spec.name, kcase.label, inputsKind(variant));
        rows.push(
          await withTimeout(
            validateCase(gpu, module, kcase, variant, {
              reps,
              references: pool ?? undefined,
              inputs: caseInputs,
            }),
            caseMs,
            "--case-timeout raises the bound",
          ),
        );
      } catch (err) {
        timedOut = err instanceof CaseTimeout;
        rows.push({
          kernel: module.spec.name,
          case: kcase.label,
          variant: variant.name,
          maxAbs: NaN,
          maxRel: NaN,
          atol: 0,
          rtol: 0,
          pass: false,
          bad: -1,
          firstBad: (err as Error).message,
          gpuUs: null,
          gbps: null,
          tflops: null,
          bytes: kcase.bytes(variant),
          flops: kcase.flops,
        });
      }
      // Read or not (a row can fail before reading it), this row is done with its reference.
      pool?.release(module.spec.name, kcase.label, inputsKind(variant));
      const r = rows[rows.length - 1];
      const line = `${rows.length} rows, last: ${r.kernel} ${r.case} ${r.variant} ${
        r.pass ? "pass" : "FAIL"
      } ${r.gpuUs === null ? "" : r.gpuUs.toFixed(1) + " µs"} (${
        ((performance.now() - t0) / 1000).toFixed(0)
      } s)`;
      // On a terminal one line rewritten; in a log one line per row, so a run that is
      // stopped (or hangs in a kernel) still says how far it got.
      process.stderr.write(process.stderr.isTTY ? `\r${line}`.padEnd(100) : `${line}\n`);
      if (opts.json) writeReport(false);
      if (timedOut) {
        hung = r;
        break;
      }
    }
  } finally {
    pool?.close();
  }
  if (process.stderr.isTTY) process.stderr.write("\r".padEnd(101) + "\r");
  console.log(formatTable(
    [
      "kernel",
      "shape",
      "variant",
      "max abs",
      "max rel",
      "tolerance",
      "result",
      "GPU µs",
      "GB/s",
      "TFLOP/s",
    ],
    rows.map((r) => [
      r.kernel,
      r.case,
      r.variant,
      sci(r.maxAbs),
      sci(r.maxRel),
      `${sci(r.atol)}+${sci(r.rtol)}·|ref|`,
      r.pass ? "pass" : "FAIL",
      r.gpuUs === null ? "-" : r.gpuUs.toFixed(1),
      r.gbps === null ? "-" : r.gbps.toFixed(r.gbps < 10 ? 2 : 0),
      r.tflops === null || r.flops === 0 ? "-" : r.tflops.toFixed(r.tflops < 1 ? 3 : 1),
    ]),
  ));
  if (hung) {
    notes.push(
      `stopped at ${hung.kernel} ${hung.case} ${hung.variant}: it gave no result, so the GPU may ` +
        `still be running it; the cases after it were not run`,
    );
  }
  for (const n of notes) console.log(n);
  const failed = rows.filter((r) => !r.pass);
  for (const r of failed) {
    console.log(`FAIL ${r.kernel} ${r.case} ${r.variant}: ${r.firstBad ?? ""}`);
  }
  console.log(
    `\n${rows.length - failed.length} of ${rows.length} rows pass on ${gpu.adapter.description}`,
  );
  if (opts.json) writeReport(hung === null);
  // A hung kernel keeps the queue busy. A case that was only slow finishes soon, and then the
  // device is destroyed as usual: in a CI run (2026-12-03, lavapipe) a run stopped this way ended
  // by a signal instead of its exit code, most likely from exiting with the work in flight. A
  // queue still busy after HUNG_DRAIN_MS is left to the process exit.
  if (!hung || await queueDrains(gpu.device, HUNG_DRAIN_MS)) gpu.destroy();
  return failed.length ? 1 : 0;
});

/** How long a run stopped at a hung case waits for the GPU's queue before it exits, ms. */
const HUNG_DRAIN_MS = 2000;

/** Whether `device`'s queue finishes its work within `ms`. */
function queueDrains(device: GPUDevice, ms: number): Promise<boolean> {
  return Promise.race([
    paced(device.queue.onSubmittedWorkDone()).then(() => true),
    new Promise<boolean>((resolve) => setTimeout(() => resolve(false), ms)),
  ]);
}

function sci(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (x === 0) return "0";
  return x.toExponential(1);
}
