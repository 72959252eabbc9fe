//! The WebApp's admission webhooks: a validator that refuses what the
//! operator cannot run, and a defaulter that fills in what a user may
//! leave out.
//!
//! - `spec.replicas` must be within 0–50.
//! - `spec.image` must name a tag (`nginx:1.27`) or a digest
//!   (`nginx@sha256:…`): an image without one follows whatever `latest`
//!   becomes, so two replicas may run different code.
//! - `spec.replicas` defaults to 1 (the spec type's own default), and every
//!   WebApp gets the label `app.kubernetes.io/managed-by: wasmctrl`.

use wasmctrl_sdk::admission::{
    AdmissionRequest, Defaulter, Denied, FieldErrors, Validator, Warnings,
};

use crate::WebApp;

/// The most replicas a WebApp may ask for.
pub const MAX_REPLICAS: i32 = 50;
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

pub struct WebAppAdmission;

impl Validator for WebAppAdmission {
    type Kind = WebApp;

    fn validate_create(app: &WebApp, _: &AdmissionRequest) -> Result<Warnings, Denied> {
        let mut errors = FieldErrors::new();
        if !(0..=MAX_REPLICAS).contains(&app.spec.replicas) {
            errors.invalid(
                "spec.replicas",
                app.spec.replicas,
                &format!("must be between 0 and {MAX_REPLICAS}"),
            );
        }
        if !pinned(&app.spec.image) {
            errors.invalid(
                "spec.image",
                &app.spec.image,
                "must name a tag (name:tag) or a digest (name@sha256:…)",
            );
        }
        errors.into_result(app)?;
        Ok(Warnings::new())
    }
}

impl Defaulter for WebAppAdmission {
    type Kind = WebApp;

    fn default(app: &mut WebApp, _: &AdmissionRequest) -> Result<(), Denied> {
        app.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(MANAGED_BY.into(), "wasmctrl".into());
        Ok(())
    }
}

/// Whether `image` names a tag or a digest. A registry's port
/// (`localhost:5000/web`) is not a tag: the tag is after the last `/`.
fn pinned(image: &str) -> bool {
    let last = image.rsplit('/').next().unwrap_or(image);
    image.contains('@') || last.contains(':')
}

#[cfg(test)]
mod tests {
    use wasmctrl_sdk::testing::FakeCluster;

    use super::*;
    use crate::WebAppSpec;

    fn app(image: &str, replicas: i32) -> WebApp {
        let mut app = WebApp::new(
            "hello",
            WebAppSpec {
                image: image.into(),
                replicas,
                port: 80,
            },
        );
        app.metadata.namespace = Some("default".into());
        app
    }

    #[test]
    fn a_webapp_outside_the_rules_is_refused_naming_each_field() {
        let cluster = FakeCluster::new();
        assert_eq!(
            cluster.validate_create::<WebAppAdmission>(&app("nginx:1.27", 3)),
            Ok(vec![])
        );
        let denied = cluster
            .validate_create::<WebAppAdmission>(&app("registry:5000/nginx", 51))
            .unwrap_err();
        assert_eq!(denied.code(), 422);
        assert_eq!(
            denied.message(),
            "WebApp.demo.wasmctrl.dev \"hello\" is invalid: [spec.replicas: Invalid value: 51: must be between 0 and 50, spec.image: Invalid value: \"registry:5000/nginx\": must name a tag (name:tag) or a digest (name@sha256:…)]"
        );
        let fields: Vec<String> = denied.causes().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["spec.replicas", "spec.image"]);
        assert!(
            cluster
                .validate_update::<WebAppAdmission>(&app("nginx:1", 1), &app("nginx", 1))
                .is_err(),
            "an update is validated as a create"
        );
        assert!(pinned("nginx@sha256:abc") && pinned("r:5000/nginx:1") && !pinned("nginx"));
    }

    #[test]
    fn a_webapp_is_labelled_and_keeps_everything_else() {
        let cluster = FakeCluster::new();
        let mut given = app("nginx:1.27", 2);
        given.metadata.labels = Some([("team".to_string(), "web".to_string())].into());
        let admitted = cluster.default_object::<WebAppAdmission>(&given).unwrap();
        let labels = admitted.metadata.labels.unwrap();
        assert_eq!(labels[MANAGED_BY], "wasmctrl");
        assert_eq!(labels["team"], "web");
        assert_eq!(admitted.spec, given.spec);
    }
}
