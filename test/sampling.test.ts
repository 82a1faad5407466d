import { describe, expect, test } from "bun:test";
import { argmax, createSampler, uniformAt } from "../src/text/sampling.ts";
import { StopMatcher } from "../src/text/stop.ts";
import { K3Error } from "../src/errors.ts";

/** A deterministic pseudo-random logit vector (its own LCG, independent of the sampler's PRNG). */
function randomLogits(n: number, seed: number): Float32Array {
  const out = new Float32Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out[i] = (x / 4294967296) * 8 - 4;
  }
  return out;
}

/** `count` draws from the same logits at positions 0..count − 1 (one draw per position). */
function draws(opts: Parameters<typeof createSampler>[0], logits: Float32Array, count: number): number[] {
  const s = createSampler(opts);
  return Array.from({ length: count }, (_, pos) => s.sample(logits, pos));
}

describe("greedy", () => {
  test("ties go to the lowest id", () => {
    expect(argmax(new Float32Array([1, 3, 2, 3, 3]))).toBe(1);
    expect(createSampler().sample(new Float32Array([0, 5, 5]), 0)).toBe(1);
    expect(createSampler({ temperature: 0, seed: 9 }).sample(new Float32Array([7, 7]), 3)).toBe(0);
  });
  test("NaN never wins; all -Infinity picks id 0; all NaN throws", () => {
    expect(argmax(new Float32Array([NaN, -1, NaN, 2]))).toBe(3);
    expect(argmax(new Float32Array([-Infinity, -Infinity]))).toBe(0);
    expect(() => argmax(new Float32Array([NaN, NaN]))).toThrow(K3Error);
  });
});

describe("seeded sampling", () => {
  const logits = randomLogits(1000, 1);
  test("same seed, same ids", () => {
    const a = draws({ temperature: 1, seed: 42 }, logits, 200);
    const b = draws({ temperature: 1, seed: 42 }, logits, 200);
    expect(a).toEqual(b);
  });
  test("different seeds differ", () => {
    const a = draws({ temperature: 1, seed: 1 }, logits, 200);
    const b = draws({ temperature: 1, seed: 2 }, logits, 200);
    expect(a).not.toEqual(b);
  });
  test("a pure function of (logits, position): any call order, any history, a second sampler, the same id", () => {
    const s = createSampler({ temperature: 1, topK: 50, seed: 7 });
    const rows = Array.from({ length: 40 }, (_, i) => randomLogits(1000, 100 + i));
    const inOrder = rows.map((l, pos) => s.sample(l, pos));
    // Backwards, each asked three times, and after other positions' draws: nothing carries over.
    const backwards = rows.map((_, j) => rows.length - 1 - j).map((pos) => [s.sample(rows[pos]!, pos), s.sample(rows[pos]!, pos), s.sample(rows[pos]!, pos)]);
    backwards.reverse().forEach((three, pos) => expect(three).toEqual([inOrder[pos]!, inOrder[pos]!, inOrder[pos]!]));
    const twin = createSampler({ temperature: 1, topK: 50, seed: 7 });
    expect(rows.map((l, pos) => twin.sample(l, pos))).toEqual(inOrder);
  });
  test("the draw of a position is uniformAt(seed, position): the walk over kept ids in ascending order", () => {
    // Two tokens of equal weight: id 0 wins exactly when u < 0.5.
    const l = new Float32Array([0, 0]);
    for (let pos = 0; pos < 200; pos++) expect(createSampler({ temperature: 1, seed: 3 }).sample(l, pos)).toBe(uniformAt(3, pos) < 0.5 ? 0 : 1);
  });
  test("the same position under different seeds differs; different positions of one seed differ", () => {
    const s1 = createSampler({ temperature: 1, seed: 1 });
    const s2 = createSampler({ temperature: 1, seed: 2 });
    const atPos = Array.from({ length: 200 }, (_, pos) => [s1.sample(logits, pos), s2.sample(logits, pos)]);
    expect(atPos.filter(([a, b]) => a !== b).length).toBeGreaterThan(150);
    expect(new Set(atPos.map(([a]) => a)).size).toBeGreaterThan(50);
  });
  test("top-k = 1 equals greedy", () => {
    const greedy = argmax(logits);
    expect(new Set(draws({ temperature: 1.5, topK: 1, seed: 3 }, logits, 100))).toEqual(new Set([greedy]));
  });
  test("tiny top-p equals greedy", () => {
    const greedy = argmax(logits);
    expect(new Set(draws({ temperature: 1, topP: 1e-9, seed: 3 }, logits, 100))).toEqual(new Set([greedy]));
  });
  test("top-k keeps exactly the k best, ties to lower ids", () => {
    const l = new Float32Array([0, 1, 1, 1, 0.5]);
    const seen = new Set(draws({ temperature: 1, topK: 2, seed: 7 }, l, 500));
    expect(seen).toEqual(new Set([1, 2]));
  });
  test("top-p keeps the smallest prefix reaching p", () => {
    // probs 0.5, 0.3, 0.2: p = 0.7 needs the first two; p = 0.5 only the first.
    const l = new Float32Array([Math.log(0.2), Math.log(0.5), Math.log(0.3)]);
    expect(new Set(draws({ temperature: 1, topP: 0.7, seed: 1 }, l, 500))).toEqual(new Set([1, 2]));
    expect(new Set(draws({ temperature: 1, topP: 0.5, seed: 1 }, l, 200))).toEqual(new Set([1]));
  });
  test("min-p drops tokens below minP × max prob", () => {
    const l = new Float32Array([Math.log(0.5), Math.log(0.3), Math.log(0.15), Math.log(0.05)]);
    // 0.05/0.5 = 0.1 < 0.2 ≤ 0.15/0.5 = 0.3 → id 3 goes, ids 0..2 stay.
    expect(new Set(draws({ temperature: 1, minP: 0.2, seed: 5 }, l, 2000))).toEqual(new Set([0, 1, 2]));
  });
  test("-Infinity logits are never drawn; NaN logits are never drawn", () => {
    const l = new Float32Array([-Infinity, 0, NaN, 0]);
    expect(new Set(draws({ temperature: 1, seed: 11 }, l, 500))).toEqual(new Set([1, 3]));
  });
  test("temperature 1 draws follow softmax (chi-square, fixed seed)", () => {
    const probs = [0.1, 0.2, 0.3, 0.4];
    const l = new Float32Array(probs.map(Math.log));
    const n = 20000;
    const counts = [0, 0, 0, 0];
    for (const id of draws({ temperature: 1, seed: 2024 }, l, n)) counts[id]!++;
    const chi2 = probs.reduce((acc, p, i) => acc + (counts[i]! - n * p) ** 2 / (n * p), 0);
    expect(chi2).toBeLessThan(16.27); // df = 3, p = 0.001
  });
  test("higher temperature flattens the distribution", () => {
    const l = new Float32Array([0, 2]);
    const count1 = (t: number) => draws({ temperature: t, seed: 8 }, l, 4000).filter((x) => x === 0).length;
    // P(id 0) = 1/(1+e^2) ≈ 0.119 at T=1, 1/(1+e^0.4) ≈ 0.401 at T=5
    expect(count1(1)).toBeLessThan(700);
    expect(count1(5)).toBeGreaterThan(1400);
  });
  test("invalid options are refused", () => {
    expect(() => createSampler({ temperature: -1 })).toThrow(K3Error);
    expect(() => createSampler({ topP: 0 })).toThrow(K3Error);
    expect(() => createSampler({ topK: 1.5 })).toThrow(K3Error);
    expect(() => createSampler({ minP: 2 })).toThrow(K3Error);
    expect(() => createSampler({ seed: 0.5 })).toThrow(K3Error);
  });
});

