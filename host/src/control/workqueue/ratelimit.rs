//! Rate limiters: how long a key waits before it is retried.
//!
//! These are client-go's `workqueue` rate limiters
//! (`k8s.io/client-go/util/workqueue/default_rate_limiters.go`) with the same
//! arithmetic, so a controller ported from controller-runtime backs off exactly
//! as it did there. A [`WorkQueue`](super::WorkQueue) calls
//! [`RateLimiter::when`] from `add_rate_limited` and [`RateLimiter::forget`]
//! when a reconcile succeeds.
//!
//! All time is read from [`tokio::time::Instant`], so tests drive the limiters
//! with paused tokio time instead of sleeping.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// What a queue and its rate limiters key on (an object key in a
/// controller).
pub trait QueueKey: Clone + Eq + std::hash::Hash + Send + Sync + 'static {}

impl<T: Clone + Eq + std::hash::Hash + Send + Sync + 'static> QueueKey for T {}

/// Decides how long a key waits before it is retried.
///
/// Implementations are shared by every worker of a queue, hence `Send + Sync`
/// and `&self` methods.
pub trait RateLimiter<K>: Send + Sync {
    /// Delay before `key` may be retried; counts a failure for per-item limiters.
    fn when(&self, key: &K) -> Duration;
    /// Stop tracking `key` (reset its failures).
    fn forget(&self, key: &K);
    /// How many failures `key` has had since its last forget.
    fn num_requeues(&self, key: &K) -> u32;
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Box<R> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key)
    }
    fn num_requeues(&self, key: &K) -> u32 {
        (**self).num_requeues(key)
    }
}

/// The limiters' state is a plain counter map that stays consistent even if a
/// holder panicked, so a poisoned lock is not a reason to stop rate limiting.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Per-key exponential backoff: `base * 2^failures`, capped at `max`.
///
/// The n-th call to [`when`](RateLimiter::when) for a key (counting from 0
/// since its last [`forget`](RateLimiter::forget)) returns `base * 2^n`.
///
/// # No overflow
/// The delay is computed in integer nanoseconds; once it would exceed `max`
/// (or any representable value) the result is `max`, however many failures
/// have been counted. The failure counter saturates at `u32::MAX`.
///
/// # Forget resets
/// After `forget(key)` the next delay for `key` is `base` again.
pub struct ItemExponentialFailureRateLimiter<K> {
    failures: Mutex<HashMap<K, u32>>,
    base: Duration,
    max: Duration,
}

impl<K: QueueKey> ItemExponentialFailureRateLimiter<K> {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            failures: Mutex::new(HashMap::new()),
            base,
            max,
        }
    }

    fn backoff(&self, exp: u32) -> Duration {
        let max = self.max.as_nanos();
        let backoff = 1u128
            .checked_shl(exp)
            .and_then(|factor| self.base.as_nanos().checked_mul(factor))
            .filter(|&nanos| nanos <= max);
        match backoff {
            Some(nanos) => duration_from_nanos(nanos),
            None => self.max,
        }
    }
}

/// `nanos` is at most some `Duration::as_nanos()`, so the seconds fit in a u64.
fn duration_from_nanos(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    Duration::new(
        (nanos / NANOS_PER_SEC) as u64,
        (nanos % NANOS_PER_SEC) as u32,
    )
}

impl<K: QueueKey> RateLimiter<K> for ItemExponentialFailureRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let exp = {
            let mut failures = lock(&self.failures);
            let count = failures.entry(key.clone()).or_insert(0);
            let exp = *count;
            *count = count.saturating_add(1);
            exp
        };
        self.backoff(exp)
    }

    fn forget(&self, key: &K) {
        lock(&self.failures).remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        lock(&self.failures).get(key).copied().unwrap_or(0)
    }
}

