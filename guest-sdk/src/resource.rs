//! Typed Kubernetes resources: every k8s-openapi type, and the plugin's own
//! custom resources declared with [`custom_resource!`](crate::custom_resource).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{Gvk, ObjectKey};

/// A Kubernetes object type the SDK can read and write.
///
/// Implemented for every k8s-openapi resource with `ObjectMeta`
/// (`Deployment`, `ConfigMap`, …) and for types declared with
/// [`custom_resource!`](crate::custom_resource). Its type facts come from
/// [`k8s_openapi::Resource`]'s constants, also reachable as functions here
/// without importing that trait. Serializing a value always writes its
/// `apiVersion` and `kind`.
pub trait Resource:
    k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + Serialize + DeserializeOwned
{
    /// The group/version/kind of this type.
    fn gvk() -> Gvk {
        Gvk::new(Self::GROUP, Self::VERSION, Self::KIND)
    }

    /// `apps/v1`, or `v1` for the core group.
    fn api_version() -> &'static str {
        Self::API_VERSION
    }

    /// The API group; "" for the core group.
    fn group() -> &'static str {
        Self::GROUP
    }

    fn version() -> &'static str {
        Self::VERSION
    }

    fn kind() -> &'static str {
        Self::KIND
    }

    /// The plural resource name (`deployments`), as permissions name it.
    fn plural() -> &'static str {
        Self::URL_PATH_SEGMENT
    }

    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.metadata_mut()
    }

    /// `metadata.name`, or "" if unset.
    fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace` (None for cluster-scoped objects).
    fn namespace(&self) -> Option<&str> {
        self.meta().namespace.as_deref()
    }

    /// The object's key: its namespace and name.
    fn key(&self) -> ObjectKey {
        ObjectKey {
            namespace: self.meta().namespace.clone(),
            name: self.name().to_string(),
        }
    }

    /// True once the object is being deleted (`metadata.deletionTimestamp` is set).
    fn is_deleting(&self) -> bool {
        self.meta().deletion_timestamp.is_some()
    }

    /// An ownerReference making this object the controller of another:
    /// `controller: true`, `blockOwnerDeletion: true`. Put it in the owned
    /// object's `metadata.ownerReferences`: the API server garbage-collects
    /// the owned object with its owner, and the host maps the owned object's
    /// events to this object's key (`Metadata::owns`).
    ///
    /// None if the object has no name or uid (it was not read from the API).
    fn controller_owner_ref(&self) -> Option<OwnerReference> {
        let meta = self.meta();
        Some(OwnerReference {
            api_version: Self::API_VERSION.to_string(),
            kind: Self::KIND.to_string(),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            controller: Some(true),
            block_owner_deletion: Some(true),
        })
    }
}

impl<K> Resource for K where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + Serialize
        + DeserializeOwned
{
}

/// The status of a custom resource declared without one.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NoStatus {}

/// Declares a custom resource type: a struct with `metadata`, `spec` and
/// `status`, implementing [`Resource`] (through k8s-openapi's `Resource` and
/// `Metadata` traits) and serde, with `apiVersion`/`kind` written on
/// serialization and ignored on deserialization.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use wasmctrl_sdk::Resource;
///
/// #[derive(Clone, Debug, Serialize, Deserialize)]
/// pub struct WebAppSpec { pub image: String, pub replicas: i32, pub port: i32 }
///
/// #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
/// #[serde(rename_all = "camelCase")]
/// pub struct WebAppStatus { pub observed_generation: Option<i64> }
///
/// wasmctrl_sdk::custom_resource! {
///     /// A web application: one Deployment and one Service.
///     pub struct WebApp {
///         group: "demo.wasmctrl.dev",
///         version: "v1alpha1",
///         plural: "webapps",
///         scope: Namespaced,      // or Cluster
///         spec: WebAppSpec,
///         status: WebAppStatus,   // optional; without it the status is `NoStatus`
///     }
/// }
///
/// let app = WebApp::new("hello", WebAppSpec { image: "nginx".into(), replicas: 2, port: 80 });
/// assert_eq!(WebApp::api_version(), "demo.wasmctrl.dev/v1alpha1");
/// assert_eq!((WebApp::kind(), WebApp::plural()), ("WebApp", "webapps"));
/// assert_eq!(serde_json::to_value(&app).unwrap()["kind"], "WebApp");
/// ```
///
/// The kind is the struct's name. The generated struct derives `Clone` and
/// `Debug` (so the spec and status types must too) and has public fields
/// `metadata: ObjectMeta`, `spec` and `status: Option<_>`, plus
/// `WebApp::new(name, spec)`. The CRD manifest itself is written by hand.
#[macro_export]
macro_rules! custom_resource {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            group: $group:literal,
            version: $version:literal,
            plural: $plural:literal,
            scope: $scope:ident,
            spec: $spec:ty
            $(, status: $status:ty)? $(,)?
        }
    ) => {
        $crate::custom_resource!(@emit
            [$(#[$attr])*] $vis $name, $group, $version, $plural, $scope, $spec,
            [$($status)?]
        );
    };
    (@emit [$($attr:tt)*] $vis:vis $name:ident, $group:literal, $version:literal,
        $plural:literal, $scope:ident, $spec:ty, []) => {
        $crate::custom_resource!(@emit [$($attr)*] $vis $name, $group, $version, $plural,
            $scope, $spec, [$crate::NoStatus]);
    };
    (@emit [$($attr:tt)*] $vis:vis $name:ident, $group:literal, $version:literal,
        $plural:literal, $scope:ident, $spec:ty, [$status:ty]) => {
        $($attr)*
        #[derive(Clone, Debug)]
        $vis struct $name {
            pub metadata: $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
            pub spec: $spec,
            pub status: ::core::option::Option<$status>,
        }

        impl $name {
            /// An object named `name` with `spec` and no status.
            #[allow(dead_code)]
            pub fn new(name: &str, spec: $spec) -> Self {
                Self {
                    metadata: $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: ::core::option::Option::Some(name.into()),
                        ..::core::default::Default::default()
                    },
                    spec,
                    status: ::core::option::Option::None,
                }
            }
        }

        impl $crate::k8s_openapi::Resource for $name {
            const API_VERSION: &'static str = concat!($group, "/", $version);
            const GROUP: &'static str = $group;
            const KIND: &'static str = stringify!($name);
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = $plural;
            type Scope = $crate::custom_resource!(@scope $scope);
        }

        impl $crate::k8s_openapi::ListableResource for $name {
            const LIST_KIND: &'static str = concat!(stringify!($name), "List");
        }

        impl $crate::k8s_openapi::Metadata for $name {
            type Ty = $crate::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

            fn metadata(&self) -> &Self::Ty {
                &self.metadata
            }

            fn metadata_mut(&mut self) -> &mut Self::Ty {
                &mut self.metadata
            }
        }

        impl $crate::__private::serde::Serialize for $name {
            fn serialize<S: $crate::__private::serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::core::result::Result<S::Ok, S::Error> {
                $crate::__private::serialize_object::<Self, _, _, S>(
                    &self.metadata,
                    &self.spec,
                    &self.status,
                    serializer,
                )
            }
        }

        impl<'de> $crate::__private::serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::__private::serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::core::result::Result<Self, D::Error> {
                let parts: $crate::__private::ObjectParts<$spec, $status> =
                    $crate::__private::serde::Deserialize::deserialize(deserializer)?;
                ::core::result::Result::Ok(Self {
                    metadata: parts.metadata,
                    spec: parts.spec,
                    status: parts.status,
                })
            }
        }
    };
    (@scope Namespaced) => { $crate::k8s_openapi::NamespaceResourceScope };
    (@scope Cluster) => { $crate::k8s_openapi::ClusterResourceScope };
}

