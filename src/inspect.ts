// Inspection without loading weights: what `k3 info`, `k3 plan` and `k3 simulate-cache` (and
// tools and benchmarks) need from the layers below the engine. Kept apart from src/engine.ts so
// that the engine's API stays what a library user reads in one sitting.
export { describeCheckpoint, describeMetadata, renderInfo } from "./checkpoint/describe.ts";
export { catalogueFromMetadata, openCheckpoint } from "./checkpoint/catalogue.ts";
export { openCheckpointCached } from "./checkpoint/index-cache.ts";
export { computeCensus } from "./checkpoint/census.ts";
export { chooseTrunk, contextFor, decodeBytesPerToken, DEFAULT_CONTEXT, DEFAULT_PREFILL_CHUNK, defaultParallel, defaultPrefixCacheBytes, planInputFromCensus, planMemory, REFERENCE_PROMPT, type MemoryPlan, type PlanInput, type StreamSlots } from "./memory/plan.ts";
export { metadataSlots, streamSlots } from "./memory/slots.ts";
export { draftCost, draftInFormat, placeDraft, prepareDraft, type DraftCost, type DraftSetup } from "./memory/draft-plan.ts";
export { DRAFT_FORMATS, draftFormatsAvailable, type DraftFormat } from "./memory/draft-pack.ts";
export { LM_MODEL_PREFIX } from "./checkpoint/shapes.ts";
export type { TensorEntry } from "./checkpoint/types.ts";
export { metadataTrunkSlots, trunkSlots, TRUNK_FORMATS, type TrunkFormat } from "./memory/pack.ts";
export { gib, parseSize, PRESETS, resolveBudget } from "./memory/ram.ts";
export { ALL_POLICIES, isPolicyName, nextUseTable } from "./memory/policy/index.ts";
export { parseSlotList, simulateCache, type SimResult } from "./memory/simulate.ts";
export { parseTrace, traceKeys } from "./memory/trace.ts";
export { findMirrorCopies, type MirrorCopies } from "./memory/mirrors.ts";
export { deviceOfFile } from "./memory/devices.ts";
export { probeDevice, type ProbeResult } from "./memory/disk-probe.ts";
export { filesByDevice, placementReport, type DeviceRates, type PlacementReport } from "./memory/placement.ts";
export { TRUNK_READ_BYTES } from "./memory/slots.ts";
export { HEDGE_BUFFERS } from "./memory/reader.ts";
