//! The `context` values one call read: recorded in order for a transcript,
//! or played back from one so a replayed reconcile sees what the recorded
//! one saw.
//!
//! Only the values that change between runs are taped: the deadline left,
//! the cancellation and whether a log level is kept. The attempt and the
//! settings are part of the transcript itself.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Reads kept per call; a guest polling `cancelled` in a loop is recorded
/// up to here, then counted in [`ContextTape::dropped`].
pub const MAX_CONTEXT_READS: usize = 1024;

/// One value a guest read from its `context`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "read", content = "value", rename_all = "kebab-case")]
pub enum ContextRead {
    DeadlineRemainingMs(u64),
    Cancelled(bool),
    /// The level asked about (`trace` … `error`) and the answer.
    LogEnabled {
        level: String,
        enabled: bool,
    },
}

/// Records a call's context reads, or replays recorded ones.
#[derive(Debug)]
pub struct ContextTape {
    state: Mutex<TapeState>,
}

#[derive(Debug)]
enum TapeState {
    Recording {
        reads: Vec<ContextRead>,
        dropped: u64,
    },
    /// Each kind of read is served from its own queue, in the recorded
    /// order: a version that reads the deadline one more time does not
    /// shift the answers it gets about cancellation.
    Replaying {
        deadline: VecDeque<u64>,
        cancelled: VecDeque<bool>,
        log_enabled: VecDeque<(String, bool)>,
    },
}

impl ContextTape {
    /// A tape that records every read (up to [`MAX_CONTEXT_READS`]).
    pub fn recording() -> Self {
        Self {
            state: Mutex::new(TapeState::Recording {
                reads: Vec::new(),
                dropped: 0,
            }),
        }
    }

    /// A tape that answers with `reads`, in order; a read past the recorded
    /// ones gets the live value.
    pub fn replaying(reads: &[ContextRead]) -> Self {
        let mut deadline = VecDeque::new();
        let mut cancelled = VecDeque::new();
        let mut log_enabled = VecDeque::new();
        for r in reads {
            match r {
                ContextRead::DeadlineRemainingMs(v) => deadline.push_back(*v),
                ContextRead::Cancelled(v) => cancelled.push_back(*v),
                ContextRead::LogEnabled { level, enabled } => {
                    log_enabled.push_back((level.clone(), *enabled))
                }
            }
        }
        Self {
            state: Mutex::new(TapeState::Replaying {
                deadline,
                cancelled,
                log_enabled,
            }),
        }
    }

    /// The value the guest gets for a read whose `live` value is given:
    /// recorded (and returned) while recording, the next recorded value of
    /// that kind (`replayed` takes it from its queue) while replaying.
    fn read<T: Copy>(
        &self,
        live: T,
        recorded: fn(T) -> ContextRead,
        replayed: fn(&mut TapeState) -> Option<T>,
    ) -> T {
        let mut state = self.state.lock().unwrap();
        match &mut *state {
            TapeState::Recording { .. } => {
                state.record(recorded(live));
                live
            }
            TapeState::Replaying { .. } => replayed(&mut state).unwrap_or(live),
        }
    }

    pub(crate) fn deadline_remaining_ms(&self, live: u64) -> u64 {
        self.read(live, ContextRead::DeadlineRemainingMs, |s| match s {
            TapeState::Replaying { deadline, .. } => deadline.pop_front(),
            TapeState::Recording { .. } => None,
        })
    }

    pub(crate) fn cancelled(&self, live: bool) -> bool {
        self.read(live, ContextRead::Cancelled, |s| match s {
            TapeState::Replaying { cancelled, .. } => cancelled.pop_front(),
            TapeState::Recording { .. } => None,
        })
    }

    pub(crate) fn log_enabled(&self, level: &str, live: bool) -> bool {
        let mut state = self.state.lock().unwrap();
        match &mut *state {
            TapeState::Recording { .. } => {
                state.record(ContextRead::LogEnabled {
                    level: level.to_string(),
                    enabled: live,
                });
                live
            }
            TapeState::Replaying { log_enabled, .. } => match log_enabled.front() {
                Some((l, enabled)) if l == level => {
                    let enabled = *enabled;
                    log_enabled.pop_front();
                    enabled
                }
                _ => live,
            },
        }
    }

    /// What was recorded so far (empty for a replaying tape).
    pub fn reads(&self) -> Vec<ContextRead> {
        match &*self.state.lock().unwrap() {
            TapeState::Recording { reads, .. } => reads.clone(),
            TapeState::Replaying { .. } => Vec::new(),
        }
    }

    /// Reads past [`MAX_CONTEXT_READS`] that were not recorded.
    pub fn dropped(&self) -> u64 {
        match &*self.state.lock().unwrap() {
            TapeState::Recording { dropped, .. } => *dropped,
            TapeState::Replaying { .. } => 0,
        }
    }
}

impl TapeState {
    fn record(&mut self, read: ContextRead) {
        if let TapeState::Recording { reads, dropped } = self {
            if reads.len() < MAX_CONTEXT_READS {
                reads.push(read);
            } else {
                *dropped += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recording_tape_keeps_the_reads_in_order_and_answers_live() {
        let tape = ContextTape::recording();
        assert_eq!(tape.deadline_remaining_ms(900), 900);
        assert!(!tape.cancelled(false));
        assert!(tape.log_enabled("debug", true));
        assert_eq!(
            tape.reads(),
            vec![
                ContextRead::DeadlineRemainingMs(900),
                ContextRead::Cancelled(false),
                ContextRead::LogEnabled {
                    level: "debug".into(),
                    enabled: true
                },
            ]
        );
    }

    #[test]
    fn a_recording_tape_is_bounded() {
        let tape = ContextTape::recording();
        for _ in 0..MAX_CONTEXT_READS + 5 {
            tape.cancelled(false);
        }
        assert_eq!(tape.reads().len(), MAX_CONTEXT_READS);
        assert_eq!(tape.dropped(), 5);
    }

    #[test]
    fn a_replaying_tape_answers_each_kind_in_recorded_order_then_live() {
        let tape = ContextTape::replaying(&[
            ContextRead::DeadlineRemainingMs(5000),
            ContextRead::Cancelled(true),
            ContextRead::DeadlineRemainingMs(4000),
        ]);
        assert!(tape.cancelled(false), "the recorded cancellation");
        assert_eq!(tape.deadline_remaining_ms(1), 5000);
        assert_eq!(tape.deadline_remaining_ms(1), 4000);
        assert_eq!(tape.deadline_remaining_ms(7), 7, "past the tape: live");
        assert!(!tape.cancelled(false));
        assert!(tape.reads().is_empty());
    }

    #[test]
    fn a_replayed_log_level_answer_is_used_only_for_the_same_level() {
        let tape = ContextTape::replaying(&[ContextRead::LogEnabled {
            level: "debug".into(),
            enabled: false,
        }]);
        assert!(tape.log_enabled("info", true), "another level: live");
        assert!(!tape.log_enabled("debug", true));
    }

    #[test]
    fn reads_serialize_as_tagged_values() {
        let json = serde_json::to_string(&vec![
            ContextRead::DeadlineRemainingMs(12),
            ContextRead::LogEnabled {
                level: "info".into(),
                enabled: true,
            },
        ])
        .unwrap();
        assert_eq!(
            json,
            r#"[{"read":"deadline-remaining-ms","value":12},{"read":"log-enabled","value":{"level":"info","enabled":true}}]"#
        );
    }
}
