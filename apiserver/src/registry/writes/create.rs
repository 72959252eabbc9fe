//! POST: creating an object, with a generated name when asked.

use serde_json::{Value, json};

use super::context::WriteCtx;
use super::errors::internal;
use super::rules::obj_name;
use crate::admission::Operation;
use crate::error::ApiError;
use crate::registry::Objects;
use crate::registry::resources::ResourceInfo;
use crate::registry::storage::{Change, Expect, StoreError};
use crate::registry::views::{from_view, to_view};
use crate::values::{meta_str, metadata_mut, random_suffix};

impl Objects {
    /// POST: creates the object (201 in the caller). Mutating webhooks see
    /// the object as sent (before a name is generated); validating ones
    /// see each attempt as it would be stored.
    pub(crate) async fn create_object(
        &self,
        info: &ResourceInfo,
        ns: &str,
        mut body: Value,
        ctx: &WriteCtx,
    ) -> Result<Value, ApiError> {
        self.check_type(info, &body)?;
        let ns = self.ns_for(info, ns);
        let admitting = self.admitting(info, None, ctx);
        if let Some(a) = &admitting {
            a.typed(&mut body);
            let name = meta_str(&body, "name").unwrap_or("").to_string();
            let options = a.write_options(Operation::Create);
            a.mutate(
                Operation::Create,
                (&ns, &name),
                Some(&mut body),
                None,
                options,
            )
            .await?;
            self.check_type(info, &body)?;
        }
        let generate = meta_str(&body, "name").is_none_or(str::is_empty)
            && meta_str(&body, "generateName").is_some_and(|g| !g.is_empty());
        let attempts = if generate { 8 } else { 1 };
        let mut last_err = None;
        for _ in 0..attempts {
            let mut obj = from_view(info, body.clone());
            if generate {
                let prefix = meta_str(&obj, "generateName").unwrap_or("").to_string();
                metadata_mut(&mut obj)
                    .insert("name".into(), json!(format!("{prefix}{}", random_suffix())));
            }
            let obj = self.prepare_create(info, &ns, obj, ctx, true)?;
            let name = obj_name(&obj);
            if let Some(a) = &admitting {
                let options = a.write_options(Operation::Create);
                a.validate(
                    Operation::Create,
                    (&ns, &name),
                    Some(&to_view(info, &obj)),
                    None,
                    options,
                )
                .await?;
            }
            match self.commit(info, &ns, &name, Expect::Absent, Change::Put(obj), ctx) {
                Ok(c) => return Ok(to_view(info, &c.object)),
                Err(StoreError::Mismatch(_)) => {
                    last_err = Some(ApiError::already_exists(&info.group, &info.plural, &name))
                }
                Err(e) => return Err(self.store_error(info, &name, e)),
            }
        }
        Err(last_err.unwrap_or_else(|| internal("create failed")))
    }
}
