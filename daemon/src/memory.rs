//! Memory an idle daemon hands back (SPEC §8): the allocator's free pages, the main
//! thread's stack below the live frames, and the allocator's fixed mmap threshold.

/// How far below the current frame the stack is left alone: this frame, the red
/// zone below it and madvise's own frames.
const STACK_MARGIN: usize = 8 * 1024;

/// Hands back what an idle daemon does not need: the allocator's free pages and
/// the stack below the live frames. `fresh`: find the stack's mapping anew (a read
/// of `/proc/self/maps`, some hundred microseconds) rather than trust the bound
/// found before; a hibernation and the first trim do, a trim after a burst need
/// not.
pub(crate) fn trim_memory(fresh: bool) {
    trim_heap();
    trim_stack(fresh);
}

/// Hands the allocator's free pages back to the system. The emulator frees the
/// full-cell rows its scrollback no longer needs in the middle of the heap, where
/// `free` alone keeps them resident (glibc).
pub(crate) fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Hands back the main thread's stack pages below the current frame. Creation and
/// the parsing of a burst touch them once; an idle daemon never needs them, and
/// the kernel keeps them resident otherwise (a fresh daemon's stack was 92 KiB).
/// Pages touched again later are simply zero-filled anew. Returns whether it did
/// (only the main thread's stack is the `[stack]` mapping; on any other thread it
/// does nothing).
fn trim_stack(fresh: bool) -> bool {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The `[stack]` mapping's lowest address when last read. The mapping only
    // grows downwards, so an older bound still lies inside it: trusting it can
    // leave pages below it resident until the next fresh trim, never advise
    // memory outside the stack.
    static LOW: AtomicUsize = AtomicUsize::new(0);
    if rustix::thread::gettid() != rustix::process::getpid() {
        return false;
    }
    let known = LOW.load(Ordering::Relaxed);
    let low = if fresh || known == 0 {
        let Some(low) = latch_registry::proc::read_proc("/proc/self/maps")
            .ok()
            .and_then(|maps| stack_low(&maps))
        else {
            return false;
        };
        LOW.store(low, Ordering::Relaxed);
        low
    } else {
        known
    };
    let marker = 0u8;
    let here = std::ptr::addr_of!(marker) as usize;
    let Some((low, len)) = unused_stack(low, here, rustix::param::page_size()) else {
        return false;
    };
    // SAFETY: [low, low + len) lies in this thread's stack mapping strictly below
    // the live frames (the current one, minus a margin larger than the red zone and
    // any frame madvise needs, `unused_stack`); nothing refers to memory there, and
    // a later touch gets a zeroed page.
    let advised = unsafe {
        rustix::mm::madvise(
            low as *mut std::ffi::c_void,
            len,
            rustix::mm::Advice::LinuxDontNeed,
        )
    };
    advised.is_ok()
}

/// The stack's unused part, `(start, length)`: from its lowest address `low` up to
/// [`STACK_MARGIN`] below the frame at `here`, rounded down to a `page` boundary;
/// `None` if nothing is left.
fn unused_stack(low: usize, here: usize, page: usize) -> Option<(usize, usize)> {
    let high = here.saturating_sub(STACK_MARGIN) & !(page - 1);
    (high > low).then(|| (low, high - low))
}

/// The lowest address of the `[stack]` mapping in a `/proc/self/maps` listing.
fn stack_low(maps: &str) -> Option<usize> {
    let line = maps.lines().find(|l| l.ends_with("[stack]"))?;
    let (low, _) = line.split_once('-')?;
    usize::from_str_radix(low, 16).ok()
}

/// Drops this process's mappings of the file pages it has never changed (the
/// `latch` image's code and read-only data, its libraries'), as a hibernating
/// daemon does (SPEC §4.4 "Hibernation"): every private, non-writable file
/// mapping that holds no page of its own (`Anonymous: 0 kB` in
/// `/proc/self/smaps`). Start-up and a burst touch far more of them than an idle
/// daemon reads; the pages stay in the page cache, shared with every other
/// process mapping them, and the next event maps back the ones it touches (minor
/// faults, read from that cache). A mapping that holds a page of its own (the
/// relocated RELRO part of an image, written before it was made read-only) is
/// kept whole: dropping it would put back the file's bytes in place of what
/// was written. Returns the bytes advised.
pub(crate) fn release_file_pages() -> usize {
    let Ok(smaps) = latch_registry::proc::read_proc("/proc/self/smaps") else {
        return 0;
    };
    let mut released = 0;
    for (start, len) in unchanged_file_ranges(&smaps) {
        // SAFETY: [start, start + len) is a whole private, non-writable mapping of
        // a file that holds no anonymous (copied-on-write) page
        // (`unchanged_file_ranges`): every resident page is the file's, so
        // dropping them loses nothing, and any later access, the instructions
        // running now included, faults the same bytes back in from the file. The
        // daemon is one thread, and nothing can write a non-writable mapping
        // between the read of smaps and this call.
        let advised = unsafe {
            rustix::mm::madvise(
                start as *mut std::ffi::c_void,
                len,
                rustix::mm::Advice::LinuxDontNeed,
            )
        };
        if advised.is_ok() {
            released += len;
        }
    }
    released
}

