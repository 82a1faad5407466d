import { describe, expect, test } from "bun:test";
import { argmax, createSampler, drawFrom, Xoshiro128ss } from "../src/text/sampling.ts";
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

function draws(opts: Parameters<typeof createSampler>[0], logits: Float32Array, count: number): number[] {
  const s = createSampler(opts);
  return Array.from({ length: count }, () => s.sample(logits));
}

describe("greedy", () => {
  test("ties go to the lowest id", () => {
    expect(argmax(new Float32Array([1, 3, 2, 3, 3]))).toBe(1);
    expect(createSampler().sample(new Float32Array([0, 5, 5]))).toBe(1);
    expect(createSampler({ temperature: 0, seed: 9 }).sample(new Float32Array([7, 7]))).toBe(0);
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
  test("xoshiro128** matches the reference output for state {1,2,3,4}", () => {
    const r = new Xoshiro128ss(0);
    (r as unknown as { s: Uint32Array }).s = new Uint32Array([1, 2, 3, 4]);
    expect([0, 1, 2, 3, 4].map(() => r.nextU32())).toEqual([11520, 0, 5927040, 70819200, 2031721883]);
  });
  test("seeds above 2^32 are distinct from their low bits", () => {
    const a = new Xoshiro128ss(5);
    const b = new Xoshiro128ss(5 + 2 ** 32);
    expect(a.nextU32()).not.toBe(b.nextU32());
  });
  test("PRNG floats lie in [0, 1) and look uniform", () => {
    const r = new Xoshiro128ss(123);
    let sum = 0;
    for (let i = 0; i < 10000; i++) {
      const f = r.nextFloat();
      expect(f >= 0 && f < 1).toBe(true);
      sum += f;
    }
    expect(Math.abs(sum / 10000 - 0.5)).toBeLessThan(0.02);
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
    for (const t of [1e-300, 1e-310, Number.MIN_VALUE]) expect(createSampler({ temperature: t, seed: 1 }).sample(logits)).toBe(1);
  });
});

describe("the distribution a sampler exposes (for speculative sampling)", () => {
  test("sample(l) = drawFrom(weights(l), uniform()) on a twin sampler with the same seed", () => {
    for (const opts of [{ temperature: 0.7 }, { temperature: 1.2, topK: 50 }, { temperature: 1, topP: 0.8, minP: 0.02 }]) {
      const a = createSampler({ ...opts, seed: 8 });
      const b = createSampler({ ...opts, seed: 8 });
      for (let i = 0; i < 200; i++) {
        const logits = randomLogits(500, i);
        expect(drawFrom(b.distribution!.weights(logits), b.distribution!.uniform())).toBe(a.sample(logits));
      }
    }
  });
  test("greedy has none; forced logits (+∞) give a one-hot distribution", () => {
    expect(createSampler().distribution).toBeUndefined();
    const w = createSampler({ temperature: 1 }).distribution!.weights(new Float32Array([1, Infinity, 2, Infinity]));
    expect([...w]).toEqual([0, 1, 0, 0]);
  });
});
