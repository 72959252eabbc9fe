//! The crates' modules form no import cycle, so each layer can be read (and
//! tested) without the ones above it.

use std::path::Path;

use wasmctrl::test_util::module_cycles;

fn assert_acyclic(crate_dir: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let cycles = module_cycles(&src);
    assert!(
        cycles.is_empty(),
        "import cycles among the modules of {crate_dir}: {cycles:?}"
    );
}

#[test]
fn the_host_modules_form_no_cycle() {
    assert_acyclic("host");
}

#[test]
fn the_apiserver_modules_form_no_cycle() {
    assert_acyclic("apiserver");
}
