//! A component of the wrong world: `metadata` and `reconcile` exist but have
//! the wrong types. Loading it must fail with an error naming the export.

wit_bindgen::generate!({ world: "reconciler", path: "wit" });

struct Wrong;

impl Guest for Wrong {
    fn metadata() -> String {
        "wrong".into()
    }

    fn reconcile(key: String) -> u32 {
        key.len() as u32
    }
}

export!(Wrong);
