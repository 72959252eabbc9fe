//! Label selectors: the string form lists and watches take
//! (`app=web,tier in (front,back),!legacy`) and the `metav1.LabelSelector`
//! object form (`matchLabels` and `matchExpressions`), parsed into one
//! [`LabelSelector`] that matches label sets and prints back canonically.
//!
//! # Grammar
//!
//! A selector is requirements separated by commas, all of which must hold:
//!
//! | Requirement        | Holds when the label `k`           |
//! |--------------------|------------------------------------|
//! | `k=v`, `k==v`      | is `v`                             |
//! | `k!=v`             | is absent or not `v`               |
//! | `k in (a,b)`       | is `a` or `b`                      |
//! | `k notin (a,b)`    | is absent or neither `a` nor `b`   |
//! | `k`                | is present                         |
//! | `!k`               | is absent                          |
//!
//! Whitespace between tokens is ignored. Keys must be
//! [qualified names](crate::names::qualified_name) and values
//! [label values](crate::names::label_value) (so a value may be empty:
//! `k=` is `k` equal to `""`, and `k in (a,)` holds `a` and `""`).
//! `in` and `notin` are keywords only where an operator is expected, so
//! `in=notin` is a valid requirement. The empty selector matches
//! everything.
//!
//! Two leniencies differ from kube-apiserver, which rejects them: an empty
//! term (a leading, trailing or doubled comma) is skipped, and `k in ()`
//! is refused instead of being read as `k in ("")`. The set-based
//! operators `gt` and `lt` (`k > 1`) are not supported.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::names::{self, NameError};

/// Limits on what one selector may hold, so a caller's cost of parsing and
/// matching stays bounded whatever text it is handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectorBounds {
    /// Most requirements (comma-separated terms).
    pub max_requirements: usize,
    /// Most values in one `in` or `notin` set.
    pub max_values: usize,
}

impl SelectorBounds {
    /// 64 requirements of at most 64 values each: what the wasmctrl host
    /// accepts from a guest.
    pub const DEFAULT: Self = Self {
        max_requirements: 64,
        max_values: 64,
    };

    /// No limit, as kube-apiserver (whose request size bounds the text).
    pub const UNLIMITED: Self = Self {
        max_requirements: usize::MAX,
        max_values: usize::MAX,
    };
}

impl Default for SelectorBounds {
    /// [`SelectorBounds::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a selector was refused. Each message starts as kube-apiserver's do
/// (`unable to parse requirement: …`, answered as 400 Bad Request) and
/// quotes at most 64 characters of what it was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SelectorError {
    /// The text does not follow the grammar: `found` is the token met
    /// (`None` at the end of the text), `expected` what could have been
    /// there.
    #[error("unable to parse requirement: found {}, expected: {expected}", found_text(found.as_deref()))]
    Syntax {
        /// The token met, or `None` at the end of the text.
        found: Option<String>,
        /// What the grammar allows at that point.
        expected: &'static str,
    },
    /// A key is not a qualified name.
    #[error(
        "unable to parse requirement: key: Invalid value: {}: {error}",
        quoted(key)
    )]
    Key {
        /// The key as given.
        key: String,
        /// The rule it breaks.
        error: NameError,
    },
    /// A value is not a label value.
    #[error(
        "unable to parse requirement: values[{index}]: Invalid value: {}: {error}",
        quoted(value)
    )]
    Value {
        /// The value as given.
        value: String,
        /// Its position in its set (0 for `=` and `!=`).
        index: usize,
        /// The rule it breaks.
        error: NameError,
    },
    /// `k in ()`, `k notin ()`, or an `In`/`NotIn` expression without values.
    #[error(
        "unable to parse requirement: values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
    )]
    EmptySet,
    /// An `Exists`/`DoesNotExist` expression with values.
    #[error(
        "unable to parse requirement: values: Invalid value: {count}: values set must be empty for exists and does not exist"
    )]
    ValuesForExists {
        /// How many values it had.
        count: usize,
    },
    /// A set with more values than [`SelectorBounds::max_values`].
    #[error("unable to parse requirement: values: Too many: must have at most {max} items")]
    TooManyValues {
        /// The limit.
        max: usize,
    },
    /// More requirements than [`SelectorBounds::max_requirements`].
    #[error("unable to parse requirement: a selector holds at most {max} requirements")]
    TooManyRequirements {
        /// The limit.
        max: usize,
    },
    /// A `matchExpressions` operator other than `In`, `NotIn`, `Exists` and
    /// `DoesNotExist`.
    #[error("{} is not a valid label selector operator", quoted(.0))]
    Operator(String),
    /// A `metav1.LabelSelector` object of the wrong shape, e.g. a
    /// `matchLabels` value that is not a string.
    #[error("invalid label selector object: {0}")]
    Object(&'static str),
}

