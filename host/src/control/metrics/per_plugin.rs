//! [`PluginFamily`]: a family whose series each belong to one plugin, and
//! leave with it.
//!
//! Plugins come and go at runtime (a config reload, a `WasmReconciler`
//! object created and deleted), and each one's name is a label value. A
//! plain [`Family`] keeps every series it ever created, so a stream of
//! short-lived plugins, under names an object author picks, would grow the
//! host's memory and every scrape without bound. prometheus-client can
//! remove a series only by its exact label set, so the family remembers
//! which label sets each plugin created.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::family::{Family, MetricConstructor};

use super::labels::{
    CallLabels, ControllerLabel, ControllerVersionLabels, HostApiLabels, HttpRequestLabels,
    LimitLabels, NameLabel, PluginKindLabels, PluginLabel, PluginReasonLabels, PluginVersionLabels,
    PluginVersionResultLabels, QueueDepthLabels, ReloadLabels, ResultLabels, TrapLabels,
    WebhookCodeLabels, WebhookDecisionLabels, WebhookLabel,
};

/// A label set that names the plugin its series belongs to: the `plugin`
/// label, or the `controller`, queue `name` or `webhook` path a plugin's
/// name is part of.
pub trait OfPlugin {
    fn plugin(&self) -> &str;
}

/// A [`Family`] whose series are forgotten, all of one plugin's at once,
/// when the plugin is removed ([`PluginFamily::forget`]). Clones share the
/// series.
#[derive(Debug)]
pub struct PluginFamily<L, M, C = fn() -> M> {
    family: Family<L, M, C>,
    /// Each plugin's label sets, written only when a series is created.
    created: Arc<Mutex<HashMap<String, Vec<L>>>>,
}

impl<L, M, C: Clone> Clone for PluginFamily<L, M, C> {
    fn clone(&self) -> Self {
        Self {
            family: self.family.clone(),
            created: self.created.clone(),
        }
    }
}

impl<L, M: Default> Default for PluginFamily<L, M>
where
    L: Clone + Hash + Eq,
{
    fn default() -> Self {
        Self {
            family: Family::default(),
            created: Arc::default(),
        }
    }
}

impl<L, M, C> PluginFamily<L, M, C>
where
    L: Clone + Hash + Eq + OfPlugin,
    M: Clone,
    C: MetricConstructor<M> + Clone,
{
    /// A family whose new series are made by `constructor`.
    pub fn new_with_constructor(constructor: C) -> Self {
        Self {
            family: Family::new_with_constructor(constructor),
            created: Arc::default(),
        }
    }

    /// The series of `labels` (a handle on the value `/metrics` shows),
    /// created on first use.
    pub fn get_or_create(&self, labels: &L) -> M {
        if let Some(series) = self.family.get(labels) {
            return series.clone();
        }
        // Under the lock, so that two first uses record the set once.
        let mut created = self.created.lock().unwrap();
        if self.family.get(labels).is_none() {
            created
                .entry(labels.plugin().to_owned())
                .or_default()
                .push(labels.clone());
        }
        self.family.get_or_create_owned(labels)
    }

    /// Drops every series of `plugin` from the family. Handles already held
    /// keep counting, unseen; a later use of the same labels starts anew.
    pub fn forget(&self, plugin: &str) {
        let sets = self.created.lock().unwrap().remove(plugin);
        for labels in sets.into_iter().flatten() {
            self.family.remove(&labels);
        }
    }

    /// Whether the series of `labels` exists.
    #[cfg(test)]
    fn contains(&self, labels: &L) -> bool {
        self.family.get(labels).is_some()
    }

    /// The family itself, sharing its series: what the registry encodes.
    pub(super) fn family(&self) -> Family<L, M, C> {
        self.family.clone()
    }
}

macro_rules! of_plugin {
    ($($labels:ty => $field:ident),* $(,)?) => {
        $(impl OfPlugin for $labels {
            fn plugin(&self) -> &str {
                &self.$field
            }
        })*
    };
}

of_plugin!(
    NameLabel => name,
    QueueDepthLabels => name,
    ControllerLabel => controller,
    ControllerVersionLabels => controller,
    ResultLabels => controller,
    PluginLabel => plugin,
    PluginKindLabels => plugin,
    WebhookDecisionLabels => plugin,
    HttpRequestLabels => plugin,
    PluginVersionLabels => plugin,
    PluginVersionResultLabels => plugin,
    PluginReasonLabels => plugin,
    TrapLabels => plugin,
    CallLabels => plugin,
    ReloadLabels => plugin,
    LimitLabels => plugin,
    HostApiLabels => plugin,
);

/// The plugin of a webhook path, `/<validate|mutate>/<plugin>`.
fn webhook_plugin(path: &str) -> &str {
    path.splitn(3, '/').nth(2).unwrap_or(path)
}

impl OfPlugin for WebhookLabel {
    fn plugin(&self) -> &str {
        webhook_plugin(&self.webhook)
    }
}

impl OfPlugin for WebhookCodeLabels {
    fn plugin(&self) -> &str {
        webhook_plugin(&self.webhook)
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[test]
    fn forgetting_a_plugin_drops_its_series_and_keeps_the_others() {
        let family = PluginFamily::<HostApiLabels, Counter>::default();
        let labels = |plugin: &str, code: &str| HostApiLabels {
            plugin: plugin.into(),
            verb: "get".into(),
            resource: "configmaps".into(),
            code: code.into(),
        };
        family.get_or_create(&labels("a", "200")).inc();
        family.get_or_create(&labels("a", "200")).inc();
        family.get_or_create(&labels("a", "404")).inc();
        family.get_or_create(&labels("b", "200")).inc();

        family.forget("a");
        assert!(!family.contains(&labels("a", "200")));
        assert!(!family.contains(&labels("a", "404")));
        assert!(family.created.lock().unwrap().get("a").is_none());
        assert_eq!(family.get_or_create(&labels("b", "200")).get(), 1);
        assert_eq!(
            family.get_or_create(&labels("a", "200")).get(),
            0,
            "a plugin added again under the same name starts anew"
        );
        family.forget("never-there");
        assert!(family.contains(&labels("b", "200")));
    }

    #[test]
    fn a_webhook_path_names_its_plugin() {
        assert_eq!(webhook_plugin("/validate/webapp"), "webapp");
        assert_eq!(webhook_plugin("/mutate/team-a.webapp"), "team-a.webapp");
    }
}
