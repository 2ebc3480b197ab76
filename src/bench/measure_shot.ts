/**
 * One shot of a point: prepare its requests in the untimed window, then run and time
 * its step(s).
 *
 * Decode: every request is put straight into running at `max(1, ctx - 1)` computed
 * tokens (fake KV, or a seeder's real KV); the admission step computes each request's
 * last prompt token in one submit and is not recorded (the first steady step is encoded
 * before it is submitted, so the host waits idle for its output); then `steady` steady steps
 * run exactly as in production (async scheduling: each is issued while the previous one
 * runs) and each is timed as the gap between its output's arrival and the previous step's.
 *
 * Prefill: each request's prefix is seeded (fake prefix: injected and freed, left in
 * the cache), the requests are queued, and one step computes all of their new tokens,
 * timed from the end of its schedule to its output's arrival. Every request must have
 * hit exactly its prefix.
 *
 * Every timed step must have the planned scheduled shape; otherwise the shot fails
 * with the reason (and its requests are drained, leaving the pool as it was).
 *
 * ```ts
 * const outcome = await runDecodeShot(ctx, planned, "measure", 0, () => sync.arm(id, shape));
 * ```
 */
import type { Request } from "../engine/request.ts";
import type { StepObservation } from "../engine/step_observation.ts";
import type {
  AdmissionStep,
  DecodePoint,
  MeasuredSample,
  PrefillPoint,
  PromptRecord,
  ScheduledSums,
} from "./artifact.ts";
import type { DecodeSeeder, DecodeSeedRequest } from "./decode_seeder.ts";
import { balancedPartition, decodePlan, prefixPartition, steadyCoordinate } from "./partition.ts";
import type { PlannedPoint } from "./plan.ts";
import type { PrefixSeeder } from "./prefix_seeder.ts";
import type { PromptContent } from "./prompt_content.ts";
import { promptDigest } from "./prompt_digest.ts";
import { contentSalt, type RequestRole, type SaltScheme } from "./salts.ts";
import type { StepDriver } from "./step_driver.ts";

/** What a shot needs. */
export interface ShotContext {
  /** The step driver (and through it the engine). */
  readonly driver: StepDriver;
  /** Prompt tokens. */
  readonly content: PromptContent;
  /** Cache salts. */
  readonly salts: SaltScheme;
  /** Decode KV. */
  readonly decodeSeeder: DecodeSeeder;
  /** Prefill prefixes. */
  readonly prefixSeeder: PrefixSeeder;
}

/** A timed step before it gets its index among the point's samples. */
export type ShotSample = Omit<MeasuredSample, "index">;

/** What one shot gave. */
export interface ShotRecord {
  /** Its requests. */
  readonly prompts: PromptRecord[];
  /** The decode admission step (null for prefill). */
  readonly admission: AdmissionStep | null;
  /** Its timed steps. */
  readonly samples: ShotSample[];
  /** Preparation method. */
  readonly method: string;
  /** Preparation host seconds. */
  readonly seconds: number;
  /** Blocks the preparation took. */
  readonly blocks: number;
  /** Prefix tokens hit by the measuring requests (prefill). */
  readonly prefixHitTokens: number;
}

/** A shot, or why it could not be measured. */
export type ShotOutcome =
  | { readonly ok: true; readonly shot: ShotRecord }
  | { readonly ok: false; readonly reason: string };

/** The scheduled sums of an observation, in the artifact's names. */
export function scheduledSums(o: StepObservation): ScheduledSums {
  return {
    num_requests: o.numRequests,
    num_scheduled_tokens: o.numScheduledTokens,
    num_prefill_requests: o.numPrefillRequests,
    sum_prefill_tokens: o.sumPrefillTokens,
    sum_prefill_kv_tokens: o.sumPrefillKvTokens,
    num_decode_requests: o.numDecodeRequests,
    sum_decode_kv_tokens: o.sumDecodeKvTokens,
    num_preempted: o.numPreempted,
    num_block_copies: o.numBlockCopies,
  };
}

const seconds = (ms: number) => ms / 1000;
const gpuSeconds = (o: StepObservation) => (o.gpuMs === null ? null : o.gpuMs / 1000);