fn found_text(found: Option<&str>) -> String {
    found.map_or_else(|| "end of string".to_string(), |f| format!("'{}'", cut(f)))
}

/// `"value"`, cut to 64 characters: a refusal must not echo a megabyte.
fn quoted(value: &str) -> String {
    format!("{:?}", cut(value))
}

fn cut(value: &str) -> String {
    match value.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_string(),
    }
}

/// One requirement; keys and values are valid label syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, ValueSet),
    NotIn(String, ValueSet),
    Exists(String),
    NotExists(String),
}

/// The values of an `in` or `notin` requirement: as given (and printed
/// back in that order), with an index in sorted order, so that matching
/// an object costs the log of the set's size, however many values a
/// selector lists.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ValueSet {
    given: Vec<String>,
    sorted: Vec<u32>,
}

impl ValueSet {
    fn new(given: Vec<String>) -> Self {
        // A set fits in a request, far below u32::MAX values.
        let mut sorted: Vec<u32> = (0..given.len() as u32).collect();
        sorted.sort_unstable_by(|&a, &b| given[a as usize].cmp(&given[b as usize]));
        ValueSet { given, sorted }
    }

    fn contains(&self, value: &str) -> bool {
        self.sorted
            .binary_search_by(|&i| self.given[i as usize].as_str().cmp(value))
            .is_ok()
    }
}

impl std::ops::Deref for ValueSet {
    type Target = [String];

    fn deref(&self) -> &[String] {
        &self.given
    }
}

