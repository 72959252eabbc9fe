//! Host bindings of the `wasmctrl:reconciler` world (`wit/`).

wasmtime::component::bindgen!({
    world: "reconciler",
    path: "../wit",
    imports: { default: async | trappable },
    exports: { default: async },
    additional_derives: [PartialEq],
});
