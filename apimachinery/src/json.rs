//! JSON text measured before it is parsed: a parser builds a tree many
//! times the text's size and recurses once per level, so text from
//! another party is first held to a depth and a count of values, in one
//! pass over its bytes that allocates nothing.

/// Which bound a text went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// Arrays and objects nest deeper than allowed.
    Depth,
    /// More values (keys included) than allowed.
    Values,
}

/// Checks that the arrays and objects of `text` nest at most `max_depth`
/// deep and that it holds at most `max_values` values, keys included; the
/// number of values it holds.
/// Brackets, commas and colons inside strings do not count; whether the
/// text is JSON at all is the parser's business.
pub fn check_shape(text: &[u8], max_depth: usize, max_values: usize) -> Result<usize, Exceeded> {
    let (mut depth, mut values) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    // Whether the next byte that is not white space starts a value (or a
    // key): at the start, and after `[`, `{`, `,` and `:`.
    let mut value_next = true;
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        if b.is_ascii_whitespace() {
            continue;
        }
        if value_next && b != b']' && b != b'}' {
            values += 1;
            if values > max_values {
                return Err(Exceeded::Values);
            }
        }
        value_next = matches!(b, b'[' | b'{' | b',' | b':');
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(Exceeded::Depth);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_and_values_are_counted_outside_strings() {
        let text = br#"{"a": [1, 2, {"b": "[[[,,:"}], "c": null}"#;
        // Values: the object, "a", the array, 1, 2, the inner object, "b",
        // its string, "c", null.
        assert_eq!(check_shape(text, 3, 10), Ok(10));
        assert_eq!(check_shape(text, 3, 9), Err(Exceeded::Values));
        assert_eq!(check_shape(text, 2, 10), Err(Exceeded::Depth));
        assert_eq!(check_shape(br#""\"[[[""#, 0, 1), Ok(1));
        assert_eq!(check_shape(b"[]", 1, 1), Ok(1));
        assert_eq!(
            check_shape(&b"[".repeat(1 << 20), 100, usize::MAX),
            Err(Exceeded::Depth)
        );
    }
}
