import assert from "node:assert/strict";
import { test } from "node:test";

import { debounce, type Timers } from "../src/debounce";

function fakeTimers() {
  let now = 0;
  let nextId = 1;
  const pending = new Map<number, { at: number; fn: () => void }>();
  const timers: Timers = {
    setTimeout: (fn, ms) => {
      pending.set(nextId, { at: now + ms, fn });
      return nextId++;
    },
    clearTimeout: (id) => void pending.delete(id as number),
  };
  const advance = (ms: number) => {
    now += ms;
    for (const [id, t] of [...pending]) {
      if (t.at <= now) {
        pending.delete(id);
        t.fn();
      }
    }
  };
  return { timers, advance };
}

test("a burst of calls runs once, after the quiet period", () => {
  const { timers, advance } = fakeTimers();
  let runs = 0;
  const d = debounce(() => runs++, 1000, timers);
  d();
  advance(500);
  d();
  advance(500);
  d();
  advance(999);
  assert.equal(runs, 0);
  advance(1);
  assert.equal(runs, 1);
  d();
  d.cancel();
  advance(5000);
  assert.equal(runs, 1);
});
