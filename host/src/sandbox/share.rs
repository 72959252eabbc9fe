//! Guests' share of the CPU between plugins.
//!
//! Epoch ticks are the only moments the host regains control of a running
//! guest. Were every tick just to yield, a plugin whose keys spin to their
//! deadline would keep `maxConcurrentReconciles` cores busy and slow every
//! other plugin on the host (docs/RELIABILITY.md, fairness). So, while
//! another plugin has work, the time a guest ran since it last resumed is
//! charged at each tick past its call's first [`FREE_TICKS`] (and at
//! those too, while the plugin is already held back) to its plugin's clock,
//! a token bucket in GCRA form (as in the rate limiters): running for `t`
//! costs `t / share` of wall time, the clock may run up to
//! [`GuestCpu::burst`] worth of run time ahead of now, and a guest beyond
//! that sleeps until the clock allows it. The run time is measured, not
//! counted in ticks: on a saturated machine the ticker thread itself waits
//! for a core, and a guest then runs several ticks' worth between two of
//! them. All calls of a
//! plugin share its clock, so its long calls together get at most
//! [`GuestCpu::share_millicores`] of one core after a burst, however many
//! run at once and however often they start over.
//!
//! Ordinary reconciles never run past their free ticks; a plugin alone on
//! the host is never slowed; a cancelled guest winding down is never
//! slowed; and a held-back guest still ends at its deadline, which bounds
//! its sleep.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Another plugin that started a call this recently still counts as having
/// work: a plugin of short reconciles is between two of them most of the
/// time, and must not look idle to its spinning neighbour. A second, not
/// less: a plugin's work is more than its calls (the watch events before
/// them, the writes after), and with a window of 100 ms a neighbour's
/// spinning guests took both cores in every gap between its reconciles,
/// which is where its next event was being read (docs/RELIABILITY.md,
/// fairness).
const RECENT: Duration = Duration::from_secs(1);

/// Ticks of each call not charged while the plugin is within its burst: a
/// reconcile that runs less than this (nearly all of them; an interpreted
/// guest's fresh instance takes 1–3 ms) is not held back unless its plugin's
/// long calls already are.
pub const FREE_TICKS: u64 = 5;

/// How guests share the CPU when more than one plugin has work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestCpu {
    /// The guest CPU time a plugin's long calls may take at once, beyond
    /// their share, before they are held back (the bucket's depth).
    pub burst: Duration,
    /// The CPU, in thousandths of a core, that all of a plugin's long calls
    /// get together while another plugin has work.
    pub share_millicores: u32,
}

impl Default for GuestCpu {
    fn default() -> Self {
        Self {
            burst: Duration::from_millis(50),
            share_millicores: 100,
        }
    }
}

impl GuestCpu {
    /// The shortest `burst`: one epoch tick, the step CPU is charged in.
    pub const MIN_BURST: Duration = Duration::from_millis(1);
    /// The values `share_millicores` may take: at least a tick per 100
    /// ticks, at most more than any host has cores.
    pub const SHARE_MILLICORES: RangeInclusive<u64> = 10..=1024 * 1000;
}

/// One plugin's activity, shared by every version of it (a hot swap, a
/// candidate) that runs under its name.
#[derive(Debug)]
pub(crate) struct PluginActivity {
    name: Arc<str>,
    in_flight: AtomicU32,
    /// When a call last started, in ms after [`CpuShare::origin`].
    last_start: AtomicU64,
    /// The plugin's clock (GCRA's theoretical arrival time): when its
    /// charged ticks would have been paid for at its share.
    clock: Mutex<Option<Instant>>,
}

/// Marks a call in flight until dropped.
pub(crate) struct Running<'a>(&'a PluginActivity);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The runtime's record of which plugins have work, and the sharing rule.
#[derive(Debug)]
pub(crate) struct CpuShare {
    /// The plugin's share, in thousandths of a core.
    millicores: u128,
    /// How far ahead of now a plugin's clock may run without waiting.
    tolerance: Duration,
    origin: Instant,
    plugins: Mutex<HashMap<Arc<str>, Weak<PluginActivity>>>,
}

