//! JSON text as JavaScript reads it.
//!
//! OpenClaw and pi are JavaScript: a string cut inside an emoji holds half of a UTF-16
//! surrogate pair, which `JSON.stringify` writes as an escape such as `"\ud83d"` and
//! `JSON.parse` reads back. Rust strings cannot hold it, so serde_json refuses the
//! whole value. [`from_slice`] reads such text with each lone surrogate replaced by
//! U+FFFD, the replacement character — one character of a truncated label or message
//! instead of a session or a transcript line the crate cannot read.

use serde::de::DeserializeOwned;

/// Parses `json` as serde_json does; when that fails, once more with every escape of
/// a lone surrogate replaced by `\ufffd` (the first error is returned if that fails
/// too, or if there was none to replace).
pub(crate) fn from_slice<T: DeserializeOwned>(json: &[u8]) -> serde_json::Result<T> {
    match serde_json::from_slice(json) {
        Ok(value) => Ok(value),
        Err(error) => match without_lone_surrogates(json) {
            Some(fixed) => serde_json::from_slice(&fixed).map_err(|_| error),
            None => Err(error),
        },
    }
}

/// `json` with every `\uXXXX` escape of a lone surrogate inside a string replaced by
/// `\ufffd`; `None` if it has none. A high surrogate followed by a low one is a pair
/// and stays.
pub(crate) fn without_lone_surrogates(json: &[u8]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut copied, mut in_string) = (0, 0, false);
    while i < json.len() {
        match json[i] {
            b'"' => in_string = !in_string,
            b'\\' if in_string => {
                let unit = escaped_unit(json, i);
                let lone = match unit {
                    Some(0xD800..=0xDBFF) => {
                        if matches!(escaped_unit(json, i + 6), Some(0xDC00..=0xDFFF)) {
                            i += 12;
                            continue;
                        }
                        true
                    }
                    Some(0xDC00..=0xDFFF) => true,
                    _ => false,
                };
                if lone {
                    let out = out.get_or_insert_with(|| Vec::with_capacity(json.len()));
                    out.extend_from_slice(&json[copied..i]);
                    out.extend_from_slice(br"\ufffd");
                    i += 6;
                    copied = i;
                    continue;
                }
                // Any other escape: skip the escaped character (a `\"` does not end
                // the string).
                i += if unit.is_some() { 6 } else { 2 };
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out.map(|mut out| {
        out.extend_from_slice(&json[copied..]);
        out
    })
}

/// The UTF-16 unit of a `\uXXXX` escape starting at `at`, if there is one.
fn escaped_unit(json: &[u8], at: usize) -> Option<u16> {
    let escape = json.get(at..at + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    u16::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_become_the_replacement_character_and_pairs_stay() {
        // (JSON text as JavaScript wrote it, the string serde_json then reads)
        let cases: [(&str, Option<&str>); 8] = [
            (r#""cut \ud83d""#, Some("cut \u{fffd}")),
            (r#""\udc00 alone""#, Some("\u{fffd} alone")),
            (r#""\ud83d\ude00 whole""#, None),
            (r#""\ud83d\ud83d\ude00""#, Some("\u{fffd}\u{1f600}")),
            (r#""\\ud83d is text""#, None),
            (r#""\"\ud83d""#, Some("\"\u{fffd}")),
            (r#""plain é""#, None),
            (r#"{"\ud800": "\udfff"}"#, Some(r#"{"\ufffd": "\ufffd"}"#)),
        ];
        for (json, expected) in cases {
            let fixed = without_lone_surrogates(json.as_bytes());
            match expected {
                None => assert!(fixed.is_none(), "{json}"),
                Some(expected) if expected.starts_with('{') => {
                    assert_eq!(String::from_utf8(fixed.unwrap()).unwrap(), expected)
                }
                Some(expected) => {
                    let read: String = from_slice(json.as_bytes()).unwrap();
                    assert_eq!(read, expected, "{json}");
                }
            }
        }
    }

    #[test]
    fn other_errors_are_the_original_error() {
        let error = from_slice::<String>(br#""\ud83d"#).unwrap_err();
        assert!(error.is_eof(), "{error}");
        assert!(from_slice::<u8>(b"300").is_err());
    }
}
