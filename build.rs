//! Links the `latch` binary as a position-dependent executable (`-no-pie`), at a
//! fixed address: the dynamic loader then has almost no relocations to apply, so
//! the pages of `.data.rel.ro` (the tables of pointers every daemon reads) stay
//! clean, shared with every other process that maps the image, instead of being
//! written, and so private, in each one. Only the final link of the bin changes:
//! the crates are compiled as before (position-independent code links fine into a
//! fixed-address image), proc-macros still build, and the binary stays at
//! target/*/latch.
//!
//! Measured with a release build (BENCHMARKS.md): relocations (`readelf -r`) 7,783
//! -> 185; `latch --version` page faults 265 -> 228 and task-clock 1.61-1.72 ->
//! 1.49-1.66 ms (`perf stat -r 300`); idle PSS per session, 10 sessions
//! (`bench/run.sh --only memory`) 1,088 -> 833 KB, the image's read-only data
//! 218 -> 69 KB per daemon (/proc/PID/smaps); create unchanged within the
//! run-to-run spread (`--only create`). The cost: the executable itself is not
//! placed at a random address (its heap and stack still are).
//!
//! `.cargo/config.toml` goes further and links the image statically (glibc's
//! libc.a): no library is loaded at all. `-no-pie` stays for a build that overrides
//! that config's target (and is what the static link implies anyway).

fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
