//! An informer's events, fanned out to its subscribers: a broadcast queue
//! that holds only the events some subscriber has not read yet.
//!
//! `tokio::sync::broadcast` allocates its whole ring when it is created
//! (~40 B a slot): at [`super::EVENT_BUFFER`] slots that was ~40 KiB per
//! informer, held for the life of an idle plugin whose informer had seen a
//! handful of events. Here an event is queued once, whatever the number of
//! subscribers, and leaves the queue when the last subscriber reads it; an
//! empty queue gives its memory back.
//!
//! The semantics are the broadcast channel's: a subscriber receives every
//! event sent after it subscribed, in order; one that falls more than the
//! queue's capacity behind is told it lagged (the oldest events were
//! dropped for it) and goes on from the oldest event still queued; events
//! sent while nobody is subscribed are dropped; once every sender is gone a
//! subscriber reads what is left and then learns the queue is closed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// A queue emptied of a burst keeps at most this many slots allocated.
const KEPT_SLOTS: usize = 16;

/// What a subscriber receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Received<T> {
    Event(T),
    /// Events were dropped for this subscriber: it fell too far behind.
    Lagged,
    /// Every sender is gone and every event was read.
    Closed,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Woken on every send, and when the last sender goes.
    sent: Notify,
}

struct State<T> {
    /// Events some subscriber has still to read, oldest first, each with
    /// how many subscribers have still to read it.
    queue: VecDeque<(T, usize)>,
    /// Sequence number of `queue[0]`.
    head: u64,
    capacity: usize,
    receivers: usize,
    senders: usize,
}

impl<T> State<T> {
    /// Drops the events every subscriber has read, and the memory of a
    /// queue emptied of a burst.
    fn trim(&mut self) {
        while self.queue.front().is_some_and(|(_, unread)| *unread == 0) {
            self.queue.pop_front();
            self.head += 1;
        }
        if self.queue.is_empty() && self.queue.capacity() > KEPT_SLOTS {
            self.queue = VecDeque::new();
        }
    }
}

/// The sending side; clones send into the same queue.
pub(super) struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// One subscriber's position in the queue.
pub(super) struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// Sequence number of the next event this subscriber reads.
    next: u64,
}

/// A queue holding at most `capacity` unread events (at least one).
pub(super) fn channel<T: Clone>(capacity: usize) -> Sender<T> {
    Sender {
        shared: Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                head: 0,
                capacity: capacity.max(1),
                receivers: 0,
                senders: 1,
            }),
            sent: Notify::new(),
        }),
    }
}

impl<T: Clone> Sender<T> {
    /// Queues `event` for every current subscriber (dropped when there is
    /// none). A full queue drops its oldest event first: the subscribers
    /// that had not read it lag.
    pub(super) fn send(&self, event: T) {
        {
            let mut state = self.shared.state.lock().unwrap();
            if state.receivers == 0 {
                return;
            }
            if state.queue.len() >= state.capacity {
                state.queue.pop_front();
                state.head += 1;
            }
            let receivers = state.receivers;
            state.queue.push_back((event, receivers));
        }
        self.shared.sent.notify_waiters();
    }