impl CpuShare {
    pub(crate) fn new(config: GuestCpu) -> Self {
        let millicores = u128::from(config.share_millicores.max(1));
        Self {
            millicores,
            // `burst` of CPU, in the clock's (wall-time) units.
            tolerance: scale(config.burst, millicores),
            origin: Instant::now(),
            plugins: Mutex::new(HashMap::new()),
        }
    }

    /// The activity record of the plugin called `name`: the one its other
    /// live versions use, or a new one.
    pub(crate) fn activity(&self, name: &Arc<str>) -> Arc<PluginActivity> {
        let mut plugins = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(live) = plugins.get(name).and_then(Weak::upgrade) {
            return live;
        }
        plugins.retain(|_, a| a.strong_count() > 0);
        let activity = Arc::new(PluginActivity {
            name: name.clone(),
            in_flight: AtomicU32::new(0),
            last_start: AtomicU64::new(0),
            clock: Mutex::new(None),
        });
        plugins.insert(name.clone(), Arc::downgrade(&activity));
        activity
    }

    /// Marks a call of `activity`'s plugin, started `at`, in flight until
    /// the guard drops.
    pub(crate) fn enter<'a>(&self, activity: &'a PluginActivity, at: Instant) -> Running<'a> {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity
            .last_start
            .store(self.millis(at), Ordering::Relaxed);
        Running(activity)
    }

    /// Called at each tick of a call of `me`, the call's `ticks`-th, the
    /// guest having run for `ran` since it last resumed: when the guest
    /// should run again (None: now). A call's first [`FREE_TICKS`] run
    /// uncharged unless the plugin is in debt (its long
    /// calls already wait for their share: then a new call must not start
    /// with free ticks, or a plugin retrying spinning keys would take them
    /// on top of its share). Ticks are charged only while another plugin
    /// has work.
    pub(crate) fn throttle(
        &self,
        me: &PluginActivity,
        now: Instant,
        ticks: u64,
        ran: Duration,
    ) -> Option<Instant> {
        if ticks <= FREE_TICKS && !self.in_debt(me, now) {
            return None;
        }
        if !self.contended(me, now) {
            return None;
        }
        let mut clock = me.clock.lock().unwrap_or_else(|e| e.into_inner());
        let due = clock.map_or(now, |c| c.max(now));
        *clock = Some(due + scale(ran, self.millicores));
        let allowed = due.checked_sub(self.tolerance).unwrap_or(now);
        (allowed > now).then_some(allowed)
    }

    /// Whether `me`'s next charged tick would have to wait.
    fn in_debt(&self, me: &PluginActivity, now: Instant) -> bool {
        let clock = me.clock.lock().unwrap_or_else(|e| e.into_inner());
        clock.is_some_and(|c| c > now + self.tolerance)
    }

    /// Whether a plugin other than `me` has a call in flight or started one
    /// within [`RECENT`].
    fn contended(&self, me: &PluginActivity, now: Instant) -> bool {
        let recent = self.millis(now).saturating_sub(millis(RECENT));
        let plugins = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        plugins
            .iter()
            .filter(|(name, _)| **name != me.name)
            .filter_map(|(_, a)| a.upgrade())
            .any(|a| {
                a.in_flight.load(Ordering::Relaxed) > 0
                    || a.last_start.load(Ordering::Relaxed) > recent
            })
    }

    fn millis(&self, at: Instant) -> u64 {
        // +1: a call started in the first millisecond is still "started".
        millis(at.saturating_duration_since(self.origin)) + 1
    }
}