/// A token bucket shared by all keys: `qps` tokens per second, at most `burst`
/// stored, starting full.
///
/// This is `golang.org/x/time/rate`'s `Limiter.Reserve().Delay()`, which is
/// what client-go's `BucketRateLimiter` returns: every call to
/// [`when`](RateLimiter::when) *reserves* one token, taking the bucket into
/// debt if it is empty, and returns how long until that token exists. So the
/// first `burst` calls return zero and each further call in the same instant
/// waits `1/qps` longer than the previous one; the debt is repaid as time
/// passes.
///
/// Edge cases follow `x/time/rate`: an infinite `qps` never delays; a `qps`
/// that is not positive (or NaN) never refills, and `burst == 0` can never
/// grant a token, both of which yield [`BucketRateLimiter::NEVER`] once the
/// bucket is empty.
///
/// Keys are not tracked: [`forget`](RateLimiter::forget) does nothing and
/// [`num_requeues`](RateLimiter::num_requeues) is always 0.
pub struct BucketRateLimiter {
    qps: f64,
    refill: Refill,
    burst: u32,
    state: Mutex<Bucket>,
}

impl std::fmt::Debug for BucketRateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketRateLimiter")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

/// Which bucket of [`BucketRateLimiter::reserve_with`] held a reservation
/// back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBy {
    Own,
    Shared,
}

/// How the bucket refills; `x/time/rate`'s `Inf` and non-positive limits are
/// special cases there too.
#[derive(Clone, Copy)]
enum Refill {
    Unlimited,
    PerSecond(f64),
    Never,
}

struct Bucket {
    /// Tokens available at `last`; negative when reservations are owed.
    tokens: f64,
    last: Instant,
}

impl BucketRateLimiter {
    /// The delay returned when no token will ever be available: Go's
    /// `rate.InfDuration` (`math.MaxInt64` nanoseconds, about 292 years).
    pub const NEVER: Duration = Duration::from_nanos(i64::MAX as u64);

    pub fn new(qps: f64, burst: u32) -> Self {
        let refill = if qps == f64::INFINITY {
            Refill::Unlimited
        } else if qps > 0.0 {
            Refill::PerSecond(qps)
        } else {
            Refill::Never
        };
        Self {
            qps,
            refill,
            burst,
            state: Mutex::new(Bucket {
                tokens: f64::from(burst),
                last: Instant::now(),
            }),
        }
    }

    /// Reserves one token and returns the wait until it is available.
    pub fn reserve(&self) -> Duration {
        if let Refill::Unlimited = self.refill {
            return Duration::ZERO;
        }
        if self.burst == 0 {
            return Self::NEVER;
        }
        let now = Instant::now();
        let mut bucket = lock(&self.state);
        let (tokens, wait) = self.take(&bucket, now);
        bucket.tokens = tokens;
        bucket.last = now;
        wait
    }

    /// The tokens per second it was made with.
    pub fn qps(&self) -> f64 {
        self.qps
    }

    /// The tokens it stores at most.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// Reserves one token of this bucket and, when given, one of `shared`,
    /// together, and returns the longer of their waits; when that wait is
    /// not zero, only if `admit` accepts it. A refused reservation takes
    /// nothing from either bucket: a caller that gives up must not push
    /// the wait of everyone else sharing `shared` further out (this is
    /// x/time/rate's `Wait` with a deadline, not its `Reserve`).
    ///
    /// The buckets are locked own first, shared second, so callers sharing
    /// a bucket never lock in opposite orders.
    pub fn reserve_with(
        &self,
        shared: Option<&Self>,
        admit: impl FnOnce(Duration) -> bool,
    ) -> Result<Duration, (HeldBy, Duration)> {
        let now = Instant::now();
        let mut own = lock(&self.state);
        let (own_tokens, own_wait) = self.take(&own, now);
        let Some(shared) = shared else {
            if !own_wait.is_zero() && !admit(own_wait) {
                return Err((HeldBy::Own, own_wait));
            }
            own.tokens = own_tokens;
            own.last = now;
            return Ok(own_wait);
        };
        let mut common = lock(&shared.state);
        let (shared_tokens, shared_wait) = shared.take(&common, now);
        let wait = own_wait.max(shared_wait);
        if !wait.is_zero() && !admit(wait) {
            let by = if shared_wait > own_wait {
                HeldBy::Shared
            } else {
                HeldBy::Own
            };
            return Err((by, wait));
        }
        own.tokens = own_tokens;
        own.last = now;
        common.tokens = shared_tokens;
        common.last = now;
        Ok(wait)
    }

