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
    Replaying(Replay),
}

/// The recorded reads a replaying tape answers with. Each kind of read is
/// served from its own queue, in the recorded order: a version that reads
/// the deadline one more time does not shift the answers it gets about
/// cancellation.
#[derive(Debug, Default)]
struct Replay {
    deadline: VecDeque<u64>,
    cancelled: VecDeque<bool>,
    log_enabled: VecDeque<(String, bool)>,
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
        let mut replay = Replay::default();
        for r in reads {
            match r {
                ContextRead::DeadlineRemainingMs(v) => replay.deadline.push_back(*v),
                ContextRead::Cancelled(v) => replay.cancelled.push_back(*v),
                ContextRead::LogEnabled { level, enabled } => {
                    replay.log_enabled.push_back((level.clone(), *enabled))
                }
            }
        }
        Self {
            state: Mutex::new(TapeState::Replaying(replay)),
        }
    }

    /// The value the guest gets for a read whose `live` value is given:
    /// recorded (as `recorded` makes it) and returned while recording; while
    /// replaying, the next recorded value `replayed` takes from its queue,
    /// or the live one past them.
    fn read<T: Copy>(
        &self,
        live: T,
        recorded: impl FnOnce(T) -> ContextRead,
        replayed: impl FnOnce(&mut Replay) -> Option<T>,
    ) -> T {
        let mut state = self.state.lock().unwrap();
        match &mut *state {
            TapeState::Recording { .. } => {
                state.record(recorded(live));
                live
            }
            TapeState::Replaying(replay) => replayed(replay).unwrap_or(live),
        }
    }

    pub(crate) fn deadline_remaining_ms(&self, live: u64) -> u64 {
        self.read(live, ContextRead::DeadlineRemainingMs, |r| {
            r.deadline.pop_front()
        })
    }

    pub(crate) fn cancelled(&self, live: bool) -> bool {
        self.read(live, ContextRead::Cancelled, |r| r.cancelled.pop_front())
    }

    /// Replayed only while the next recorded answer is about `level`.
    pub(crate) fn log_enabled(&self, level: &str, live: bool) -> bool {
        self.read(
            live,
            |enabled| ContextRead::LogEnabled {
                level: level.to_string(),
                enabled,
            },
            |r| match r.log_enabled.front() {
                Some((l, _)) if l == level => r.log_enabled.pop_front().map(|(_, e)| e),
                _ => None,
            },
        )
    }

    /// What was recorded so far (empty for a replaying tape).
    pub fn reads(&self) -> Vec<ContextRead> {
        match &*self.state.lock().unwrap() {
            TapeState::Recording { reads, .. } => reads.clone(),
            TapeState::Replaying(_) => Vec::new(),
        }
    }

    /// Reads past [`MAX_CONTEXT_READS`] that were not recorded.
    pub fn dropped(&self) -> u64 {
        match &*self.state.lock().unwrap() {
            TapeState::Recording { dropped, .. } => *dropped,
            TapeState::Replaying(_) => 0,
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
