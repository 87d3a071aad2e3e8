//! Words and passages: the tokenizer every full-text index of the crate shares, and
//! snippets.

/// The words of `text` for full-text search: lower-cased runs of letters and digits,
/// with a plural `s` dropped from words longer than three letters (`rosters` finds
/// `roster`).
///
/// ```
/// use agent_sessions::transcript::search::tokens;
///
/// assert_eq!(tokens("Swap my ROSTERS, please!"), ["swap", "my", "roster", "please"]);
/// ```
pub fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(|word| {
            let lower = word.to_lowercase();
            match lower.strip_suffix('s') {
                Some(stem) if stem.chars().count() >= 3 && !stem.ends_with('s') => stem.to_owned(),
                _ => lower,
            }
        })
        .collect()
}

/// How many characters of context a snippet keeps on each side of the match.
const SNIPPET_CONTEXT: usize = 60;

/// The passage of `text` around the first word of `query` it contains, with `…` where
/// it was cut; the start of `text` when no word matches.
///
/// ```
/// use agent_sessions::transcript::search::snippet;
///
/// assert_eq!(snippet("Can I swap my Thursday shift?", "shifts"), "Can I swap my Thursday shift?");
/// ```
pub fn snippet(text: &str, query: &str) -> String {
    let wanted = tokens(query);
    let mut position = None;
    let mut offset = 0;
    for word in text.split_inclusive(|c: char| !c.is_alphanumeric()) {
        let bare = word.trim_end_matches(|c: char| !c.is_alphanumeric());
        if !bare.is_empty() && tokens(bare).first().is_some_and(|t| wanted.contains(t)) {
            position = Some(offset);
            break;
        }
        offset += word.len();
    }
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = position.map_or(0, |byte| chars.partition_point(|(i, _)| *i < byte));
    let start = at.saturating_sub(SNIPPET_CONTEXT);
    let end = (at + SNIPPET_CONTEXT).min(chars.len());
    let byte = |index: usize| chars.get(index).map_or(text.len(), |(i, _)| *i);
    let mut passage = String::new();
    if start > 0 {
        passage.push('…');
    }
    passage.push_str(text[byte(start)..byte(end)].trim());
    if end < chars.len() {
        passage.push('…');
    }
    passage
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_fold_case_punctuation_and_plurals() {
        assert_eq!(
            tokens("Rosters; roster. ROSTER"),
            ["roster", "roster", "roster"]
        );
        assert_eq!(tokens("is its bus class"), ["is", "its", "bus", "class"]);
        assert_eq!(tokens("ÉTÉ über 42"), ["été", "über", "42"]);
        assert!(tokens("  ... !!").is_empty());
    }

    #[test]
    fn snippets_centre_the_match_and_mark_cuts() {
        let long = format!("{} the roster changed {}", "a".repeat(100), "b".repeat(100));
        let passage = snippet(&long, "roster");
        assert!(
            passage.starts_with('…') && passage.ends_with('…'),
            "{passage}"
        );
        assert!(passage.contains("the roster changed"), "{passage}");
        assert_eq!(snippet("short text", "absent"), "short text");
        // Multi-byte text is cut on character boundaries.
        let accents = "é".repeat(200) + " incident " + &"ü".repeat(200);
        assert!(snippet(&accents, "incident").contains("incident"));
    }
}
