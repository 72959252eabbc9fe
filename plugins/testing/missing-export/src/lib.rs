//! A component with no `metadata` export. Loading it must fail with an error
//! naming the missing export.

wit_bindgen::generate!({ world: "reconciler", path: "wit" });

struct Missing;

impl Guest for Missing {
    fn reconcile(key: String) -> Result<String, String> {
        Ok(key)
    }
}

export!(Missing);
