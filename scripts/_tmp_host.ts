import process from "node:process";
import { fixtureRecipes, writeFixture } from "./_tmp_fixtures.ts";
import { existsSync, mkdirSync } from "node:fs";
import { openGpu } from "../src/gpu/device.ts";
import { GpuModel } from "../src/model/gpu_model.ts";
import { SyntheticDecode } from "../src/perf/synthetic_steps.ts";
const dir = "/tmp/tiny48";
if (!existsSync(dir + "/config.json")) {
  const r = structuredClone(fixtureRecipes()["tiny-qwen3-moe"]) as any;
  r.config.num_hidden_layers = 48;
  r.config.mlp_only_layers = [];
  r.config.vocab_size = 151669;
  mkdirSync(dir, { recursive: true });
  writeFixture("tiny48", r, dir);
}
const gpu = await openGpu();
const model = await GpuModel.load(gpu, dir, { dtype: "f16", maxNumSeqs: 4, maxNumTokens: 16, maxModelLen: 256, gemvForms: process.env.FORMS as any ?? undefined });
const steps = new SyntheticDecode(model, 1, 16, 40);
// encode time only: time forward() (which encodes and submits; lavapipe runs the work at submit)
let enc = 0, n = 0, sub = 0;
const q = gpu.device.queue as any;
const orig = q.submit.bind(q);
let subT = 0;
q.submit = (b: any) => { const t = performance.now(); orig(b); subT += performance.now() - t; };
const wb = q.writeBuffer.bind(q); let wbN = 0;
q.writeBuffer = (...a: any[]) => { wbN++; return wb(...a); };
for (let i = 0; i < 39; i++) {
  subT = 0;
  const t = performance.now();
  const out = model.forward(steps.next());
  const dt = performance.now() - t;
  await out.sampled;
  if (i >= 5) { enc += dt - subT; sub += subT; n++; }
}
console.log(`forward() per step: host encode ${(enc / n).toFixed(2)} ms, submit ${(sub / n).toFixed(2)} ms, writeBuffer calls ${(wbN / 39).toFixed(0)}`);
