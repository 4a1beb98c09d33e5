//! Memory an idle daemon hands back (SPEC §8): the allocator's free pages, the main
//! thread's stack below the live frames, and the allocator's fixed mmap threshold.

/// How far below the current frame the stack is left alone: this frame, the red
/// zone below it and madvise's own frames.
const STACK_MARGIN: usize = 16 * 1024;

/// Hands back what an idle daemon does not need: the allocator's free pages and
/// the stack below the live frames.
pub(crate) fn trim_memory() {
    trim_heap();
    trim_stack();
}

/// Hands the allocator's free pages back to the system. The emulator frees the
/// full-cell rows its scrollback no longer needs in the middle of the heap, where
/// `free` alone keeps them resident (glibc).
fn trim_heap() {
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
fn trim_stack() -> bool {
    if rustix::thread::gettid() != rustix::process::getpid() {
        return false;
    }
    let Some(low) = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| stack_low(&maps))
    else {
        return false;
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

/// Drops this process's mappings of the executable code it maps from files (the
/// `latch` image and its libraries: every `r-xp` file mapping), as a hibernating
/// daemon does (SPEC §4.4 "Hibernation"). Start-up and a burst touch far more
/// code than an idle daemon runs; the pages stay in the page cache, shared with
/// every other process mapping them, and the next event maps back the ones it
/// runs (minor faults, read from that cache). Code is never written, so what is
/// mapped back is what was there. Returns the bytes advised.
pub(crate) fn release_code() -> usize {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return 0;
    };
    let mut released = 0;
    for (start, len) in code_ranges(&maps) {
        // SAFETY: [start, start + len) is a whole private, read-only, executable
        // mapping of a file (`code_ranges`): its pages were never written, so
        // dropping them loses nothing, and any later access, the instructions
        // running now included, faults the same bytes back in from the file.
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

/// The `(start, length)` of every private read-only executable file mapping in a
/// `/proc/self/maps` listing (perms exactly `r-xp`, a path; never `[vdso]`).
fn code_ranges(maps: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?;
            if perms != "r-xp" || !path.starts_with('/') {
                return None;
            }
            let (lo, hi) = range.split_once('-')?;
            let lo = usize::from_str_radix(lo, 16).ok()?;
            let hi = usize::from_str_radix(hi, 16).ok()?;
            (hi > lo).then(|| (lo, hi - lo))
        })
        .collect()
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

    #[test]
    fn only_private_executable_file_mappings_are_code() {
        let maps = "\
55a00d140000-55a00d1f7000 r--p 00000000 fe:00 5341203 /usr/bin/latch
55a00d1f7000-55a00d50f000 r-xp 000b6000 fe:00 5341203 /usr/bin/latch
55a00d50f000-55a00d51c000 r--p 003cd000 fe:00 5341203 /usr/bin/latch
55a00d51c000-55a00d51e000 rw-p 003d9000 fe:00 5341203 /usr/bin/latch
55a03f221000-55a03f266000 rw-p 00000000 00:00 0 [heap]
7f66c2b56000-7f66c2cac000 r-xp 00026000 fe:00 326279 /usr/lib/x86_64-linux-gnu/libc.so.6
7f66c2d00000-7f66c2d01000 r-xs 00000000 fe:00 1 /dev/shm/shared
7f66c2d43000-7f66c2d45000 r-xp 00000000 00:00 0 [vdso]
7f66c2d46000-7f66c2d47000 r-xp 00000000 00:00 0
";
        assert_eq!(
            code_ranges(maps),
            [(0x55a0_0d1f_7000, 0x318_000), (0x7f66_c2b5_6000, 0x156_000)]
        );
    }

    #[test]
    fn released_code_runs_again() {
        assert!(release_code() > 0);
        // Everything below runs from pages that were just dropped.
        assert_eq!(code_ranges("").len(), 0);
        assert!(release_code() > 0);
    }

    #[test]
    fn the_stack_listing_is_read_from_maps() {
        let maps = "55d0c0000000-55d0c0021000 r--p 00000000 08:01 1 /usr/bin/latch\n\
                    7ffd3c9e0000-7ffd3ca01000 rw-p 00000000 00:00 0                          [stack]\n\
                    7ffd3cbf0000-7ffd3cbf4000 r--p 00000000 00:00 0                          [vvar]\n";
        assert_eq!(stack_low(maps), Some(0x7ffd_3c9e_0000));
        assert_eq!(stack_low("7f00-7f01 rw-p 0 0:0 0 [heap]\n"), None);
        assert_eq!(stack_low("zz-7f01 rw-p 0 0:0 0 [stack]\n"), None);
        let ours = std::fs::read_to_string("/proc/self/maps").unwrap();
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
        assert_eq!(trim_stack(), main);
        trim_memory();
        fixed_mmap_threshold();
        let v = vec![1u8; 1 << 20];
        assert_eq!(v.iter().map(|&b| usize::from(b)).sum::<usize>(), 1 << 20);
    }
}
