//! The bench binary's allocator: live heap bytes of this process for the
//! memory benchmarks (`scale`, `density`), counting only when switched on,
//! so the timing benchmarks pay one relaxed load per allocation and nothing
//! else; and which allocator backs the process.
//!
//! Every benchmark process is this binary. The controllers under test use
//! the system allocator (glibc), as the shipped `wasmctrl` binary does. The
//! embedded API server's process uses mimalloc ([`APISERVER_ENV`]): under
//! glibc its CPU per `throughput` round grew 2.4 → 5.5 s within one run
//! (freeing the trees of the watch history it had grown, `clear_page`
//! refaults, `malloc_consolidate`), so the API server, not the controller,
//! set the pace of later rounds (docs/BENCHMARKS.md, `throughput`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU8, AtomicUsize, Ordering};

use mimalloc::MiMalloc;

pub struct Counting;

/// Set to `mimalloc` in a process's environment, it allocates with
/// mimalloc; anything else (or unset), with the system allocator.
pub const ALLOCATOR_ENV: &std::ffi::CStr = c"WASMCTRL_BENCH_ALLOCATOR";

/// Which allocator the API server process gets (`mimalloc` unless this is
/// set, e.g. to `system` to reproduce the figures taken before).
pub const APISERVER_ENV: &str = "WASMCTRL_BENCH_APISERVER_ALLOCATOR";

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const MIMALLOC: u8 = 2;

/// Decided at the process's first allocation, before any free, and never
/// changed: every block goes back to the allocator that made it.
static BACKEND: AtomicU8 = AtomicU8::new(UNDECIDED);

fn backend() -> u8 {
    match BACKEND.load(Ordering::Relaxed) {
        UNDECIDED => {
            // SAFETY: `getenv` with a NUL-terminated name; it allocates
            // nothing, so it may run inside the allocator. The first
            // allocation happens before `main`, on the only thread.
            let value = unsafe { libc::getenv(ALLOCATOR_ENV.as_ptr()) };
            let named = if value.is_null() {
                b"".as_slice()
            } else {
                // SAFETY: a non-null `getenv` result is a NUL-terminated
                // string, which outlives this call (nothing sets the
                // environment before the first allocation).
                unsafe { std::ffi::CStr::from_ptr(value) }.to_bytes()
            };
            let chosen = if backend_for(named) == "mimalloc" {
                MIMALLOC
            } else {
                SYSTEM
            };
            BACKEND.store(chosen, Ordering::Relaxed);
            chosen
        }
        chosen => chosen,
    }
}

/// The backend a value of [`ALLOCATOR_ENV`] selects: `mimalloc`, and the
/// system allocator for anything else (or nothing).
pub fn backend_for(value: &[u8]) -> &'static str {
    if value == b"mimalloc" {
        "mimalloc"
    } else {
        "system"
    }
}

/// The allocator this process runs on, for the benchmarks' headers.
pub fn backend_name() -> &'static str {
    if backend() == MIMALLOC {
        "mimalloc"
    } else {
        "system"
    }
}

static ON: AtomicBool = AtomicBool::new(false);

/// Counter shards, one cache line each: one shared counter made every
/// allocation and free of a busy multi-threaded host pass its cache line
/// between the CPUs (12% of the host's time while `scale` drained a
/// resync), which the shipped binary does not pay.
const SHARDS: usize = 16;

#[repr(align(64))]
struct Shard(AtomicIsize);

static LIVE: [Shard; SHARDS] = [const { Shard(AtomicIsize::new(0)) }; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    /// This thread's shard, taken in turn at its first counted allocation.
    /// Constant-initialized and without a destructor, so reading it never
    /// allocates and works while the thread exits.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Starts counting (allocations made before are not known: call it first).
pub fn start() {
    ON.store(true, Ordering::SeqCst);
}

/// Bytes allocated and not freed since [`start`].
pub fn live_bytes() -> isize {
    LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum()
}

fn count(delta: isize) {
    if ON.load(Ordering::Relaxed) {
        let shard = SHARD.with(|shard| {
            if shard.get() == usize::MAX {
                shard.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS);
            }
            shard.get()
        });
        LIVE[shard].0.fetch_add(delta, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the one backend the process
// chose before its first allocation; only counts are kept.
unsafe impl GlobalAlloc for Counting {
    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to the backend unchanged.
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe {
            if backend() == MIMALLOC {
                MiMalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to the backend unchanged.
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe {
            if backend() == MIMALLOC {
                MiMalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to the backend unchanged.
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: same contract as the caller's; `ptr` came from the same
        // backend, which never changes.
        unsafe {
            if backend() == MIMALLOC {
                MiMalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    // SAFETY: an `unsafe fn` of `GlobalAlloc`: the caller keeps its
    // contract, which this forwards to the backend unchanged.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's; `ptr` came from the same
        // backend, which never changes.
        let p = unsafe {
            if backend() == MIMALLOC {
                MiMalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        };
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
