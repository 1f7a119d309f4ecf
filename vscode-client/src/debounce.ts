// A trailing-edge debounce with injectable timers (so tests need no real clock).

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export interface Debounced {
  (): void;
  cancel(): void;
}

/** Calls `fn` once, `ms` after the last call in a burst. */
export function debounce(fn: () => void, ms: number, timers: Timers = realTimers): Debounced {
  let handle: unknown;
  let pending = false;
  const run = (() => {
    if (pending) timers.clearTimeout(handle);
    pending = true;
    handle = timers.setTimeout(() => {
      pending = false;
      fn();
    }, ms);
  }) as Debounced;
  run.cancel = () => {
    if (pending) timers.clearTimeout(handle);
    pending = false;
  };
  return run;
}