/// A parsed label selector: requirements that must all hold, in the order
/// given. Two selectors are equal when they hold the same requirements in
/// the same order.
///
/// `Display` prints the canonical string form (`app=web,tier in (a,b),!x`:
/// no spaces but around `in`/`notin`, `=` for `==`, empty terms dropped),
/// which parses back to an equal selector. Since keys and values are
/// checked, the printed form holds nothing but label syntax, and is safe to
/// pass on in a URL query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses the string form, within [`SelectorBounds::DEFAULT`].
    ///
    /// # Errors
    ///
    /// See [`Self::parse_with`].
    pub fn parse(text: &str) -> Result<Self, SelectorError> {
        Self::parse_with(text, SelectorBounds::DEFAULT)
    }

    /// Parses the string form (see the [module docs](self) for the grammar),
    /// refusing more requirements or set values than `bounds` allow.
    ///
    /// # Errors
    ///
    /// The first problem met from the left: a [`SelectorError::Syntax`]
    /// error, a key or value that is not label syntax, an empty set, or a
    /// bound exceeded.
    pub fn parse_with(text: &str, bounds: SelectorBounds) -> Result<Self, SelectorError> {
        let mut lexer = Lexer { text, pos: 0 };
        let mut requirements = Vec::new();
        loop {
            match lexer.peek() {
                Token::End => break,
                Token::Comma => {
                    lexer.next();
                    continue;
                }
                _ => {}
            }
            if requirements.len() >= bounds.max_requirements {
                return Err(SelectorError::TooManyRequirements {
                    max: bounds.max_requirements,
                });
            }
            requirements.push(requirement(&mut lexer, bounds)?);
            match lexer.next() {
                Token::End => break,
                Token::Comma => {}
                other => return Err(syntax(other, "',' or end of string")),
            }
        }
        Ok(Self(requirements))
    }

    /// The selector of a `metav1.LabelSelector` object: each `matchLabels`
    /// entry is `k=v` (in key order), then each `matchExpressions` entry
    /// (`{key, operator, values}`, operator `In`, `NotIn`, `Exists` or
    /// `DoesNotExist`) in order. `{}` matches everything. Keys and values
    /// are checked as in the string form. An `In`/`NotIn` set of only `""`
    /// becomes `k=`/`k!=` (the same requirement), since the string form
    /// has no `k in ()`.
    ///
    /// # Errors
    ///
    /// [`SelectorError::Object`] for a value of the wrong JSON shape,
    /// [`SelectorError::Operator`] for an unknown operator,
    /// [`SelectorError::EmptySet`] / [`SelectorError::ValuesForExists`] for
    /// values that do not fit the operator, a key or value that is not
    /// label syntax, or a bound exceeded.
    pub fn from_object(object: &Value, bounds: SelectorBounds) -> Result<Self, SelectorError> {
        let Value::Object(object) = object else {
            return Err(SelectorError::Object("a label selector must be an object"));
        };
        let mut requirements = Vec::new();
        let mut push = |r: Requirement| {
            if requirements.len() >= bounds.max_requirements {
                return Err(SelectorError::TooManyRequirements {
                    max: bounds.max_requirements,
                });
            }
            requirements.push(r);
            Ok(())
        };
        match object.get("matchLabels") {
            None | Some(Value::Null) => {}
            Some(Value::Object(labels)) => {
                let mut labels: Vec<_> = labels.iter().collect();
                labels.sort_by_key(|(k, _)| k.as_str());
                for (k, v) in labels {
                    let v = v
                        .as_str()
                        .ok_or(SelectorError::Object("matchLabels values must be strings"))?;
                    push(Requirement::Equals(key(k)?, value(v, 0)?))?;
                }
            }
            Some(_) => return Err(SelectorError::Object("matchLabels must be an object")),
        }
        let expressions = match object.get("matchExpressions") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(e)) => e.as_slice(),
            Some(_) => return Err(SelectorError::Object("matchExpressions must be a list")),
        };
        for e in expressions {
            let k = e["key"].as_str().ok_or(SelectorError::Object(
                "a matchExpressions entry needs a string key",
            ))?;
            let values = match &e["values"] {
                Value::Null => &[][..],
                Value::Array(v) => v.as_slice(),
                _ => {
                    return Err(SelectorError::Object(
                        "matchExpressions values must be a list",
                    ));
                }
            };
            if values.len() > bounds.max_values {
                return Err(SelectorError::TooManyValues {
                    max: bounds.max_values,
                });
            }
            let set = || -> Result<Vec<String>, SelectorError> {
                if values.is_empty() {
                    return Err(SelectorError::EmptySet);
                }
                values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let v = v.as_str().ok_or(SelectorError::Object(
                            "matchExpressions values must be strings",
                        ))?;
                        value(v, i)
                    })
                    .collect()
            };
            let none = || {
                if values.is_empty() {
                    Ok(())
                } else {
                    Err(SelectorError::ValuesForExists {
                        count: values.len(),
                    })
                }
            };
            let k = key(k)?;
            // A set of only "" has no string form (`k in ()` is refused):
            // it is `k=` / `k!=`.
            let lone_empty = |set: &[String]| set.len() == 1 && set[0].is_empty();
            push(match e["operator"].as_str().unwrap_or_default() {
                "In" => match set()? {
                    set if lone_empty(&set) => Requirement::Equals(k, String::new()),
                    set => Requirement::In(k, ValueSet::new(set)),
                },
                "NotIn" => match set()? {
                    set if lone_empty(&set) => Requirement::NotEquals(k, String::new()),
                    set => Requirement::NotIn(k, ValueSet::new(set)),
                },
                "Exists" => none().map(|()| Requirement::Exists(k))?,
                "DoesNotExist" => none().map(|()| Requirement::NotExists(k))?,
                other => return Err(SelectorError::Operator(other.to_string())),
            })?;
        }
        Ok(Self(requirements))
    }

    /// The object form (`{"matchExpressions": [...]}`) of the selector,
    /// which [`Self::from_object`] reads back to an equal selector; `=`
    /// and `!=` become one-value `In` and `NotIn`, which match the same
    /// labels.
    pub fn to_object(&self) -> Value {
        let expression = |key: &str, operator: &str, values: &[String]| {
            let mut e = serde_json::json!({"key": key, "operator": operator});
            if !values.is_empty() {
                e["values"] = serde_json::json!(values);
            }
            e
        };
        let expressions: Vec<Value> = self
            .0
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => expression(k, "In", std::slice::from_ref(v)),
                Requirement::NotEquals(k, v) => expression(k, "NotIn", std::slice::from_ref(v)),
                Requirement::In(k, set) => expression(k, "In", set),
                Requirement::NotIn(k, set) => expression(k, "NotIn", set),
                Requirement::Exists(k) => expression(k, "Exists", &[]),
                Requirement::NotExists(k) => expression(k, "DoesNotExist", &[]),
            })
            .collect();
        serde_json::json!({ "matchExpressions": expressions })
    }

    /// True for the selector without requirements, which matches everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_by(|k| labels.get(k).map(String::as_str))
    }

    /// Whether a JSON labels object (an object's `metadata.labels`)
    /// satisfies every requirement. A label whose value is not a string
    /// counts as absent; so does every label when `labels` is not an object
    /// (absent labels are `null`).
    pub fn matches_json(&self, labels: &Value) -> bool {
        self.matches_by(|k| labels.get(k).and_then(Value::as_str))
    }

    /// Whether the labels `label` looks up (key → value, `None` when
    /// absent) satisfy every requirement.
    pub fn matches_by<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        let is_in = |set: &ValueSet, v: &str| set.contains(v);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, set) => label(k).is_some_and(|v| is_in(set, v)),
            Requirement::NotIn(k, set) => label(k).is_none_or(|v| !is_in(set, v)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }
}

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    /// [`LabelSelector::parse`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match r {
                Requirement::Equals(k, v) => write!(f, "{k}={v}")?,
                Requirement::NotEquals(k, v) => write!(f, "{k}!={v}")?,
                Requirement::In(k, set) => write!(f, "{k} in ({})", set.join(","))?,
                Requirement::NotIn(k, set) => write!(f, "{k} notin ({})", set.join(","))?,
                Requirement::Exists(k) => f.write_str(k)?,
                Requirement::NotExists(k) => write!(f, "!{k}")?,
            }
        }
        Ok(())
    }
}

