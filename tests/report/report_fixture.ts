/**
 * Artifacts that exercise every section of the HTML report: decode points on real and
 * fake KV at the same coordinates (median-of-3 on the real ones), prefill slices,
 * skipped points; and a kernel timing summary as `profile --json` writes it.
 */
import type { BenchArtifact } from "../../src/bench/artifact.ts";
import type { ReportKernelTimings } from "../../src/report/html_report.ts";
import { summarizeSpans } from "../../src/report/kernel_timings.ts";
import {
  decodePoint,
  prefillPoint,
  syntheticArtifact,
  type SyntheticRow,
} from "./synthetic_artifact.ts";

/** Two artifacts: a real-KV run and a fake-KV (legacy) run. */
export function reportArtifacts(): { name: string; artifact: BenchArtifact }[] {
  const real: SyntheticRow[] = [];
  const fake: SyntheticRow[] = [];
  for (const b of [1, 2, 4, 8]) {
    for (const per of [16, 256, 2048]) {
      const k = b * per;
      const w = (3 + 0.2 * b + 0.0004 * k) / 1000;
      real.push({
        point: decodePoint(b, k),
        regime: "real_kv",
        walls: [w * 1.01, w, w * 0.98],
        gpu: w * 0.9,
      });
      fake.push({ point: decodePoint(b, k), regime: "legacy", walls: [w * (1 + k / 40000)] });
    }
  }
  for (const t of [64, 256, 1024]) {
    for (const k of [0, 512]) {
      real.push({
        point: prefillPoint(2, t, k),
        regime: k ? "fake_prefix" : "not_applicable",
        walls: [(4 + 0.01 * t + 0.002 * k) / 1000],
      });
    }
  }
  const realArtifact = syntheticArtifact(real, {
    runId: "real-run",
    skipped: [
      { point: decodePoint(16, 65536), reason: "capacity: the pool cannot hold 16 x 4096" },
      { point: prefillPoint(4, 4096, 2048), reason: "fake_prefix_miss: 3 of 128 blocks evicted" },
    ],
  });
  return [
    { name: "real.json", artifact: realArtifact },
    { name: "fake.json", artifact: syntheticArtifact(fake, { runId: "fake-run" }) },
  ];
}

/** One step's kernel timing summary, as `report --profile` reads it from `profile --json`. */
export function reportTimings(): ReportKernelTimings[] {
  const summary = summarizeSpans([{
    spans: [
      { label: "rmsnorm", kernel: "rmsnorm", us: 20, startUs: 0 },
      { label: "linear qkv", kernel: "gemv", us: 60, startUs: 25 },
      { label: "paged_attention_decode", kernel: "paged_attention_decode", us: 80, startUs: 90 },
      { label: "moe_block", kernel: "moe_block", us: 240, startUs: 180 },
    ],
    cost: new Map([["linear qkv", { calls: 1, bytes: 6e6, flops: 6e6 }]]),
  }], { bandwidthGbps: 200 });
  return [{ title: "profile.json: decode 1 x 256", summary }];
}
