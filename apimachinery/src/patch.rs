//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902) over `serde_json`
//! values, as kube-apiserver applies them to objects, on the `json-patch`
//! crate.
//!
//! JSON patch is bounded ([`PatchBounds`]): a patch cannot hold more than
//! so many operations, make the document deeper than a limit, or grow it
//! through `copy` (the only operation that amplifies, each copy up to
//! doubling a value) by more than a byte budget. The bounds are checked
//! before the work they bound, so a refused patch costs no more than the
//! bound allows.

use json_patch::jsonptr::{Pointer, PointerBuf};
use json_patch::{
    AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation, ReplaceOperation,
    TestOperation,
};
use serde_json::Value;

/// Applies an RFC 7386 merge patch to `target`: objects merge key by key,
/// a `null` member removes the key, and any other value (arrays included)
/// replaces the target's. A patch that is not an object replaces the whole
/// target. Every JSON value is a valid merge patch, so this cannot fail.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Limits on one JSON patch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatchBounds {
    /// Most operations the patch may hold.
    pub max_operations: usize,
    /// Most bytes the patch's `copy` operations may add together, each
    /// copied value counted at its compact JSON size.
    pub max_copy_bytes: usize,
    /// Deepest nesting of arrays and objects a value may reach in the
    /// document (a scalar at the root is depth 0, `{"a": 1}` is 1).
    pub max_depth: usize,
    /// Most values the depth checks of the patch's `move`s may walk
    /// together. A move deeper than its source walks the moved value to
    /// learn its nesting; moving a large value back and forth would
    /// otherwise cost a walk of it per operation. Not an upstream bound.
    pub max_move_walk: usize,
    /// Most array elements the patch's insertions into and removals from
    /// the middle of arrays may shift together: each moves every element
    /// after its index, so alternating `add /a/0` and `remove /a/0` on a
    /// long array would otherwise cost its length per operation. Not an
    /// upstream bound.
    pub max_array_shift: usize,
}

impl PatchBounds {
    /// kube-apiserver's bounds: 10 000 operations
    /// (`maxJSONPatchOperations`), 3 MiB of copies (`JSONPatchMaxCopyBytes`),
    /// and a depth of 100, far deeper than any real object and shallow
    /// enough that recursive code handling the result (serialization,
    /// comparison, drop) stays far from the stack limit and the result
    /// still parses as JSON inside a list or watch event (128 levels).
    pub const KUBERNETES: Self = Self {
        max_operations: 10_000,
        max_copy_bytes: 3 * 1024 * 1024,
        max_depth: 100,
        max_move_walk: 1 << 24,
        max_array_shift: 1 << 24,
    };
}

impl Default for PatchBounds {
    /// [`PatchBounds::KUBERNETES`].
    fn default() -> Self {
        Self::KUBERNETES
    }
}

/// Why a JSON patch was not applied. Messages of an operation's failure
/// name its index, `op` and path:
/// `json patch operation 2 (add) failed at path "/spec/x": …`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PatchError {
    /// The patch is not a JSON array.
    #[error("json patch must be a JSON array of operations")]
    NotAnArray,
    /// More operations than [`PatchBounds::max_operations`] (413 in
    /// kube-apiserver).
    #[error("The allowed maximum operations in a JSON patch is {max}, got {count}")]
    TooManyOperations {
        /// Operations in the patch.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// An operation that is not an object with a known string `op` and a
    /// string `path`.
    #[error("json patch operation {index}: {message}")]
    Malformed {
        /// The operation's index in the patch.
        index: usize,
        /// What is wrong with it.
        message: String,
    },
    /// An operation that could not apply: a malformed pointer or member, a
    /// missing location, an array index out of range, a move into its own
    /// child.
    #[error("json patch operation {index} ({op}) failed at path \"{path}\": {message}")]
    Failed {
        /// The operation's index in the patch.
        index: usize,
        /// Its `op`.
        op: String,
        /// Its `path`.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A `test` whose location holds another value.
    #[error(
        "json patch operation {index} (test) failed at path \"{path}\": expected {expected}, found {actual}"
    )]
    TestFailed {
        /// The operation's index in the patch.
        index: usize,
        /// Its `path`.
        path: String,
        /// The value the operation expected.
        expected: Value,
        /// The value found (`null` for an absent member).
        actual: Value,
    },
    /// A `copy` that would take the bytes copied past
    /// [`PatchBounds::max_copy_bytes`]; refused before copying.
    #[error(
        "json patch operation {index} (copy) failed at path \"{path}\": Unable to complete the copy, the accumulated size increase of copy exceeds the limit {max} bytes ({copied} bytes copied by earlier operations)"
    )]
    CopyLimit {
        /// The operation's index in the patch.
        index: usize,
        /// Its `path`.
        path: String,
        /// Bytes copied by earlier operations.
        copied: usize,
        /// The limit.
        max: usize,
    },
    /// A `move` whose depth check would take the values walked past
    /// [`PatchBounds::max_move_walk`]; refused before applying it.
    #[error(
        "json patch operation {index} (move) failed at path \"{path}\": the depth checks of this patch's moves would walk more than {max} values"
    )]
    MoveLimit {
        /// The operation's index in the patch.
        index: usize,
        /// Its `path`.
        path: String,
        /// The limit.
        max: usize,
    },
    /// An operation whose array insertion or removal would take the
    /// elements shifted past [`PatchBounds::max_array_shift`]; refused
    /// before applying it.
    #[error(
        "json patch operation {index} ({op}) failed at path \"{path}\": the insertions into and removals from arrays of this patch would shift more than {max} elements"
    )]
    ShiftLimit {
        /// The operation's index in the patch.
        index: usize,
        /// Its `op`.
        op: String,
        /// Its `path`.
        path: String,
        /// The limit.
        max: usize,
    },
    /// An operation that would nest a value deeper than
    /// [`PatchBounds::max_depth`]; refused before applying it.
    #[error(
        "json patch operation {index} ({op}) failed at path \"{path}\": the result would nest {depth} levels deep, exceeding the limit {max}"
    )]
    TooDeep {
        /// The operation's index in the patch.
        index: usize,
        /// Its `op`.
        op: String,
        /// Its `path`.
        path: String,
        /// The depth it would reach.
        depth: usize,
        /// The limit.
        max: usize,
    },
}

