//! What the property tests of the host's parsers share: JSON values biased
//! to the names a parser looks for, every JSON pointer into a value, and
//! the check that a refusal is one bounded line.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use serde_json::Value;

/// Arbitrary JSON of up to six levels and `width` members or items per
/// level. Strings and keys come from `words` (keys one time in
/// `1 + word_weight`, else short text), and the leaves are null, booleans,
/// numbers, short strings, words and `extra` (long strings, values of the
/// format's own).
pub(crate) fn json(
    words: Vec<&'static str>,
    word_weight: u32,
    extra: BoxedStrategy<Value>,
    width: usize,
) -> BoxedStrategy<Value> {
    let word = prop::sample::select(words);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
        word.clone().prop_map(Value::from),
        extra,
    ];
    let key = prop_oneof![word_weight => word.prop_map(String::from), 1 => ".{0,8}"];
    leaf.prop_recursive(6, 64, width as u32, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..width).prop_map(Value::Array),
            prop::collection::btree_map(key.clone(), inner, 0..width)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

/// Every JSON pointer into `v` (RFC 6901), `at` and below, into `out`.
pub(crate) fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                pointers(
                    child,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

/// A refusal's message is one line of at most 1 KiB, whatever it quotes.
pub(crate) fn one_bounded_line(message: &str) -> Result<(), TestCaseError> {
    prop_assert!(!message.contains(['\n', '\r']), "{message:.2000}");
    prop_assert!(
        message.len() <= 1024,
        "an unbounded message: {message:.2000}"
    );
    Ok(())
}
