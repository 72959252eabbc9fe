//! The `noop` reconciler built with `core` and `alloc` only, so that its
//! component imports no WASI interface: the Rust standard library of
//! `wasm32-wasip2` imports environment, exit, the standard streams and the
//! terminal interfaces (for its panic messages and stdio), which every
//! instance links and every fresh instance pays for. The `dispatch`
//! benchmark times a fresh instance of this plugin beside `noop`'s
//! (docs/BENCHMARKS.md, "What a leaner guest gives a fresh instance").
//!
//! Its reconcile calls `kube.get` only for a key no benchmark uses, so that
//! the component keeps the shape of a reconciler that reads objects: an
//! import that returns a string is lowered through the shim and fixup
//! modules, as in every SDK plugin.
#![cfg_attr(target_arch = "wasm32", no_std)]

#[cfg(target_arch = "wasm32")]
mod guest {
    extern crate alloc;

    use alloc::string::ToString;
    use alloc::vec::Vec;
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;

    wit_bindgen::generate!({ world: "reconciler", path: "../../../wit" });

    use wasmctrl::reconciler::kube;
    use wasmctrl::reconciler::types::Gvk;

    /// A bump allocator over a fixed arena in the module's data, which
    /// starts over once everything it handed out is freed (at the end of
    /// each call). The arena is part of the initial memory, so no
    /// `memory.grow` is paid per instance; running out traps.
    struct Arena {
        bytes: UnsafeCell<[u8; ARENA]>,
        state: UnsafeCell<(usize, usize)>,
    }

    const ARENA: usize = 64 << 10;

    // SAFETY: a component instance runs one thread.
    unsafe impl Sync for Arena {}

    // SAFETY: `alloc` returns null or `layout.size()` bytes at a multiple
    // of `layout.align()` inside the arena, past every block still live:
    // blocks are handed out in increasing order, and the arena starts over
    // only once `live` says none is left. `dealloc` frees nothing early; it
    // only counts.
    unsafe impl GlobalAlloc for Arena {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: single-threaded; see `Sync` above.
            let (next, live) = unsafe { &mut *self.state.get() };
            let base = self.bytes.get() as usize;
            let start = (base + *next).next_multiple_of(layout.align());
            if start + layout.size() > base + ARENA {
                return core::ptr::null_mut();
            }
            *next = start + layout.size() - base;
            *live += 1;
            start as *mut u8
        }

        unsafe fn dealloc(&self, _: *mut u8, _: Layout) {
            // SAFETY: single-threaded; see `Sync` above.
            let (next, live) = unsafe { &mut *self.state.get() };
            *live -= 1;
            if *live == 0 {
                *next = 0;
            }
        }
    }

    #[global_allocator]
    static ALLOCATOR: Arena = Arena {
        bytes: UnsafeCell::new([0; ARENA]),
        state: UnsafeCell::new((0, 0)),
    };

    #[panic_handler]
    fn panic(_: &core::panic::PanicInfo) -> ! {
        core::arch::wasm32::unreachable()
    }

    /// The canonical ABI's allocation entry point, which `std` builds get
    /// from wit-bindgen's runtime.
    ///
    /// # Safety
    /// Called by the canonical ABI only: `align` is a power of two, and
    /// `old` is null with `old_len` 0, or a block this function returned
    /// with `old_len` bytes and alignment `align`.
    // SAFETY: the one symbol of this name in the module, which the
    // canonical ABI looks up by it: without std, wit-bindgen's runtime
    // does not export its own.
    #[unsafe(no_mangle)]
    unsafe extern "C" fn cabi_realloc(
        old: *mut u8,
        old_len: usize,
        align: usize,
        new_len: usize,
    ) -> *mut u8 {
        if new_len == 0 {
            return align as *mut u8;
        }
        // SAFETY: the canonical ABI passes a valid alignment, and `old` is
        // null or what this function returned with `old_len`.
        let p = unsafe {
            let layout = Layout::from_size_align_unchecked(new_len, align);
            if old_len == 0 {
                alloc::alloc::alloc(layout)
            } else {
                let old_layout = Layout::from_size_align_unchecked(old_len, align);
                alloc::alloc::realloc(old, old_layout, new_len)
            }
        };
        if p.is_null() {
            core::arch::wasm32::unreachable()
        }
        p
    }

    struct NoopLean;

    impl Guest for NoopLean {
        fn metadata() -> PluginMetadata {
            PluginMetadata {
                name: "noop-lean".to_string(),
                version: "0.1.0".to_string(),
                for_: Gvk {
                    group: "".to_string(),
                    version: "v1".to_string(),
                    kind: "ConfigMap".to_string(),
                },
                owns: Vec::new(),
                watches: Vec::new(),
                permissions: Vec::new(),
            }
        }

        fn reconcile(key: ObjectKey) -> Result<Action, ReconcileError> {
            if key.name == "read-me" {
                let gvk = Gvk {
                    group: "".to_string(),
                    version: "v1".to_string(),
                    kind: "ConfigMap".to_string(),
                };
                kube::get(&gvk, key.namespace.as_deref(), &key.name)
                    .map_err(|_| ReconcileError::Transient("get".to_string()))?;
            }
            Ok(Action {
                requeue: false,
                requeue_after_ms: 0,
            })
        }
    }

    export!(NoopLean);
}