fn key(k: &str) -> Result<String, SelectorError> {
    names::qualified_name(k).map_err(|error| SelectorError::Key {
        key: k.to_string(),
        error,
    })?;
    Ok(k.to_string())
}

fn value(v: &str, index: usize) -> Result<String, SelectorError> {
    names::label_value(v).map_err(|error| SelectorError::Value {
        value: v.to_string(),
        index,
        error,
    })?;
    Ok(v.to_string())
}

fn syntax(found: Token<'_>, expected: &'static str) -> SelectorError {
    SelectorError::Syntax {
        found: found.text().map(str::to_string),
        expected,
    }
}

/// One requirement, from its first token to before the `,` or end after it.
fn requirement(
    lexer: &mut Lexer<'_>,
    bounds: SelectorBounds,
) -> Result<Requirement, SelectorError> {
    let k = match lexer.next() {
        Token::Not => match lexer.next() {
            Token::Word(k) => return Ok(Requirement::NotExists(key(k)?)),
            other => return Err(syntax(other, "a label key after '!'")),
        },
        Token::Word(k) => key(k)?,
        other => return Err(syntax(other, "'!', a label key, or end of string")),
    };
    if matches!(lexer.peek(), Token::End | Token::Comma) {
        return Ok(Requirement::Exists(k));
    }
    match lexer.next() {
        Token::Equals => Ok(Requirement::Equals(k, exact_value(lexer)?)),
        Token::NotEquals => Ok(Requirement::NotEquals(k, exact_value(lexer)?)),
        Token::Word("in") => Ok(Requirement::In(k, ValueSet::new(set(lexer, bounds)?))),
        Token::Word("notin") => Ok(Requirement::NotIn(k, ValueSet::new(set(lexer, bounds)?))),
        other => Err(syntax(other, "in, notin, =, == or !=")),
    }
}

