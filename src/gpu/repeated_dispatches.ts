/**
 * A compute pass whose dispatches are each issued twice in a row, for measuring what a stage of
 * a step costs inside the step (perf-decode --stage-costs): the step's GPU time with one stage
 * repeated, less its time as it is, is that stage's dispatches as the step runs them (their
 * barriers and their ramp included, no pass of their own), where a profile's one pass a
 * dispatch adds each pass's start to every kernel. Everything else passes through unchanged.
 *
 * ```ts
 * const pass = repeatedDispatches(enc.beginComputePass());
 * pass.setPipeline(p); pass.setBindGroup(0, g);
 * pass.dispatchWorkgroups(64); // two dispatches of 64 workgroups
 * ```
 */
export function repeatedDispatches(pass: GPUComputePassEncoder): GPUComputePassEncoder {
  return new Proxy(pass, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      const fn = value as (...args: unknown[]) => unknown;
      if (prop === "dispatchWorkgroups" || prop === "dispatchWorkgroupsIndirect") {
        return (...args: unknown[]) => {
          fn.apply(target, args);
          fn.apply(target, args);
        };
      }
      return fn.bind(target);
    },
  });
}