/** Compares an observation with the planned shape; returns the mismatch or null. */
function shapeMismatch(
  what: string,
  o: StepObservation | null,
  want: Partial<Record<keyof StepObservation, number>>,
): string | null {
  if (o === null) return `scheduled_shape_mismatch: the ${what} scheduled nothing`;
  const wrong = Object.entries(want).filter(([k, v]) => o[k as keyof StepObservation] !== v);
  if (wrong.length === 0) return null;
  const list = wrong.map(([k, v]) => `${k} ${o[k as keyof StepObservation]} != ${v}`).join(", ");
  return `scheduled_shape_mismatch: the ${what} had ${list}`;
}

function promptRecord(
  request: Request,
  slot: number,
  shot: number,
  plannedSalt: string,
  plannedPrompt: Int32Array,
  computed: number,
): PromptRecord {
  const sha256 = promptDigest(request.promptTokenIds);
  return {
    slot,
    shot,
    request_id: request.requestId,
    cache_salt: request.cacheSalt ?? "",
    content_salt: sha256 === promptDigest(plannedPrompt) ? plannedSalt : null,
    prompt_tokens: request.numPromptTokens,
    computed_tokens: computed,
    sha256,
  };
}

/**
 * One decode shot with `planned.samples` steady steps (see the module doc above).
 * `beforeTimed` runs after preparation, before the admission step (ARM -> GO).
 */
export async function runDecodeShot(
  ctx: ShotContext,
  planned: PlannedPoint,
  role: RequestRole,
  shot: number,
  beforeTimed: () => Promise<void> = () => Promise.resolve(),
): Promise<ShotOutcome> {
  const point = planned.point as DecodePoint;
  const { driver, content, salts } = ctx;
  const engine = driver.engine;
  const B = point.batch_size;
  const steady = planned.samples;
  const requests: (DecodeSeedRequest & { contentSalt: string })[] = decodePlan(
    point.total_kv_read_tokens,
    B,
  ).map((s, slot) => {
    const cs = contentSalt(planned.key, slot);
    const salt = salts.cacheSalt(planned.benchmark_id, role, shot, slot);
    return {
      requestId: salt,
      slot,
      prompt: content.tokens(cs, s.promptTokens),
      computed: s.computed,
      cacheSalt: salt,
      maxTokens: 1 + steady,
      contentSalt: cs,
    };
  });
  const t0 = performance.now();
  const seeded = ctx.decodeSeeder.seed(engine, requests);
  const prepSeconds = seconds(performance.now() - t0);
  if (!seeded.ok) {
    await beforeTimed();
    return seeded;
  }
  const prompts = seeded.requests.map((r, slot) =>
    promptRecord(
      r,
      slot,
      shot,
      requests[slot].contentSalt,
      requests[slot].prompt,
      r.numComputedTokens,
    )
  );
  await beforeTimed();
  // the first steady step's gap starts at the admission's output arrival: the admission in one
  // submit, and the first steady step encoded before it starts, so the host is idle when its
  // output arrives (Engine.step's oneSubmit and withNext)
  const admission = await driver.step({ oneSubmit: true, withNext: true });
  let problem = shapeMismatch("admission step", admission, {
    numPrefillRequests: B,
    sumPrefillTokens: B,
    numDecodeRequests: 0,
    numPreempted: 0,
  });
  const samples: ShotSample[] = [];
  const steadyKv = steadyCoordinate(point.total_kv_read_tokens, B);
  let prev = admission?.outputArrivalMs ?? 0;
  for (let k = 0; problem === null && k < steady; k++) {
    const o = await driver.step();
    problem = shapeMismatch(`steady step ${k + 1}`, o, {
      numDecodeRequests: B,
      numPrefillRequests: 0,
      sumDecodeKvTokens: steadyKv + k * B,
      numPreempted: 0,
    });
    if (problem !== null || o === null) break;
    samples.push({
      ...scheduledSums(o),
      step_id: o.stepId,
      wall_time: seconds(o.outputArrivalMs - prev),
      schedule_to_output_time: seconds(o.outputArrivalMs - o.scheduleEndMs),
      gpu_time: gpuSeconds(o),
    });
    prev = o.outputArrivalMs;
  }
  await releaseAll(driver, seeded.requests);
  if (problem !== null) return { ok: false, reason: problem };
  return {
    ok: true,
    shot: {
      prompts,
      admission: {
        ...scheduledSums(admission!),
        step_id: admission!.stepId,
        schedule_to_output_time: seconds(admission!.outputArrivalMs - admission!.scheduleEndMs),
        gpu_time: gpuSeconds(admission!),
      },
      samples,
      method: seeded.method,
      seconds: prepSeconds,
      blocks: seeded.blocks,
      prefixHitTokens: 0,
    },
  };
}

