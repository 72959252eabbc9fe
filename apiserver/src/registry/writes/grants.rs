//! Writes of RBAC objects: what they grant is checked for their author by
//! the check the HTTP layer gives the write (`auth::escalation`), as the
//! create and update rules (`prepare`) finish, so every verb that writes
//! an object is covered.

use serde_json::Value;

use super::context::WriteCtx;
use super::rbac::{GRANTING_FIELDS, GROUP};
use crate::error::ApiError;
use crate::registry::Objects;
use crate::registry::resources::ResourceInfo;

impl Objects {
    /// Runs `ctx`'s check of what `new` grants, for an object of the RBAC
    /// group, as it would be stored; `old` is the object an update
    /// replaces (None: a create). An update that leaves the rules,
    /// `roleRef`, `subjects`, `aggregationRule` and labels as they were
    /// grants nothing new (labels choose the roles an aggregated
    /// ClusterRole takes its rules from).
    pub(crate) fn check_grants(
        &self,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        new: &Value,
        old: Option<&Value>,
        ctx: &WriteCtx,
    ) -> Result<(), ApiError> {
        let Some(check) = &ctx.grants else {
            return Ok(());
        };
        if info.group != GROUP {
            return Ok(());
        }
        let same = |old: &Value| {
            GRANTING_FIELDS
                .iter()
                .all(|field| old.get(field) == new.get(field))
                && old.pointer("/metadata/labels") == new.pointer("/metadata/labels")
        };
        if old.is_some_and(same) {
            return Ok(());
        }
        let ns = self.ns_for(info, ns);
        check.check(&self.store, &info.plural, &ns, name, old, new)
    }
}
