//! Independent per-item work split over the available cores, keeping the items'
//! order: `ls` reads a record and observes its daemon per id, then reads what
//! `/proc` tells of each running session, and each item needs nothing of another.

/// Items a listing thread takes at least (fewer: one thread does them all).
pub const PER_THREAD: usize = 128;

/// `f` over `items`, in order, on as many scoped threads as there are cores (at most
/// one per `per_thread` items: a small list stays on the calling thread). `None`s
/// are left out.
pub fn map<T: Sync, R: Send>(
    items: &[T],
    per_thread: usize,
    f: impl Fn(&T) -> Option<R> + Sync,
) -> Vec<R> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(items.len() / per_thread.max(1) + 1);
    if workers <= 1 {
        return items.iter().filter_map(f).collect();
    }
    let chunk = items.len().div_ceil(workers);
    let f = &f;
    std::thread::scope(|scope| {
        let parts: Vec<_> = items
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().filter_map(f).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::map;

    #[test]
    fn order_is_kept_and_nones_are_left_out_whatever_the_split() {
        let items: Vec<u32> = (0..1000).collect();
        for per_thread in [1, 7, 128, 5000] {
            let got = map(&items, per_thread, |&i| (i % 3 != 0).then_some(i * 2));
            let want: Vec<u32> = items
                .iter()
                .filter(|&&i| i % 3 != 0)
                .map(|&i| i * 2)
                .collect();
            assert_eq!(got, want, "per_thread {per_thread}");
        }
        assert!(map(&[] as &[u32], 1, |&i| Some(i)).is_empty());
    }
}
