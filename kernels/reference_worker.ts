/**
 * A reference pool's worker (see reference_pool.ts): for each job it draws the case's
 * inputs from the case's seed, computes the CPU reference and posts it back, with the
 * inputs' fingerprint, transferring the result arrays.
 */
import { kernelByName } from "./index.ts";
import { caseInputs, fingerprint } from "./case_inputs.ts";
import type { ReferenceJob, ReferenceReply } from "./reference_pool.ts";

interface WorkerScope {
  onmessage: ((e: MessageEvent<ReferenceJob & { id: number }>) => void) | null;
  postMessage(message: ReferenceReply, transfer?: Transferable[]): void;
}

const scope = self as unknown as WorkerScope;

scope.onmessage = (e) => {
  const { id, kernel, caseIndex, variant: variantName } = e.data;
  try {
    const module = kernelByName(kernel);
    const kcase = module.cases[caseIndex];
    if (!kcase) throw new Error(`${kernel} has no case ${caseIndex}`);
    const variant = module.spec.variants.find((v) => v.name === variantName);
    if (!variant) throw new Error(`${kernel} has no variant ${variantName}`);
    const inputs = caseInputs(module, kcase, variant);
    const print = fingerprint(inputs);
    const expected = kcase.reference(inputs, variant);
    const transfer = [...new Set(Object.values(expected).map((a) => a.buffer))];
    scope.postMessage({ id, fingerprint: print, expected }, transfer as ArrayBuffer[]);
  } catch (err) {
    scope.postMessage({ id, error: (err as Error).stack ?? String(err) });
  }
};