/// The `(start, length)` of every private, non-writable file mapping without an
/// anonymous page in a `/proc/PID/smaps` listing: perms `r--p` or `r-xp`, a path
/// (never `[vdso]` or `[vvar]`), and `Anonymous: 0 kB`. A mapping whose
/// `Anonymous` line is missing is left alone.
fn unchanged_file_ranges(smaps: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut candidate: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        if let Some(kb) = line.strip_prefix("Anonymous:") {
            if let Some(range) = candidate.take() {
                if kb.trim() == "0 kB" {
                    out.push(range);
                }
            }
            continue;
        }
        let mut fields = line.split_whitespace();
        let Some(range) = fields.next() else { continue };
        // A mapping's header: "lo-hi perms offset dev inode [path]"; the other
        // lines are "Key:  value".
        if range.ends_with(':') {
            continue;
        }
        candidate = None;
        let (Some(perms), Some(path)) = (fields.next(), fields.nth(3)) else {
            continue;
        };
        if !matches!(perms, "r--p" | "r-xp") || !path.starts_with('/') {
            continue;
        }
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if hi > lo {
            candidate = Some((lo, hi - lo));
        }
    }
    out
}

/// Large buffers (output queue, full-scrollback snapshots) get their own mappings,
/// returned to the system when freed: glibc would otherwise raise its threshold to
/// the largest buffer freed so far and keep every later one in the heap.
pub(crate) fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets an allocator parameter; no pointer is involved.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One mapping of a `/proc/PID/smaps` listing: its header and the two lines
    /// that matter here.
    fn mapping(header: &str, anonymous_kb: u32) -> String {
        format!("{header}\nSize:  100 kB\nRss:  8 kB\nAnonymous:  {anonymous_kb} kB\nSwap:  0 kB\n")
    }

    #[test]
    fn only_unchanged_private_read_only_file_mappings_are_released() {
        let smaps = [
            mapping("00200000-003b1000 r--p 00000000 fe:00 5341203 /usr/bin/latch", 0),
            mapping("003b1000-00be9000 r-xp 001b1000 fe:00 5341203 /usr/bin/latch", 0),
            // RELRO: relocated, then made read-only; it holds pages of its own.
            mapping("00be9000-00c10000 r--p 009e9000 fe:00 5341203 /usr/bin/latch", 8),
            mapping("00c10000-00c11000 rw-p 00a10000 fe:00 5341203 /usr/bin/latch", 0),
            mapping("241e3000-24218000 rw-p 00000000 00:00 0 [heap]", 132),
            mapping("7f66c2b56000-7f66c2cac000 r-xp 00026000 fe:00 326279 /usr/lib/x86_64-linux-gnu/libc.so.6", 0),
            mapping("7f66c2d00000-7f66c2d01000 r-xs 00000000 fe:00 1 /dev/shm/shared", 0),
            mapping("7f66c2d40000-7f66c2d43000 r--p 00000000 00:00 0 [vvar]", 0),
            mapping("7f66c2d43000-7f66c2d45000 r-xp 00000000 00:00 0 [vdso]", 0),
            mapping("7f66c2d46000-7f66c2d47000 r-xp 00000000 00:00 0", 0),
        ]
        .concat();
        assert_eq!(
            unchanged_file_ranges(&smaps),
            [
                (0x20_0000, 0x1b_1000),
                (0x3b_1000, 0x83_8000),
                (0x7f66_c2b5_6000, 0x156_000)
            ]
        );
        // A header without its Anonymous line (a truncated listing) releases nothing.
        assert!(unchanged_file_ranges(
            "00200000-003b1000 r--p 00000000 fe:00 5341203 /usr/bin/latch\nRss: 8 kB\n"
        )
        .is_empty());
    }

    #[test]
    fn released_pages_run_and_read_again() {
        assert!(release_file_pages() > 0);
        // Everything below runs from pages that were just dropped, and reads
        // constants from them.
        assert_eq!(unchanged_file_ranges("").len(), 0);
        assert_eq!(
            format!("{:?}", Some("read-only data")),
            "Some(\"read-only data\")"
        );
        assert!(release_file_pages() > 0);
    }

    #[test]
    fn the_stack_listing_is_read_from_maps() {
        let maps = "55d0c0000000-55d0c0021000 r--p 00000000 08:01 1 /usr/bin/latch\n\
                    7ffd3c9e0000-7ffd3ca01000 rw-p 00000000 00:00 0                          [stack]\n\
                    7ffd3cbf0000-7ffd3cbf4000 r--p 00000000 00:00 0                          [vvar]\n";
        assert_eq!(stack_low(maps), Some(0x7ffd_3c9e_0000));
        assert_eq!(stack_low("7f00-7f01 rw-p 0 0:0 0 [heap]\n"), None);
        assert_eq!(stack_low("zz-7f01 rw-p 0 0:0 0 [stack]\n"), None);
        let ours = latch_registry::proc::read_proc("/proc/self/maps").unwrap();
        assert!(stack_low(&ours).is_some(), "{ours}");
    }

    #[test]
    fn only_what_lies_below_the_margin_is_handed_back_in_whole_pages() {
        let page = 4096;
        let low = 0x10_0000;
        // Far above: everything up to the margin, rounded down to a page.
        let here = low + 100 * page + 123;
        let (start, len) = unused_stack(low, here, page).unwrap();
        assert_eq!(start, low);
        let high = start + len;
        assert_eq!(high % page, 0);
        assert!(high <= here - STACK_MARGIN, "the margin is kept");
        assert!(
            high > here - STACK_MARGIN - page,
            "no more than a page beyond it"
        );
        // Within the margin of the bottom: nothing.
        assert_eq!(unused_stack(low, low + STACK_MARGIN, page), None);
        assert_eq!(unused_stack(low, 10, page), None);
    }

    #[test]
    fn only_the_main_thread_trims_its_stack() {
        // Test threads are normally not the process's main thread.
        let main = rustix::thread::gettid() == rustix::process::getpid();
        assert_eq!(trim_stack(true), main);
        assert_eq!(trim_stack(false), main);
        trim_memory(false);
        fixed_mmap_threshold();
        let v = vec![1u8; 1 << 20];
        assert_eq!(v.iter().map(|&b| usize::from(b)).sum::<usize>(), 1 << 20);
    }
}
