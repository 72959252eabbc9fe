//! Live heap bytes of this process, for the memory benchmarks (`scale`,
//! `density`): the system allocator, counting only when switched on, so the
//! timing benchmarks pay one relaxed load per allocation and nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

pub struct Counting;

static ON: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);

/// Starts counting (allocations made before are not known: call it first).
pub fn start() {
    ON.store(true, Ordering::SeqCst);
}

/// Bytes allocated and not freed since [`start`].
pub fn live_bytes() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn count(delta: isize) {
    if ON.load(Ordering::Relaxed) {
        LIVE.fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `System` unchanged; only counts are kept.
unsafe impl GlobalAlloc for Counting {
    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to `System` unchanged.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to `System` unchanged.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to `System` unchanged.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to `System` unchanged.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_held() {
        // Other test threads allocate and free at the same time (a run
        // once saw more than 64 KiB of theirs), so the block is large and
        // the allowance for their noise a quarter of it: a count that
        // missed the allocation or the free would still be off by 16 MiB.
        const BLOCK: usize = 16 << 20;
        const NOISE: isize = (BLOCK / 4) as isize;
        start();
        let before = live_bytes();
        let v = vec![0u8; BLOCK];
        let held = live_bytes() - before;
        assert!((held - BLOCK as isize).abs() < NOISE, "{held}");
        drop(v);
        let left = live_bytes() - before;
        assert!(left.abs() < NOISE, "{left}");
    }
}