/// Applies an RFC 6902 JSON patch (`ops`, an array of `add`, `remove`,
/// `replace`, `move`, `copy` and `test` operations) to a copy of `doc`, in
/// order, and returns the result; `doc` itself is never changed, so a
/// failed patch leaves nothing half-applied.
///
/// Two rules follow the JSON patch library kube-apiserver uses rather than
/// the letter of the RFC: a `test` of an absent member of an existing
/// object or array succeeds when the expected value is `null` (clients such
/// as kube-runtime's finalizer helper send `test /metadata/finalizers ==
/// null` before the first `add`), and numbers compare by value (`1` tests
/// equal to `1.0`), and a `move` onto its own `from` does nothing, even
/// where nothing is. Members an operation does not use are ignored.
///
/// Before anything is applied, the operation count and the depth each
/// operation's `value` would reach are checked against `bounds`; a `move`
/// or `copy` is checked for depth, and a `copy` for its size against what
/// is left of the copy budget, before it runs.
///
/// # Errors
///
/// [`PatchError::NotAnArray`], [`PatchError::TooManyOperations`],
/// [`PatchError::Malformed`] for an operation without a known `op` or a
/// `path`, [`PatchError::TestFailed`], [`PatchError::CopyLimit`],
/// [`PatchError::TooDeep`], and [`PatchError::Failed`] for the rest.
pub fn json_patch(doc: &Value, ops: &Value, bounds: PatchBounds) -> Result<Value, PatchError> {
    let Value::Array(ops) = ops else {
        return Err(PatchError::NotAnArray);
    };
    if ops.len() > bounds.max_operations {
        return Err(PatchError::TooManyOperations {
            count: ops.len(),
            max: bounds.max_operations,
        });
    }
    let ops = ops
        .iter()
        .enumerate()
        .map(|(index, op)| Op::read(index, op, bounds))
        .collect::<Result<Vec<_>, _>>()?;
    let mut doc = doc.clone();
    let mut spent = Spent::default();
    for op in &ops {
        op.apply(&mut doc, &mut spent, bounds)?;
    }
    Ok(doc)
}

/// What the operations applied so far took of the budgets of
/// [`PatchBounds`].
#[derive(Default)]
struct Spent {
    copied: usize,
    walked: usize,
    shifted: usize,
}

/// The array elements inserting at (or removing from) `path` moves aside:
/// at index `i` of an array of `n`, the `n - i` from `i` on (the `n - i - 1`
/// after it). Appending (`-`) and members of objects move none.
fn shift_at(doc: &Value, path: &str, inserting: bool) -> usize {
    let Some((parent, last)) = path.rsplit_once('/') else {
        return 0;
    };
    let Ok(i) = last.parse::<usize>() else {
        return 0;
    };
    match doc.pointer(parent) {
        Some(Value::Array(items)) if inserting => items.len().saturating_sub(i),
        Some(Value::Array(items)) => items.len().saturating_sub(i + 1),
        _ => 0,
    }
}

/// One operation, read and checked for depth.
struct Op<'a> {
    index: usize,
    name: &'a str,
    path: &'a str,
    /// `None` for a `move` onto its own `from`, which does nothing.
    operation: Option<PatchOperation>,
}