/**
 * One prefill shot (see the module doc above). `beforeTimed` runs after preparation,
 * before the step (ARM -> GO).
 */
export async function runPrefillShot(
  ctx: ShotContext,
  planned: PlannedPoint,
  role: RequestRole,
  shot: number,
  beforeTimed: () => Promise<void> = () => Promise.resolve(),
): Promise<ShotOutcome> {
  const point = planned.point as PrefillPoint;
  const { driver, content, salts } = ctx;
  const engine = driver.engine;
  const B = point.batch_size;
  const t = balancedPartition(point.total_prefill_tokens, B);
  const k = prefixPartition(point.total_kv_read_tokens, B, engine.kv.blockSize);
  const plan = t.map((ti, slot) => {
    const cs = contentSalt(planned.key, slot);
    const salt = salts.cacheSalt(planned.benchmark_id, role, shot, slot);
    return { slot, cs, salt, prompt: content.tokens(cs, k[slot] + ti), prefix: k[slot] };
  });
  const t0 = performance.now();
  let method = "none";
  let blocks = 0;
  if (point.total_kv_read_tokens > 0) {
    const seeded = await ctx.prefixSeeder.seed(
      driver,
      plan.map((p) => ({
        slot: p.slot,
        prompt: p.prompt,
        prefixTokens: p.prefix,
        cacheSalt: p.salt,
        requestId: `${p.salt}:prefix`,
      })),
    );
    if (!seeded.ok) {
      await beforeTimed();
      return seeded;
    }
    method = seeded.method;
    blocks = seeded.blocks;
  }
  const requests = plan.map((p) =>
    engine.addRequest(p.prompt, { maxTokens: 1, ignoreEos: true, cacheSalt: p.salt }, {
      requestId: p.salt,
    })
  );
  const prepSeconds = seconds(performance.now() - t0);
  await beforeTimed();
  const o = await driver.step();
  const misses = requests.flatMap((r, slot) =>
    r.numCachedTokens === plan[slot].prefix
      ? []
      : [`slot ${slot} hit ${Math.max(0, r.numCachedTokens)} of ${plan[slot].prefix} prefix tokens`]
  );
  let problem = misses.length > 0 ? `fake_prefix_miss: ${misses.join("; ")}` : null;
  problem ??= shapeMismatch("prefill step", o, {
    numPrefillRequests: B,
    sumPrefillTokens: point.total_prefill_tokens,
    sumPrefillKvTokens: point.total_kv_read_tokens,
    numDecodeRequests: 0,
    numPreempted: 0,
  });
  const prompts = requests.map((r, slot) =>
    promptRecord(r, slot, shot, plan[slot].cs, plan[slot].prompt, Math.max(0, r.numCachedTokens))
  );
  await releaseAll(driver, requests);
  if (problem !== null || o === null) return { ok: false, reason: problem ?? "no step" };
  return {
    ok: true,
    shot: {
      prompts,
      admission: null,
      samples: [{
        ...scheduledSums(o),
        step_id: o.stepId,
        wall_time: seconds(o.outputArrivalMs - o.scheduleEndMs),
        schedule_to_output_time: seconds(o.outputArrivalMs - o.scheduleEndMs),
        gpu_time: gpuSeconds(o),
      }],
      method,
      seconds: prepSeconds,
      blocks,
      prefixHitTokens: requests.reduce((s, r) => s + Math.max(0, r.numCachedTokens), 0),
    },
  };
}

/** Sheds whatever of `requests` is unfinished and drains the engine. */
async function releaseAll(driver: StepDriver, requests: readonly Request[]): Promise<void> {
  for (const r of requests) {
    if (!r.isFinished && driver.engine.getRequest(r.requestId)) driver.engine.shed(r.requestId);
  }
  await driver.drain();
}