/// `d` of CPU in wall time at a share of `millicores`.
fn scale(d: Duration, millicores: u128) -> Duration {
    Duration::from_nanos(u64::try_from(d.as_nanos() * 1000 / millicores).unwrap_or(u64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(1);
    /// A tick of a call past its free ticks.
    const LONG: u64 = FREE_TICKS + 1;

    /// 100m after a burst of 3 ms: a charged tick costs 10 ms of clock and
    /// the clock may run 30 ms ahead.
    fn share(millicores: u32) -> CpuShare {
        CpuShare::new(GuestCpu {
            burst: Duration::from_millis(3),
            share_millicores: millicores,
        })
    }

    /// Runs `check` with a call of plugin "spinner" in flight beside one of
    /// a busy "neighbour" (100m after a 3 ms burst), from instant `t0`.
    fn beside_a_busy_neighbour(check: impl FnOnce(&CpuShare, &PluginActivity, Instant)) {
        let share = share(100);
        let me = share.activity(&"spinner".into());
        let other = share.activity(&"neighbour".into());
        let _mine = share.enter(&me, Instant::now());
        let _theirs = share.enter(&other, Instant::now());
        check(&share, &me, Instant::now());
    }

    #[test]
    fn a_plugin_alone_is_never_throttled() {
        let share = share(100);
        let me = share.activity(&"spinner".into());
        let _running = share.enter(&me, Instant::now());
        let now = Instant::now();
        for i in 0..100 {
            assert_eq!(share.throttle(&me, now + i * TICK, LONG, TICK), None);
        }
    }

    #[test]
    fn beside_a_busy_plugin_ticks_past_the_burst_are_spaced_to_the_share() {
        beside_a_busy_neighbour(|share, me, t0| {
            // The burst: the tick due now and 3 more (30 ms of clock) run at
            // once, each moving the clock 10 ms on.
            for i in 0..4 {
                assert_eq!(share.throttle(me, t0, LONG, TICK), None, "tick {i}");
            }
            // The clock is now 40 ms ahead: the next tick waits until it is
            // within 30 ms of now, and so on, one tick per 10 ms.
            assert_eq!(share.throttle(me, t0, LONG, TICK), Some(t0 + 10 * TICK));
            assert_eq!(
                share.throttle(me, t0 + 10 * TICK, LONG, TICK),
                Some(t0 + 20 * TICK)
            );
            // Another call of the plugin shares the clock: the plugin's total
            // is bounded, not each call's.
            assert_eq!(
                share.throttle(me, t0 + 10 * TICK, LONG, TICK),
                Some(t0 + 30 * TICK)
            );
            // Long after, the bucket has refilled: a burst again.
            assert_eq!(share.throttle(me, t0 + 1000 * TICK, LONG, TICK), None);
            assert_eq!(share.throttle(me, t0 + 1000 * TICK, LONG, TICK), None);
        });
    }

    #[test]
    fn the_time_a_guest_ran_is_charged_not_the_ticks_counted() {
        beside_a_busy_neighbour(|share, me, t0| {
            // One late tick after 4 ms of running costs 40 ms of clock: the
            // burst (30 ms ahead) is spent, and the next tick waits 10 ms.
            assert_eq!(share.throttle(me, t0, LONG, 4 * TICK), None);
            assert_eq!(share.throttle(me, t0, LONG, TICK), Some(t0 + 10 * TICK));
        });
    }

    #[test]
    fn a_neighbour_that_started_recently_still_counts_then_stops_counting() {
        let share = share(100);
        let me = share.activity(&"spinner".into());
        let other = share.activity(&"neighbour".into());
        drop(share.enter(&other, Instant::now()));
        let _mine = share.enter(&me, Instant::now());
        let now = Instant::now();
        assert!(share.contended(&me, now));
        assert!(!share.contended(&me, now + RECENT + 2 * TICK));
    }

    #[test]
    fn versions_of_one_plugin_share_one_record_and_never_throttle_each_other() {
        let share = share(100);
        let v1 = share.activity(&"p".into());
        let v2 = share.activity(&"p".into());
        assert!(Arc::ptr_eq(&v1, &v2));
        let _a = share.enter(&v1, Instant::now());
        let _b = share.enter(&v2, Instant::now());
        assert!(!share.contended(&v1, Instant::now()));
        // Once every version is gone, the name is free for a new record.
        drop(_a);
        drop(_b);
        drop(v1);
        drop(v2);
        let v3 = share.activity(&"p".into());
        assert_eq!(v3.in_flight.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_first_ticks_of_a_call_are_free_unless_the_plugin_is_in_debt() {
        beside_a_busy_neighbour(|share, me, t0| {
            // Free ticks charge nothing: the burst is all there afterwards.
            for ticks in 1..=FREE_TICKS {
                assert_eq!(share.throttle(me, t0, ticks, TICK), None);
            }
            for _ in 0..4 {
                assert_eq!(share.throttle(me, t0, LONG, TICK), None);
            }
            // In debt, a new call's first tick waits like any other.
            assert_eq!(share.throttle(me, t0, 1, TICK), Some(t0 + 10 * TICK));
        });
    }
}
