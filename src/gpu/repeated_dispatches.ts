/**
 * A compute pass whose dispatches are each issued `times` times in a row (2: twice; 0: not at
 * all), for measuring what a stage of a step costs inside the step (perf-decode --stage-costs):
 * the step's GPU time with one stage repeated, less its time as it is, or its time as it is less
 * the step without the stage, is that stage's dispatches as the step runs them (their barriers
 * and their ramp included, no pass of their own), where a profile's one pass a dispatch adds each
 * pass's start to every kernel. Everything else passes through unchanged.
 *
 * ```ts
 * const pass = repeatedDispatches(enc.beginComputePass(), 2);
 * pass.setPipeline(p); pass.setBindGroup(0, g);
 * pass.dispatchWorkgroups(64); // two dispatches of 64 workgroups
 * ```
 */
export function repeatedDispatches(
  pass: GPUComputePassEncoder,
  times: number,
): GPUComputePassEncoder {
  if (!Number.isInteger(times) || times < 0) {
    throw new Error(`repeatedDispatches: times = ${times} must be a count`);
  }
  return new Proxy(pass, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (typeof value !== "function") return value;
      const fn = value as (...args: unknown[]) => unknown;
      if (prop === "dispatchWorkgroups" || prop === "dispatchWorkgroupsIndirect") {
        return (...args: unknown[]) => {
          for (let i = 0; i < times; i++) fn.apply(target, args);
        };
      }
      return fn.bind(target);
    },
  });
}