    /// What taking one token at `now` leaves in `bucket`, and the wait until
    /// that token exists.
    fn take(&self, bucket: &Bucket, now: Instant) -> (f64, Duration) {
        match self.refill {
            Refill::Unlimited => return (bucket.tokens, Duration::ZERO),
            // x/time/rate refuses a reservation larger than the burst, and a
            // refused reservation's delay is InfDuration.
            _ if self.burst == 0 => return (bucket.tokens, Self::NEVER),
            _ => {}
        }
        // A reservation made by another thread may carry a later `last`; treat
        // the elapsed time as zero then, as x/time/rate does.
        let elapsed = now.saturating_duration_since(bucket.last);
        let tokens = (bucket.tokens + self.tokens_from(elapsed)).min(f64::from(self.burst)) - 1.0;
        let wait = if tokens < 0.0 {
            self.duration_from(-tokens)
        } else {
            Duration::ZERO
        };
        (tokens, wait)
    }

    fn tokens_from(&self, elapsed: Duration) -> f64 {
        match self.refill {
            Refill::PerSecond(qps) => elapsed.as_secs_f64() * qps,
            Refill::Unlimited | Refill::Never => 0.0,
        }
    }

    fn duration_from(&self, tokens: f64) -> Duration {
        let Refill::PerSecond(qps) = self.refill else {
            return Self::NEVER;
        };
        // Go truncates the float nanoseconds to an integer Duration.
        let nanos = tokens / qps * 1e9;
        if nanos >= Self::NEVER.as_nanos() as f64 {
            Self::NEVER
        } else {
            Duration::from_nanos(nanos as u64)
        }
    }
}

impl<K> RateLimiter<K> for BucketRateLimiter {
    fn when(&self, _key: &K) -> Duration {
        self.reserve()
    }
    fn forget(&self, _key: &K) {}
    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

/// `fast` for the first `max_fast_attempts` failures of a key, `slow` after.
pub struct ItemFastSlowRateLimiter<K> {
    failures: Mutex<HashMap<K, u32>>,
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
}

impl<K: QueueKey> ItemFastSlowRateLimiter<K> {
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        Self {
            failures: Mutex::new(HashMap::new()),
            fast,
            slow,
            max_fast_attempts,
        }
    }
}

impl<K: QueueKey> RateLimiter<K> for ItemFastSlowRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let mut failures = lock(&self.failures);
        let count = failures.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        if *count <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, key: &K) {
        lock(&self.failures).remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        lock(&self.failures).get(key).copied().unwrap_or(0)
    }
}