/// Serde plumbing for [`custom_resource!`](crate::custom_resource).
#[doc(hidden)]
pub mod plumbing {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::{Deserialize, Serialize, Serializer};

    #[derive(Serialize)]
    struct ObjectRef<'a, S, St> {
        #[serde(rename = "apiVersion")]
        api_version: &'static str,
        kind: &'static str,
        metadata: &'a ObjectMeta,
        spec: &'a S,
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'a St>,
    }

    pub fn serialize_object<K, S, St, Ser>(
        metadata: &ObjectMeta,
        spec: &S,
        status: &Option<St>,
        serializer: Ser,
    ) -> Result<Ser::Ok, Ser::Error>
    where
        K: k8s_openapi::Resource,
        S: Serialize,
        St: Serialize,
        Ser: Serializer,
    {
        ObjectRef {
            api_version: K::API_VERSION,
            kind: K::KIND,
            metadata,
            spec,
            status: status.as_ref(),
        }
        .serialize(serializer)
    }

    /// The fields of a custom object; `apiVersion` and `kind` are ignored
    /// (list items from an API server often lack them).
    #[derive(Deserialize)]
    pub struct ObjectParts<S, St> {
        #[serde(default)]
        pub metadata: ObjectMeta,
        pub spec: S,
        pub status: Option<St>,
    }
}