    /// A subscriber that receives the events sent from now on.
    pub(super) fn subscribe(&self) -> Receiver<T> {
        let mut state = self.shared.state.lock().unwrap();
        state.receivers += 1;
        Receiver {
            shared: self.shared.clone(),
            next: state.head + state.queue.len() as u64,
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().unwrap().senders += 1;
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let last = {
            let mut state = self.shared.state.lock().unwrap();
            state.senders -= 1;
            state.senders == 0
        };
        if last {
            self.shared.sent.notify_waiters();
        }
    }
}

impl<T: Clone> Receiver<T> {
    /// The next event, waiting for one if need be.
    pub(super) async fn recv(&mut self) -> Received<T> {
        loop {
            // Registered before the queue is looked at, so a send between
            // the look and the wait still wakes this subscriber.
            let sent = self.shared.sent.notified();
            let mut sent = std::pin::pin!(sent);
            sent.as_mut().enable();
            if let Some(received) = self.shared.try_recv(&mut self.next) {
                return received;
            }
            sent.await;
        }
    }
}

impl<T: Clone> Shared<T> {
    /// The event at `next` for a subscriber if one is queued (None: none
    /// yet), moving `next` past what it returns.
    fn try_recv(&self, next: &mut u64) -> Option<Received<T>> {
        let mut state = self.state.lock().unwrap();
        if *next < state.head {
            *next = state.head;
            return Some(Received::Lagged);
        }
        let index = usize::try_from(*next - state.head).expect("queue index fits usize");
        if let Some((event, unread)) = state.queue.get_mut(index) {
            *unread -= 1;
            let event = event.clone();
            *next += 1;
            state.trim();
            return Some(Received::Event(event));
        }
        (state.senders == 0).then_some(Received::Closed)
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock().unwrap();
        state.receivers -= 1;
        let start = usize::try_from(self.next.saturating_sub(state.head)).unwrap_or(usize::MAX);
        for (_, unread) in state.queue.iter_mut().skip(start) {
            *unread -= 1;
        }
        state.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued<T>(tx: &Sender<T>) -> (usize, usize) {
        let state = tx.shared.state.lock().unwrap();
        (state.queue.len(), state.queue.capacity())
    }

    #[tokio::test]
    async fn every_subscriber_reads_every_later_event_in_order() {
        let tx = channel(8);
        tx.send(0);
        let mut a = tx.subscribe();
        let mut b = tx.subscribe();
        tx.send(1);
        tx.send(2);
        for rx in [&mut a, &mut b] {
            assert_eq!(rx.recv().await, Received::Event(1));
            assert_eq!(rx.recv().await, Received::Event(2));
        }
        assert_eq!(queued(&tx).0, 0, "read by all: gone");
        let mut c = tx.subscribe();
        tx.send(3);
        assert_eq!(c.recv().await, Received::Event(3));
        assert_eq!(a.recv().await, Received::Event(3));
    }

    #[tokio::test]
    async fn a_subscriber_too_far_behind_lags_and_goes_on_from_the_oldest() {
        let tx = channel(2);
        let mut slow = tx.subscribe();
        let mut fast = tx.subscribe();
        for i in 0..5 {
            tx.send(i);
            assert_eq!(fast.recv().await, Received::Event(i));
        }
        assert_eq!(slow.recv().await, Received::Lagged);
        assert_eq!(slow.recv().await, Received::Event(3));
        assert_eq!(slow.recv().await, Received::Event(4));
        assert_eq!(queued(&tx).0, 0);
    }

    #[tokio::test]
    async fn a_waiting_subscriber_is_woken_by_a_send() {
        let tx = channel(4);
        let mut rx = tx.subscribe();
        let waiting = tokio::spawn(async move { rx.recv().await });
        tokio::task::yield_now().await;
        tx.send(7);
        assert_eq!(waiting.await.unwrap(), Received::Event(7));
    }

    #[tokio::test]
    async fn closed_once_every_sender_is_gone_and_the_rest_is_read() {
        let tx = channel(4);
        let other = tx.clone();
        let mut rx = tx.subscribe();
        tx.send(1);
        drop(tx);
        other.send(2);
        let waiting = tokio::spawn(async move {
            let mut seen = Vec::new();
            loop {
                match rx.recv().await {
                    Received::Event(e) => seen.push(e),
                    other => return (seen, other),
                }
            }
        });
        tokio::task::yield_now().await;
        drop(other);
        assert_eq!(waiting.await.unwrap(), (vec![1, 2], Received::Closed));
    }

    #[test]
    fn nothing_is_kept_without_subscribers_or_after_a_burst() {
        let tx = channel(1024);
        tx.send(0);
        assert_eq!(queued(&tx), (0, 0), "no subscriber: dropped");
        let rx = tx.subscribe();
        for i in 0..500 {
            tx.send(i);
        }
        assert_eq!(queued(&tx).0, 500);
        drop(rx);
        assert_eq!(queued(&tx), (0, 0), "a dropped subscriber holds nothing");
        let mut rx = tx.subscribe();
        for i in 0..500 {
            tx.send(i);
        }
        while let Some(Received::Event(_)) = rx.shared.try_recv(&mut rx.next) {}
        assert_eq!(queued(&tx), (0, 0), "a burst read gives its memory back");
    }
}
