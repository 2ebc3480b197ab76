/**
 * The engine: requests, the scheduler (continuous batching, chunked prefill, preemption
 * by recompute), the step loop (sync and async), and the benchmark hooks.
 */
export {
  type AddRequestOptions,
  Engine,
  type ShadowOptions,
  type StepObserver,
  type StepOptions,
} from "./engine.ts";
export { type EngineConfig, engineConfig } from "./engine_config.ts";
export {
  DEFAULT_GENERATION_PARAMS,
  type GenerationParams,
  generationParams,
} from "./generation_params.ts";
export {
  type FinishReason,
  type OutputCallback,
  Request,
  type RequestOutput,
  type RequestStatus,
} from "./request.ts";
export { Scheduler } from "./scheduler.ts";
export type { ScheduledRequest, SchedulerOutput } from "./scheduler_output.ts";
export { buildStepBatch } from "./step_batch_builder.ts";
export { type StepObservation, type StepSums, stepSums } from "./step_observation.ts";
export type {
  ForwardModel,
  PreparedStep,
  SamplingParams,
  StepBatch,
  StepOutput,
  StepSequence,
} from "../model/step_batch.ts";
