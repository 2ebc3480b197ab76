/**
 * A request: prompt token ids, generation params, and the one pair of numbers the
 * scheduler works on, `numComputedTokens` and `numTokens`. Each step closes the gap
 * between them; there is no prefill or decode phase.
 *
 * With async scheduling a sampled token may still be in flight when the next step is
 * scheduled: it counts in `numTokens` as a placeholder (`numOutputPlaceholders`) and
 * joins `tokenIds` when it arrives.
 *
 * ```
 * prompt 5 tokens, 2 outputs arrived, 1 in flight:
 * tokenIds   p0 p1 p2 p3 p4 o0 o1          numTokens = 8 (7 known + 1 placeholder)
 * computed   ####################          numComputedTokens = 7
 * ```
 */
import type { BlockHash } from "../kv/block_hash.ts";
import type { KvRequest } from "../kv/kv_request.ts";
import type { SamplingParams } from "../model/step_batch.ts";
import type { GenerationParams } from "./generation_params.ts";

/**
 * Where a request is: waiting (never run, or preempted and back in the queue), running,
 * parked (out of running with its blocks resident, no tokens in flight), finished.
 */
export type RequestStatus = "waiting" | "preempted" | "running" | "parked" | "finished";

/**
 * Why a request finished: EOS (stop), max_tokens or max_model_len (length), abort, shed
 * by the benchmark, or it could never fit in the KV pool beside what stays resident.
 */
export type FinishReason = "stop" | "length" | "abort" | "shed" | "kv_capacity";

/** One streamed output: a token that arrived, and whether the request finished with it. */
export interface RequestOutput {
  /** The request it belongs to. */
  readonly request: Request;
  /** The token that arrived, or null when the request finished without a new token. */
  readonly tokenId: number | null;
  /** No more tokens will come: the request finished, or stopped and parks. */
  readonly finished: boolean;
}

/** Called for every token that arrives and once when the request finishes. */
export type OutputCallback = (output: RequestOutput) => void;

/** One request and its progress (see the module doc above). */
export class Request implements KvRequest {
  /** Prompt then arrived output tokens (known values only). */
  readonly tokenIds: number[];
  readonly blockHashes: BlockHash[] = [];
  /** Tokens whose K/V are computed or scheduled in an issued step. */
  numComputedTokens = 0;
  /** Sampled tokens scheduled but not yet arrived. */
  numOutputPlaceholders = 0;
  /** Where the request is. */
  status: RequestStatus = "waiting";
  /** Why it finished (or stopped before parking); null while generating. */
  finishReason: FinishReason | null = null;
  /** Prompt tokens found in the prefix cache at first admission (-1 before). */
  numCachedTokens: number = -1;
  /** Times the request was preempted (its KV dropped, to be recomputed). */
  numPreemptions = 0;
  /** Park instead of freeing when the request finishes (a kvwarm chain). */
  parkOnFinish = false;
  /** A park was asked for while tokens were in flight: it happens when they drain. */
  parkPending = false;
  /** Last step the request was scheduled in (0 for none). */
  lastStepId = 0;
  /** Step whose output holds this request's last sampled token, and its row there. */
  lastSampleStepId = 0;
  /** Row of the request's last sampled token in step `lastSampleStepId`'s output. */
  lastSampleRow: number = -1;
  /** Generation ended (EOS or length) while a park was due: later tokens are discarded. */
  stopped = false;
  /** How the model samples this request's tokens (one frozen object, reused every step). */
  readonly sampling: SamplingParams;

  /**
   * A waiting request with its prompt as its known tokens.
   * @param requestId unique among unfinished requests
   * @param promptTokenIds the prompt
   * @param params validated generation params
   * @param arrivalIndex order of arrival
   * @param onOutput streaming callback (tokens as they arrive, then the finish)
   */
  constructor(
    readonly requestId: string,
    readonly promptTokenIds: Int32Array,
    readonly params: GenerationParams,
    readonly arrivalIndex: number,
    readonly onOutput: OutputCallback | null = null,
  ) {
    this.tokenIds = Array.from(promptTokenIds);
    this.sampling = Object.freeze({ temperature: params.temperature, seed: params.seed });
  }

  /** The request's `cache_salt`. */
  get cacheSalt(): string | null {
    return this.params.cacheSalt;
  }

  /** Prompt length. */
  get numPromptTokens(): number {
    return this.promptTokenIds.length;
  }

  /** Known tokens plus placeholders of outputs in flight. */
  get numTokens(): number {
    return this.tokenIds.length + this.numOutputPlaceholders;
  }

  /** Output tokens that arrived. */
  get numOutputTokens(): number {
    return this.tokenIds.length - this.promptTokenIds.length;
  }

  /** The arrived output tokens (a copy). */
  get outputTokenIds(): number[] {
    return this.tokenIds.slice(this.promptTokenIds.length);
  }

  /** True once finished. */
  get isFinished(): boolean {
    return this.status === "finished";
  }
}