/// The value after `=`, `==` or `!=`: empty when the term ends there.
fn exact_value(lexer: &mut Lexer<'_>) -> Result<String, SelectorError> {
    match lexer.peek() {
        Token::End | Token::Comma => Ok(String::new()),
        Token::Word(v) => {
            lexer.next();
            value(v, 0)
        }
        other => Err(syntax(other, "a label value")),
    }
}

/// `(a,b)`: a missing value between commas or before `)` is `""`.
fn set(lexer: &mut Lexer<'_>, bounds: SelectorBounds) -> Result<Vec<String>, SelectorError> {
    match lexer.next() {
        Token::Open => {}
        other => return Err(syntax(other, "'('")),
    }
    if lexer.peek() == Token::Close {
        return Err(SelectorError::EmptySet);
    }
    let mut values = Vec::new();
    loop {
        let v = match lexer.peek() {
            Token::Word(v) => {
                lexer.next();
                v
            }
            Token::Comma | Token::Close => "",
            other => return Err(syntax(other, "a label value, ',' or ')'")),
        };
        if values.len() >= bounds.max_values {
            return Err(SelectorError::TooManyValues {
                max: bounds.max_values,
            });
        }
        values.push(value(v, values.len())?);
        match lexer.next() {
            Token::Comma => {}
            Token::Close => return Ok(values),
            other => return Err(syntax(other, "',' or ')'")),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    End,
    /// A run of anything but whitespace and the symbols below: a key, a
    /// value, `in` or `notin`.
    Word(&'a str),
    Not,
    NotEquals,
    /// `=` or `==`.
    Equals,
    Open,
    Close,
    Comma,
    /// `<` or `>`, which this grammar does not use.
    Other(&'a str),
}

impl<'a> Token<'a> {
    fn text(self) -> Option<&'a str> {
        Some(match self {
            Token::End => return None,
            Token::Word(w) | Token::Other(w) => w,
            Token::Not => "!",
            Token::NotEquals => "!=",
            Token::Equals => "=",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        })
    }
}

/// Splits the text into tokens, as upstream's lexer does: whitespace
/// separates, and `! != = == ( ) , < >` are tokens of their own.
#[derive(Clone, Copy)]
struct Lexer<'a> {
    text: &'a str,
    pos: usize,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_symbol(b: u8) -> bool {
    matches!(b, b'!' | b'=' | b'(' | b')' | b',' | b'<' | b'>')
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Token<'a> {
        let mut copy = *self;
        copy.next()
    }

    fn next(&mut self) -> Token<'a> {
        let bytes = self.text.as_bytes();
        while self.pos < bytes.len() && is_space(bytes[self.pos]) {
            self.pos += 1;
        }
        let start = self.pos;
        let Some(&b) = bytes.get(start) else {
            return Token::End;
        };
        let then = bytes.get(start + 1).copied();
        let (token, len) = match b {
            b'!' if then == Some(b'=') => (Token::NotEquals, 2),
            b'!' => (Token::Not, 1),
            b'=' if then == Some(b'=') => (Token::Equals, 2),
            b'=' => (Token::Equals, 1),
            b'(' => (Token::Open, 1),
            b')' => (Token::Close, 1),
            b',' => (Token::Comma, 1),
            b'<' | b'>' => (Token::Other(&self.text[start..=start]), 1),
            _ => {
                // Whitespace and symbols are ASCII, so `end` is a char
                // boundary.
                let end = bytes[start..]
                    .iter()
                    .position(|&c| is_space(c) || is_symbol(c))
                    .map_or(bytes.len(), |n| start + n);
                (Token::Word(&self.text[start..end]), end - start)
            }
        };
        self.pos = start + len;
        token
    }
}

#[cfg(test)]
mod tests;
