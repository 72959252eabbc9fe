//! [`Api<K>`]: typed get/list/create/replace/patch/apply/delete over the
//! host's `kube` interface, kube-rs style.

use std::marker::PhantomData;

use k8s_openapi::NamespaceResourceScope;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::wasmctrl::reconciler::types as wit;
use crate::host::kube;
use crate::{ApiError, Resource};

/// A handle on the objects of kind `K`, in one namespace or in all of them.
///
/// Every call goes through the host, which checks it against the plugin's
/// permission grant (verb × group/resource × namespace; a denied call is
/// [`ApiError::Forbidden`]) and bounds it by the reconcile's deadline
/// ([`ApiError::Timeout`]). `get` and `list` of a kind the plugin watches
/// (`for`, `owns`, `watches`) are served from the host's shared cache, which
/// may lag a write made a moment ago; writes return the object as the API
/// server stored it.
///
/// ```no_run
/// # use wasmctrl_sdk::{Api, ApiError};
/// use wasmctrl_sdk::k8s_openapi::api::apps::v1::Deployment;
///
/// # fn f() -> Result<(), ApiError> {
/// let deployments = Api::<Deployment>::namespaced("default");
/// if let Some(d) = deployments.get_opt("web")? {
///     println!("web wants {:?} replicas", d.spec.replicas);
/// }
/// # Ok(()) }
/// ```
pub struct Api<K> {
    namespace: Option<String>,
    _kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<K> {
    fn clone(&self) -> Self {
        Self {
            namespace: self.namespace.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Api<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl<K: Resource<Scope = NamespaceResourceScope>> Api<K> {
    /// Objects of a namespaced kind in `namespace`.
    pub fn namespaced(namespace: &str) -> Self {
        Self {
            namespace: Some(namespace.to_string()),
            _kind: PhantomData,
        }
    }
}

/// A patch body, serialized to JSON when sent.
#[derive(Debug, Clone)]
pub enum Patch<P: Serialize> {
    /// JSON merge patch (RFC 7386): objects merge, lists are replaced
    /// whole, `null` deletes a key.
    Merge(P),
    /// JSON patch (RFC 6902): `P` serializes to the array of operations,
    /// usually a `Vec<`[`PatchOp`]`>`. Applied atomically: a failed `test`
    /// operation fails the whole patch with [`ApiError::Invalid`].
    Json(P),
    /// Server-side apply of the (partial) object `P` as `field_manager`;
    /// `force` takes over fields another manager owns instead of failing
    /// with [`ApiError::Conflict`]. `P` must carry `apiVersion`, `kind` and
    /// `metadata.name` (typed resources serialize all three; see
    /// [`Api::apply`]).
    Apply {
        body: P,
        field_manager: String,
        force: bool,
    },
}

/// One RFC 6902 operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum PatchOp {
    /// Fails the whole patch unless the value at `path` equals `value`
    /// (`null` also matches an absent key whose parent exists).
    Test {
        path: String,
        value: serde_json::Value,
    },
    Add {
        path: String,
        value: serde_json::Value,
    },
    Replace {
        path: String,
        value: serde_json::Value,
    },
    Remove {
        path: String,
    },
}

impl PatchOp {
    pub fn test(path: impl Into<String>, value: impl Serialize) -> Self {
        Self::Test {
            path: path.into(),
            value: to_value(value),
        }
    }

    pub fn add(path: impl Into<String>, value: impl Serialize) -> Self {
        Self::Add {
            path: path.into(),
            value: to_value(value),
        }
    }

    pub fn replace(path: impl Into<String>, value: impl Serialize) -> Self {
        Self::Replace {
            path: path.into(),
            value: to_value(value),
        }
    }

    pub fn remove(path: impl Into<String>) -> Self {
        Self::Remove { path: path.into() }
    }
}

/// Escapes one JSON-pointer segment (RFC 6901: `~` → `~0`, `/` → `~1`), e.g.
/// a label key in `/metadata/labels/<key>`.
pub fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn to_value(value: impl Serialize) -> serde_json::Value {
    // Only maps with non-string keys fail to convert; a patch cannot hold those.
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

impl<K: Resource> Api<K> {
    /// Objects in every namespace (for a namespaced kind: only `list` makes
    /// sense), or of a cluster-scoped kind.
    pub fn all() -> Self {
        Self {
            namespace: None,
            _kind: PhantomData,
        }
    }

    /// The namespace this handle is scoped to (None: all / cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The object named `name`; [`ApiError::NotFound`] if it does not exist.
    pub fn get(&self, name: &str) -> Result<K, ApiError> {
        self.get_as(name)
    }

    /// The object named `name`, or None if it does not exist.
    pub fn get_opt(&self, name: &str) -> Result<Option<K>, ApiError> {
        self.get_opt_as(name)
    }

    /// The object named `name` read into `V`, a view of the fields the
    /// reconciler needs ([`ApiError::NotFound`] if it does not exist). Only
    /// what `V` names is parsed, so a view of a few fields costs the guest a
    /// fraction of a whole `K`: no `metadata` with its timestamps, labels
    /// and annotations unless `V` asks for them. Fields `V` does not name
    /// are skipped; a field `V` requires and the object lacks is
    /// [`ApiError::Serialization`] (use `#[serde(default)]` or `Option`).
    ///
    /// ```no_run
    /// # use wasmctrl_sdk::{Api, ApiError};
    /// use wasmctrl_sdk::k8s_openapi::api::apps::v1::Deployment;
    ///
    /// #[derive(serde::Deserialize)]
    /// struct Replicas {
    ///     spec: Spec,
    /// }
    /// #[derive(serde::Deserialize)]
    /// struct Spec {
    ///     replicas: Option<i32>,
    /// }
    ///
    /// # fn f() -> Result<(), ApiError> {
    /// let web: Replicas = Api::<Deployment>::namespaced("default").get_as("web")?;
    /// println!("web wants {:?} replicas", web.spec.replicas);
    /// # Ok(()) }
    /// ```
    pub fn get_as<V: DeserializeOwned>(&self, name: &str) -> Result<V, ApiError> {
        decode_as::<K, V>(&kube::get(&gvk::<K>(), self.ns(), name)?)
    }

    /// [`Api::get_as`], or None if the object does not exist.
    pub fn get_opt_as<V: DeserializeOwned>(&self, name: &str) -> Result<Option<V>, ApiError> {
        match self.get_as(name) {
            Ok(view) => Ok(Some(view)),
            Err(ApiError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every object of the kind in this handle's scope.
    pub fn list(&self) -> Result<Vec<K>, ApiError> {
        self.list_inner(None)
    }

    /// The objects whose labels match `selector` (Kubernetes label-selector
    /// syntax: `app=web,tier!=cache`, `env in (a,b)`, `!legacy`).
    pub fn list_by_labels(&self, selector: &str) -> Result<Vec<K>, ApiError> {
        self.list_inner(Some(selector))
    }

    fn list_inner(&self, selector: Option<&str>) -> Result<Vec<K>, ApiError> {
        kube::list(&gvk::<K>(), self.ns(), selector)?
            .iter()
            .map(|item| decode(item))
            .collect()
    }

    /// Creates `obj` ([`ApiError::AlreadyExists`] if the name is taken) and
    /// returns it as stored.
    pub fn create(&self, obj: &K) -> Result<K, ApiError> {
        decode(&kube::create(&gvk::<K>(), self.ns(), &encode(obj)?)?)
    }

    /// Replaces the object named `name` with `obj` (PUT). With
    /// `metadata.resourceVersion` set, a concurrent write makes this fail
    /// with [`ApiError::Conflict`] instead of being overwritten. The status
    /// is not changed (kinds with a status subresource).
    pub fn replace(&self, name: &str, obj: &K) -> Result<K, ApiError> {
        decode(&kube::replace(&gvk::<K>(), self.ns(), name, &encode(obj)?)?)
    }

    /// Patches the object named `name` and returns it as stored.
    pub fn patch<P: Serialize>(&self, name: &str, patch: &Patch<P>) -> Result<K, ApiError> {
        decode(&kube::patch(
            &gvk::<K>(),
            self.ns(),
            name,
            &patch_to_wit(patch)?,
        )?)
    }

    /// Server-side apply of `obj` as `field_manager`: creates the object if
    /// it does not exist, otherwise sets exactly the fields `obj` sets and
    /// removes fields this manager set before but `obj` no longer does.
    /// `force` takes ownership of fields another manager set (what a
    /// controller wants for the objects it owns); without it such fields
    /// fail with [`ApiError::Conflict`]. The name comes from
    /// `metadata.name`; `apiVersion` and `kind` from the type.
    pub fn apply(&self, obj: &K, field_manager: &str, force: bool) -> Result<K, ApiError> {
        let name =
            obj.meta().name.as_deref().ok_or_else(|| {
                ApiError::Invalid("apply: the object has no metadata.name".into())
            })?;
        self.patch(
            name,
            &Patch::Apply {
                body: obj,
                field_manager: field_manager.to_string(),
                force,
            },
        )
    }

    /// Patches the status subresource of the object named `name`.
    pub fn patch_status<P: Serialize>(&self, name: &str, patch: &Patch<P>) -> Result<K, ApiError> {
        decode(&kube::patch_status(
            &gvk::<K>(),
            self.ns(),
            name,
            &patch_to_wit(patch)?,
        )?)
    }

    /// Server-side apply of `status` to the status subresource of the object
    /// named `name`, as `field_manager` (the body sent is `{apiVersion, kind,
    /// metadata: {name}, status}`). Fields this manager set before and
    /// `status` no longer sets are removed.
    pub fn apply_status<S: Serialize>(
        &self,
        name: &str,
        status: &S,
        field_manager: &str,
        force: bool,
    ) -> Result<K, ApiError> {
        #[derive(Serialize)]
        struct Name<'a> {
            name: &'a str,
        }
        #[derive(Serialize)]
        struct StatusBody<'a, S> {
            #[serde(rename = "apiVersion")]
            api_version: &'static str,
            kind: &'static str,
            metadata: Name<'a>,
            status: &'a S,
        }
        self.patch_status(
            name,
            &Patch::Apply {
                body: StatusBody {
                    api_version: K::API_VERSION,
                    kind: K::KIND,
                    metadata: Name { name },
                    status,
                },
                field_manager: field_manager.to_string(),
                force,
            },
        )
    }

    /// Replaces the status of the object named `name` with `obj`'s (PUT to
    /// the status subresource; `metadata.resourceVersion` guards it as for
    /// [`Api::replace`]).
    pub fn replace_status(&self, name: &str, obj: &K) -> Result<K, ApiError> {
        decode(&kube::replace_status(
            &gvk::<K>(),
            self.ns(),
            name,
            &encode(obj)?,
        )?)
    }

    /// Deletes the object named `name` (in the background: dependents are
    /// garbage-collected, and finalizers may keep the object a while).
    /// Returns false if it did not exist.
    pub fn delete(&self, name: &str) -> Result<bool, ApiError> {
        match kube::delete(&gvk::<K>(), self.ns(), name) {
            Ok(()) => Ok(true),
            Err(wit::ApiError::NotFound(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn ns(&self) -> Option<&str> {
        self.namespace.as_deref()
    }
}

pub(crate) fn gvk<K: Resource>() -> wit::Gvk {
    wit::Gvk {
        group: K::GROUP.to_string(),
        version: K::VERSION.to_string(),
        kind: K::KIND.to_string(),
    }
}

fn decode<K: DeserializeOwned + Resource>(json: &str) -> Result<K, ApiError> {
    decode_as::<K, K>(json)
}

/// Parses an object of kind `K` into `V` (`K` itself, or a view of it).
fn decode_as<K: Resource, V: DeserializeOwned>(json: &str) -> Result<V, ApiError> {
    serde_json::from_str(json).map_err(|e| {
        ApiError::Serialization(format!(
            "the {} returned does not match the plugin's type: {e}",
            K::KIND
        ))
    })
}

fn encode(value: &impl Serialize) -> Result<String, ApiError> {
    serde_json::to_string(value)
        .map_err(|e| ApiError::Serialization(format!("cannot serialize the request body: {e}")))
}

fn patch_to_wit<P: Serialize>(patch: &Patch<P>) -> Result<kube::ObjectPatch, ApiError> {
    Ok(match patch {
        Patch::Merge(p) => kube::ObjectPatch::Merge(encode(p)?),
        Patch::Json(p) => kube::ObjectPatch::Json(encode(p)?),
        Patch::Apply {
            body,
            field_manager,
            force,
        } => kube::ObjectPatch::Apply(kube::ApplyPatch {
            body: encode(body)?,
            field_manager: field_manager.clone(),
            force: *force,
        }),
    })
}
