// Waiting for an extraction job: memory.ingest with `extract` queues one and answers at once.

import type { Job } from "./generated.js";

/** What `waitForJob` needs of a client: `memory.job` (a `MemsvcClient` has it). */
export interface JobReader {
  memory: { job: { query(input: { id: string }): Promise<Job> } };
}

export interface WaitForJobOptions {
  /** Give up after this many seconds (`JobTimeoutError`). Default: 30. */
  timeout?: number | undefined;
  /** Seconds between two looks at the job. Default: 0.5. */
  interval?: number | undefined;
}

/** Whether a job is `done` or `failed`: it changes no more unless retried. */
export function jobSettled(job: Job): boolean {
  return job.status === "done" || job.status === "failed";
}

/**
 * A job that did not settle within `waitForJob`'s timeout. Not a failure of the
 * job: it goes on on the server; `job` is how it was last seen.
 */
export class JobTimeoutError extends Error {
  override readonly name = "JobTimeoutError";
  constructor(
    readonly job: Job,
    readonly timeout: number,
  ) {
    super(
      `extraction job ${job.id} still ${job.status} after ${timeout}s ` +
        `(${job.attempts} attempts${job.error ? `; ${job.error}` : ""})`,
    );
  }
}

/**
 * The job once it is `done` or `failed`, asked of `memory.job` every `interval`
 * seconds. A failed job is returned, not thrown: its `error` says why, and
 * `memory.retryJob` queues it again. `JobTimeoutError` after `timeout` seconds;
 * an unknown id is the `memory.job` call's NOT_FOUND.
 */
export async function waitForJob(
  client: JobReader,
  id: string,
  options: WaitForJobOptions = {},
): Promise<Job> {
  const timeout = options.timeout ?? 30;
  const interval = options.interval ?? 0.5;
  if (!(timeout >= 0)) throw new RangeError(`timeout must be a number of seconds >= 0, not ${timeout}`);
  if (!(interval > 0)) throw new RangeError(`interval must be a number of seconds > 0, not ${interval}`);
  const deadline = performance.now() + timeout * 1000;
  for (;;) {
    const job = await client.memory.job.query({ id });
    if (jobSettled(job)) return job;
    const left = deadline - performance.now();
    if (left <= 0) throw new JobTimeoutError(job, timeout);
    await new Promise((resolve) => setTimeout(resolve, Math.min(interval * 1000, left)));
  }
}