/// The strictest of several limiters.
///
/// [`when`](RateLimiter::when) asks *every* limiter (so each one counts the
/// failure or reserves its token) and returns the longest delay;
/// [`forget`](RateLimiter::forget) forgets in all of them;
/// [`num_requeues`](RateLimiter::num_requeues) is the largest count. An empty
/// list never delays.
pub struct MaxOfRateLimiter<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> MaxOfRateLimiter<K> {
    pub fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        self.limiters
            .iter()
            .map(|limiter| limiter.when(key))
            .fold(Duration::ZERO, Duration::max)
    }

    fn forget(&self, key: &K) {
        for limiter in &self.limiters {
            limiter.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

/// client-go's `DefaultControllerRateLimiter` settings: per-key
/// exponential backoff from 5 ms to 1000 s, under an overall 10 qps / 100
/// burst token bucket.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(5);
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1000);
pub const DEFAULT_QPS: f64 = 10.0;
pub const DEFAULT_BURST: u32 = 100;

/// The most a controller limiter may be given: a backoff of a year (which
/// bounds every deadline), and a bucket of a million tokens (per second).
pub const MAX_DELAY: Duration = Duration::from_secs(365 * 24 * 3600);
pub const MAX_QPS: f64 = 1e6;
pub const MAX_BURST: u32 = 1_000_000;

/// client-go's `DefaultControllerRateLimiter`: an overall 10 qps / 100 burst
/// token bucket, and per-key exponential backoff from 5 ms to 1000 s.
pub fn default_controller_rate_limiter<K: QueueKey>() -> MaxOfRateLimiter<K> {
    controller_rate_limiter(
        DEFAULT_BASE_DELAY,
        DEFAULT_MAX_DELAY,
        DEFAULT_QPS,
        DEFAULT_BURST,
    )
}

/// The default controller limiter's shape with every field chosen: per-key
/// exponential backoff `base_delay..=max_delay`, bounded overall by a
/// `qps`/`burst` token bucket. This is what a plugin's `rateLimiter` config
/// block builds.
pub fn controller_rate_limiter<K: QueueKey>(
    base_delay: Duration,
    max_delay: Duration,
    qps: f64,
    burst: u32,
) -> MaxOfRateLimiter<K> {
    MaxOfRateLimiter::new(vec![
        Box::new(BucketRateLimiter::new(qps, burst)),
        Box::new(ItemExponentialFailureRateLimiter::new(
            base_delay, max_delay,
        )),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::advance;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn exponential_doubles_from_base() {
        let rl = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        let delays: Vec<_> = (0..6).map(|_| rl.when(&"a")).collect();
        assert_eq!(
            delays,
            [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS, 160 * MS]
        );
        assert_eq!(rl.num_requeues(&"a"), 6);
        // Keys back off independently.
        assert_eq!(rl.when(&"b"), 5 * MS);
        assert_eq!(rl.num_requeues(&"b"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn exponential_capped_at_max() {
        let rl = ItemExponentialFailureRateLimiter::new(5 * MS, 30 * MS);
        let delays: Vec<_> = (0..5).map(|_| rl.when(&"a")).collect();
        assert_eq!(delays, [5 * MS, 10 * MS, 20 * MS, 30 * MS, 30 * MS]);
    }

    #[tokio::test(start_paused = true)]
    async fn forget_resets() {
        let rl = ItemExponentialFailureRateLimiter::new(5 * MS, Duration::from_secs(1000));
        rl.when(&"a");
        rl.when(&"a");
        rl.forget(&"a");
        assert_eq!(rl.num_requeues(&"a"), 0);
        assert_eq!(rl.when(&"a"), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn no_overflow() {
        let max = Duration::from_secs(1000);
        let rl = ItemExponentialFailureRateLimiter::new(5 * MS, max);
        for _ in 0..200 {
            assert!(rl.when(&"a") <= max);
        }
        assert_eq!(rl.when(&"a"), max);
        assert_eq!(rl.num_requeues(&"a"), 201);

        // The largest possible base and cap still saturate instead of wrapping.
        let rl = ItemExponentialFailureRateLimiter::new(Duration::MAX, Duration::MAX);
        assert_eq!(rl.when(&"a"), Duration::MAX);
        assert_eq!(rl.when(&"a"), Duration::MAX);

        // A counter at u32::MAX saturates rather than wrapping back to base.
        lock(&rl.failures).insert("a", u32::MAX);
        assert_eq!(rl.when(&"a"), Duration::MAX);
        assert_eq!(rl.num_requeues(&"a"), u32::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_burst_then_one_over_qps_per_reservation() {
        let rl = BucketRateLimiter::new(10.0, 3);
        let when = |rl: &BucketRateLimiter| RateLimiter::<&str>::when(rl, &"any");
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), 100 * MS);
        assert_eq!(when(&rl), 200 * MS);
        assert_eq!(when(&rl), 300 * MS);
        assert_eq!(RateLimiter::<&str>::num_requeues(&rl, &"any"), 0);
        RateLimiter::<&str>::forget(&rl, &"any");
        assert_eq!(when(&rl), 400 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_refills_with_time() {
        let rl = BucketRateLimiter::new(10.0, 2);
        let when = |rl: &BucketRateLimiter| RateLimiter::<u32>::when(rl, &0);
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), 100 * MS);
        // The owed token is repaid after 100 ms and one more has accrued after 200 ms.
        advance(200 * MS).await;
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), 100 * MS);
        // A long pause refills at most `burst` tokens.
        advance(Duration::from_secs(60)).await;
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), Duration::ZERO);
        assert_eq!(when(&rl), 100 * MS);
        // Half the interval repays half a token.
        advance(50 * MS).await;
        assert_eq!(when(&rl), 150 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_edge_rates() {
        let when = |rl: &BucketRateLimiter| RateLimiter::<u32>::when(rl, &0);
        let unlimited = BucketRateLimiter::new(f64::INFINITY, 0);
        assert!((0..1000).all(|_| when(&unlimited).is_zero()));

        let no_refill = BucketRateLimiter::new(0.0, 1);
        assert_eq!(when(&no_refill), Duration::ZERO);
        assert_eq!(when(&no_refill), BucketRateLimiter::NEVER);
        advance(Duration::from_secs(3600)).await;
        assert_eq!(when(&no_refill), BucketRateLimiter::NEVER);

        let no_burst = BucketRateLimiter::new(10.0, 0);
        assert_eq!(when(&no_burst), BucketRateLimiter::NEVER);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shared_bucket_bounds_its_sharers_together() {
        // Two plugins of 10/s each (burst 20) under a host budget of 2/s
        // (burst 4); a request may wait up to 1 s.
        let shared = BucketRateLimiter::new(2.0, 4);
        let (a, b) = (
            BucketRateLimiter::new(10.0, 20),
            BucketRateLimiter::new(10.0, 20),
        );
        let within = |wait: Duration| wait <= Duration::from_secs(1);
        let mut admitted = Vec::new();
        for i in 0..20 {
            let plugin = if i % 2 == 0 { &a } else { &b };
            admitted.push(plugin.reserve_with(Some(&shared), within));
        }
        // The budget's burst, then 0.5 s and 1 s of debt; every request
        // after that is refused by the shared bucket, whichever plugin
        // sends it.
        let ok: Vec<Duration> = admitted.iter().filter_map(|r| r.ok()).collect();
        assert_eq!(
            ok,
            [Duration::ZERO; 4]
                .into_iter()
                .chain([500 * MS, 1000 * MS])
                .collect::<Vec<_>>()
        );
        assert!(
            admitted[6..]
                .iter()
                .all(|r| matches!(r, Err((HeldBy::Shared, w)) if *w == 1500 * MS)),
            "{admitted:?}"
        );
        // The refusals took nothing: half a second repays exactly one token.
        advance(500 * MS).await;
        assert_eq!(a.reserve_with(Some(&shared), within), Ok(1000 * MS));
        assert_eq!(
            b.reserve_with(Some(&shared), within),
            Err((HeldBy::Shared, 1500 * MS))
        );
        // The plugins' own buckets were only charged for what was admitted.
        assert_eq!(a.reserve_with(None, within), Ok(Duration::ZERO));
    }

    #[tokio::test(start_paused = true)]
    async fn an_own_bucket_holds_back_before_a_roomier_shared_one() {
        let shared = BucketRateLimiter::new(100.0, 200);
        let own = BucketRateLimiter::new(1.0, 1);
        let within = |wait: Duration| wait <= 500 * MS;
        assert_eq!(own.reserve_with(Some(&shared), within), Ok(Duration::ZERO));
        assert_eq!(
            own.reserve_with(Some(&shared), within),
            Err((HeldBy::Own, Duration::from_secs(1)))
        );
        // Alone, a refused reservation takes nothing either.
        assert_eq!(
            own.reserve_with(None, within),
            Err((HeldBy::Own, Duration::from_secs(1)))
        );
        advance(Duration::from_secs(1)).await;
        assert_eq!(own.reserve_with(None, within), Ok(Duration::ZERO));
        // `admit` is asked only about a wait.
        let never = |_: Duration| unreachable!("no wait to admit");
        advance(Duration::from_secs(1)).await;
        assert_eq!(own.reserve_with(Some(&shared), never), Ok(Duration::ZERO));
        assert_eq!((own.qps(), own.burst()), (1.0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn fast_then_slow() {
        let rl = ItemFastSlowRateLimiter::new(MS, 10 * MS, 3);
        let delays: Vec<_> = (0..5).map(|_| rl.when(&"a")).collect();
        assert_eq!(delays, [MS, MS, MS, 10 * MS, 10 * MS]);
        assert_eq!(rl.num_requeues(&"a"), 5);
        assert_eq!(rl.when(&"b"), MS);
        rl.forget(&"a");
        assert_eq!(rl.num_requeues(&"a"), 0);
        assert_eq!(rl.when(&"a"), MS);
    }

    #[tokio::test(start_paused = true)]
    async fn max_of_takes_the_larger() {
        let rl: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
            Box::new(ItemFastSlowRateLimiter::new(
                5 * MS,
                Duration::from_secs(3),
                3,
            )),
            Box::new(ItemExponentialFailureRateLimiter::new(
                MS,
                Duration::from_secs(1),
            )),
        ]);
        // fast 5 ms beats 1, 2, 4 ms; then slow 3 s beats 8 ms...; exponential caps at 1 s.
        let delays: Vec<_> = (0..5).map(|_| rl.when(&"a")).collect();
        assert_eq!(
            delays,
            [
                5 * MS,
                5 * MS,
                5 * MS,
                Duration::from_secs(3),
                Duration::from_secs(3)
            ]
        );
        assert_eq!(rl.num_requeues(&"a"), 5);
        rl.forget(&"a");
        assert_eq!(rl.num_requeues(&"a"), 0);
        assert_eq!(rl.when(&"a"), 5 * MS);

        let empty: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(Vec::new());
        assert_eq!(empty.when(&"a"), Duration::ZERO);
        assert_eq!(empty.num_requeues(&"a"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn max_of_asks_every_limiter() {
        let rl: MaxOfRateLimiter<&str> = MaxOfRateLimiter::new(vec![
            Box::new(ItemExponentialFailureRateLimiter::new(
                MS,
                Duration::from_secs(1),
            )),
            Box::new(ItemFastSlowRateLimiter::new(MS, MS, 1)),
        ]);
        rl.when(&"a");
        rl.when(&"a");
        // Both counted both failures even though only one delay was used each time.
        assert_eq!(rl.limiters[0].num_requeues(&"a"), 2);
        assert_eq!(rl.limiters[1].num_requeues(&"a"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_limiter() {
        let rl = default_controller_rate_limiter::<u32>();
        // 100 distinct keys fit in the burst: each gets the exponential base.
        for key in 0..100 {
            assert_eq!(rl.when(&key), 5 * MS, "key {key}");
        }
        // Then the shared bucket dominates: 10 qps means 100 ms more per reservation.
        assert_eq!(rl.when(&100), 100 * MS);
        assert_eq!(rl.when(&101), 200 * MS);
        // A key's own backoff still wins once it exceeds the bucket's wait.
        advance(Duration::from_secs(60)).await;
        let delays: Vec<_> = (0..8).map(|_| rl.when(&0)).collect();
        assert_eq!(delays[0], 10 * MS); // key 0 already failed once above
        assert_eq!(delays[7], 1280 * MS);
        assert_eq!(rl.num_requeues(&0), 9);
        rl.forget(&0);
        assert_eq!(rl.num_requeues(&0), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn configured_controller_limiter() {
        let rl = controller_rate_limiter::<u32>(MS, 4 * MS, 1.0, 2);
        assert_eq!(rl.when(&1), MS);
        assert_eq!(rl.when(&1), 2 * MS);
        // Bucket now empty: the third reservation waits a whole second.
        assert_eq!(rl.when(&1), Duration::from_secs(1));
    }
}