describe("StopMatcher", () => {
  function run(stops: string[], deltas: string[]) {
    const m = new StopMatcher(stops);
    let out = "";
    let stopped = false;
    for (const d of deltas) {
      const r = m.push(d);
      out += r.text;
      stopped = r.stopped;
      if (stopped) break;
    }
    if (!stopped) {
      const r = m.flush();
      out += r.text;
      stopped = r.stopped;
    }
    return { out, stopped };
  }
  test("a stop string across a boundary: 'ab' + 'c' with stop 'bc'", () => {
    const m = new StopMatcher(["bc"]);
    expect(m.push("ab")).toEqual({ text: "a", stopped: false });
    expect(m.push("c")).toEqual({ text: "", stopped: true });
    expect(m.push("more")).toEqual({ text: "", stopped: true });
  });
  test("held text is released when the prefix does not continue", () => {
    const m = new StopMatcher(["bc"]);
    expect(m.push("ab")).toEqual({ text: "a", stopped: false });
    expect(m.push("d")).toEqual({ text: "bd", stopped: false });
  });
  test("flush releases a dangling prefix", () => {
    expect(run(["STOP"], ["hello ST"])).toEqual({ out: "hello ST", stopped: false });
  });
  test("the earliest-starting stop wins even if a shorter one completes first", () => {
    // "abcd" starts at 0; "bc" completes earlier in the stream but starts later.
    expect(run(["abcd", "bc"], ["ab", "c", "d"])).toEqual({ out: "", stopped: true });
    expect(run(["abcd", "bc"], ["ab", "c", "x"])).toEqual({ out: "a", stopped: true });
  });
  test("one char at a time matches the same as all at once", () => {
    const text = "The answer is 42.\n\nUser: next";
    const whole = run(["\n\nUser:"], [text]);
    const chars = run(["\n\nUser:"], [...text]);
    expect(whole).toEqual({ out: "The answer is 42.", stopped: true });
    expect(chars).toEqual(whole);
  });
  test("no stops: everything passes through immediately", () => {
    const m = new StopMatcher([""]);
    expect(m.push("abc")).toEqual({ text: "abc", stopped: false });
  });
});

describe("tiny temperatures", () => {
  test("a temperature near the smallest double still picks the argmax, never a NaN-weighted id", () => {
    const logits = new Float32Array([1, 5, 3, 2, -1]);
    for (const t of [1e-300, 1e-310, Number.MIN_VALUE]) expect(createSampler({ temperature: t, seed: 1 }).sample(logits, 0)).toBe(1);
  });
});

describe("forced logits", () => {
  test("+∞ logits: the lowest such id, at every position, without a draw", () => {
    const s = createSampler({ temperature: 1, seed: 4 });
    for (let pos = 0; pos < 20; pos++) expect(s.sample(new Float32Array([1, Infinity, 2, Infinity]), pos)).toBe(1);
  });
  test("a position that is not a non-negative integer is a bug, refused", () => {
    expect(() => createSampler({ temperature: 1 }).sample(new Float32Array([1, 2]), -1)).toThrow(K3Error);
    expect(() => createSampler({ temperature: 1 }).sample(new Float32Array([1, 2]), 1.5)).toThrow(K3Error);
  });
});