impl<'a> Op<'a> {
    fn read(index: usize, op: &'a Value, bounds: PatchBounds) -> Result<Self, PatchError> {
        let malformed = |message: String| PatchError::Malformed { index, message };
        let Value::Object(members) = op else {
            return Err(malformed("operation must be an object".into()));
        };
        let name = members
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed("missing string member \"op\"".into()))?;
        if !["add", "remove", "replace", "move", "copy", "test"].contains(&name) {
            return Err(malformed(format!("unknown op \"{name}\"")));
        }
        let path = members
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| malformed(format!("{name}: missing string member \"path\"")))?;
        let mut read = Self {
            index,
            name,
            path,
            operation: None,
        };
        let pointer = |at: &str, text: &'a str| {
            Pointer::parse(text)
                .map(Pointer::to_buf)
                .map_err(|e| read.failed(format!("{at}invalid JSON pointer \"{text}\": {e}")))
        };
        let path_buf = pointer("", path)?;
        let from = || -> Result<PointerBuf, PatchError> {
            let from = members
                .get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| read.failed("missing string member \"from\""))?;
            pointer("from: ", from)
        };
        // The value is checked for depth before it is copied.
        let value = || -> Result<Value, PatchError> {
            let value = members
                .get("value")
                .ok_or_else(|| read.failed("missing member \"value\""))?;
            read.check_depth(value, bounds)?;
            Ok(value.clone())
        };
        let operation = match name {
            "add" => PatchOperation::Add(AddOperation {
                path: path_buf,
                value: value()?,
            }),
            "remove" => PatchOperation::Remove(RemoveOperation { path: path_buf }),
            "replace" => PatchOperation::Replace(ReplaceOperation {
                path: path_buf,
                value: value()?,
            }),
            // As upstream, a move onto itself does nothing, even where
            // nothing is.
            "move" => match from()? {
                from if from == path_buf => return Ok(read),
                from => PatchOperation::Move(MoveOperation {
                    from,
                    path: path_buf,
                }),
            },
            "copy" => PatchOperation::Copy(CopyOperation {
                from: from()?,
                path: path_buf,
            }),
            _ => PatchOperation::Test(TestOperation {
                path: path_buf,
                value: value()?,
            }),
        };
        read.operation = Some(operation);
        Ok(read)
    }

    fn failed(&self, message: impl Into<String>) -> PatchError {
        PatchError::Failed {
            index: self.index,
            op: self.name.to_string(),
            path: self.path.to_string(),
            message: message.into(),
        }
    }

    /// Refuses `value` if placing it at this operation's path would nest
    /// deeper than the bound.
    fn check_depth(&self, value: &Value, bounds: PatchBounds) -> Result<(), PatchError> {
        self.check_nesting(nesting(value), bounds)
    }

    /// Refuses a value of `nesting` levels at this operation's path past
    /// [`PatchBounds::max_depth`].
    fn check_nesting(&self, nesting: usize, bounds: PatchBounds) -> Result<(), PatchError> {
        let depth = self.path.matches('/').count() + nesting;
        if depth > bounds.max_depth {
            return Err(PatchError::TooDeep {
                index: self.index,
                op: self.name.to_string(),
                path: self.path.to_string(),
                depth,
                max: bounds.max_depth,
            });
        }
        Ok(())
    }

    fn apply(
        &self,
        doc: &mut Value,
        spent: &mut Spent,
        bounds: PatchBounds,
    ) -> Result<(), PatchError> {
        use PatchOperation as P;
        let Some(operation) = &self.operation else {
            return Ok(());
        };
        let shift = match operation {
            P::Add(_) | P::Copy(_) => shift_at(doc, self.path, true),
            P::Remove(_) => shift_at(doc, self.path, false),
            P::Move(mv) => shift_at(doc, mv.from.as_str(), false) + shift_at(doc, self.path, true),
            P::Replace(_) | P::Test(_) => 0,
        };
        spent.shifted = spent.shifted.saturating_add(shift);
        if spent.shifted > bounds.max_array_shift {
            return Err(PatchError::ShiftLimit {
                index: self.index,
                op: self.name.to_string(),
                path: self.path.to_string(),
                max: bounds.max_array_shift,
            });
        }
        let (copied, walked) = (&mut spent.copied, &mut spent.walked);
        match operation {
            P::Test(test) => return self.test(doc, test.path.as_str(), &test.value),
            P::Copy(copy) => {
                let source = doc
                    .pointer(copy.from.as_str())
                    .ok_or_else(|| self.failed("\"from\": no such location in the document"))?;
                // Measured before the copy exists, and only up to the
                // budget: the check costs no more than the limit allows.
                let budget = bounds.max_copy_bytes.saturating_sub(*copied);
                let size = json_size(source, budget).ok_or_else(|| PatchError::CopyLimit {
                    index: self.index,
                    path: self.path.to_string(),
                    copied: *copied,
                    max: bounds.max_copy_bytes,
                })?;
                self.check_depth(source, bounds)?;
                *copied += size;
            }
            // A value moved no deeper than it was nests nothing deeper
            // than before; one moved deeper is walked, within the budget.
            P::Move(mv)
                if self.path.matches('/').count() > mv.from.as_str().matches('/').count() =>
            {
                if let Some(source) = doc.pointer(mv.from.as_str()) {
                    let budget = bounds.max_move_walk.saturating_sub(*walked);
                    let (depth, visited) =
                        nesting_within(source, budget).ok_or_else(|| PatchError::MoveLimit {
                            index: self.index,
                            path: self.path.to_string(),
                            max: bounds.max_move_walk,
                        })?;
                    *walked += visited;
                    self.check_nesting(depth, bounds)?;
                }
            }
            P::Move(_) => {}
            P::Add(_) | P::Remove(_) | P::Replace(_) => {}
        }
        json_patch::patch_unsafe(doc, std::slice::from_ref(operation)).map_err(|e| {
            use json_patch::PatchErrorKind as K;
            self.failed(match e.kind {
                K::InvalidPointer => {
                    "no such location in the document (a missing member or parent, or an array index out of range)"
                }
                K::InvalidFromPointer => "\"from\": no such location in the document",
                K::CannotMoveInsideItself => "cannot move a value into one of its own children",
                _ => "the operation does not apply to the document",
            })
        })
    }

    /// `test`, as kube-apiserver: an absent member of an existing container
    /// reads as `null`, and numbers compare by value.
    fn test(&self, doc: &Value, path: &str, expected: &Value) -> Result<(), PatchError> {
        let actual = match doc.pointer(path) {
            Some(actual) => actual,
            None => {
                let parent = path.rfind('/').map(|i| &path[..i]);
                match parent.and_then(|p| doc.pointer(p)) {
                    Some(Value::Object(_) | Value::Array(_)) => &Value::Null,
                    _ => return Err(self.failed("no such location in the document")),
                }
            }
        };
        if json_equal(actual, expected) {
            Ok(())
        } else {
            Err(PatchError::TestFailed {
                index: self.index,
                path: path.to_string(),
                expected: expected.clone(),
                actual: actual.clone(),
            })
        }
    }
}

