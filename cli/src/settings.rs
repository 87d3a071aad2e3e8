//! Settings `serve` takes from a flag or, without one, from an environment variable.
//!
//! clap reads the variable but leaves the value as text: an invalid value is reported
//! here, naming where it came from (the flag or the variable), which clap's own error
//! would not do for a variable.

/// The variable `serve` reads the idle timeout from, as ClawOS's session kernel does.
pub const SESSION_TIMEOUT_MINUTES: &str = "SESSION_TIMEOUT_MINUTES";
/// The variable that turns on ClawOS's topic-drift gate.
pub const ENABLE_SESSION_DRIFT_CLASSIFIER: &str = "ENABLE_SESSION_DRIFT_CLASSIFIER";

/// One setting's text and where it came from.
#[derive(Debug, Clone, Copy)]
pub struct Setting<'a> {
    /// The value as given.
    pub text: &'a str,
    /// The flag that sets it (`--idle-minutes`).
    pub flag: &'static str,
    /// The environment variable read without the flag.
    pub var: &'static str,
    /// Whether the value came from the flag (otherwise from the variable or the
    /// default, which is always valid).
    pub from_flag: bool,
}

impl Setting<'_> {
    /// The flag or the variable the value came from.
    pub fn source(&self) -> &'static str {
        if self.from_flag {
            self.flag
        } else {
            self.var
        }
    }

    /// The message for an invalid value: its source, the value, what was expected.
    fn invalid(&self, expected: &str) -> String {
        format!("invalid {} {:?}: {expected}", self.source(), self.text)
    }

    /// A whole number of minutes (0 turns the timeout off).
    ///
    /// ```text
    /// "30" -> 30, "0" -> 0, "1.5" / "-5" / "" -> an error naming the source
    /// ```
    pub fn minutes(&self) -> Result<u32, String> {
        // `u32::from_str` takes a leading `+`; a count of minutes is digits only.
        if self.text.is_empty() || !self.text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.invalid("expected a whole number of minutes (0: no timeout)"));
        }
        self.text
            .parse()
            .map_err(|_| self.invalid("too many minutes"))
    }

    /// `true` or `false`, exactly: ClawOS treats every other value as `false`, which
    /// would silently turn off a switch meant to be on (`TRUE`, `1`, `yes`).
    pub fn switch(&self) -> Result<bool, String> {
        match self.text {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(self.invalid("expected true or false")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(text: &str, from_flag: bool) -> Setting<'_> {
        Setting {
            text,
            flag: "--idle-minutes",
            var: SESSION_TIMEOUT_MINUTES,
            from_flag,
        }
    }

    #[test]
    fn minutes_are_whole_numbers_and_errors_name_their_source() {
        let cases: &[(&str, bool, Result<u32, &str>)] = &[
            ("30", false, Ok(30)),
            ("0", true, Ok(0)),
            ("007", false, Ok(7)),
            ("4294967295", false, Ok(u32::MAX)),
            ("abc", false, Err("invalid SESSION_TIMEOUT_MINUTES \"abc\"")),
            ("abc", true, Err("invalid --idle-minutes \"abc\"")),
            ("", false, Err("invalid SESSION_TIMEOUT_MINUTES \"\"")),
            ("1.5", false, Err("whole number")),
            ("-5", false, Err("whole number")),
            ("+5", false, Err("whole number")),
            (" 5", false, Err("whole number")),
            ("4294967296", false, Err("too many minutes")),
        ];
        for (text, from_flag, expected) in cases {
            let got = setting(text, *from_flag).minutes();
            match (got, expected) {
                (Ok(got), Ok(expected)) => assert_eq!(got, *expected, "{text:?}"),
                (Err(got), Err(part)) => assert!(got.contains(part), "{text:?}: {got}"),
                (got, expected) => panic!("{text:?}: {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn switches_are_true_or_false_exactly() {
        let cases: &[(&str, Option<bool>)] = &[
            ("true", Some(true)),
            ("false", Some(false)),
            ("TRUE", None),
            ("True", None),
            ("1", None),
            ("0", None),
            ("yes", None),
            ("", None),
            (" true", None),
        ];
        for (text, expected) in cases {
            let switch = Setting {
                text,
                flag: "--drift-classifier",
                var: ENABLE_SESSION_DRIFT_CLASSIFIER,
                from_flag: false,
            };
            match (switch.switch(), expected) {
                (Ok(got), Some(expected)) => assert_eq!(got, *expected, "{text:?}"),
                (Err(message), None) => {
                    assert!(
                        message.contains(ENABLE_SESSION_DRIFT_CLASSIFIER),
                        "{message}"
                    );
                    assert!(message.contains("true or false"), "{message}");
                }
                (got, expected) => panic!("{text:?}: {got:?}, expected {expected:?}"),
            }
        }
    }
}