/// Structural equality where numbers compare by value.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x == y || matches!((x.as_f64(), y.as_f64()), (Some(x), Some(y)) if x == y)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Nesting depth: 0 for a scalar, 1 for `[]`, 2 for `[[]]`. Iterative, so
/// it cannot overflow the stack whatever it is given.
fn nesting(value: &Value) -> usize {
    // No budget: a walk cannot visit more than usize::MAX values.
    nesting_within(value, usize::MAX).map_or(0, |(depth, _)| depth)
}

/// [`nesting`] of `value` and the values walked to learn it, or `None`
/// once more than `budget` would be walked (the walk stops there).
fn nesting_within(value: &Value, budget: usize) -> Option<(usize, usize)> {
    let mut deepest = 0;
    let mut visited = 0usize;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        visited += 1;
        if visited > budget {
            return None;
        }
        match v {
            Value::Array(a) => {
                deepest = deepest.max(d + 1);
                stack.extend(a.iter().map(|c| (c, d + 1)));
            }
            Value::Object(m) => {
                deepest = deepest.max(d + 1);
                stack.extend(m.values().map(|c| (c, d + 1)));
            }
            _ => {}
        }
    }
    Some((deepest, visited))
}

/// The compact JSON size of `value` in bytes, or `None` once it exceeds
/// `budget` (the walk stops there). Iterative, so it cannot overflow the
/// stack.
fn json_size(value: &Value, budget: usize) -> Option<usize> {
    let mut size = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        size += match v {
            Value::Null | Value::Bool(true) => 4,
            Value::Bool(false) => 5,
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => string_len(s),
            Value::Array(a) => {
                stack.extend(a.iter());
                // Brackets and the commas between elements.
                2 + a.len().saturating_sub(1)
            }
            Value::Object(m) => {
                stack.extend(m.values());
                // Braces, commas, colons and the quoted keys.
                2 + m.len().saturating_sub(1) + m.keys().map(|k| string_len(k) + 1).sum::<usize>()
            }
        };
        if size > budget {
            return None;
        }
    }
    Some(size)
}

/// Length of a quoted, escaped JSON string as `serde_json` writes it.
fn string_len(s: &str) -> usize {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests;
