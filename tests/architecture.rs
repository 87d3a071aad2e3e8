//! `docs/architecture.md` stays true: its table of public items is the one the checked-in
//! API listing (`api/public-api.txt`) gives, and its folders are the crate's folders.

use std::collections::BTreeMap;
use std::path::Path;

const COLUMNS: [&str; 6] = [
    "modules",
    "types",
    "functions",
    "methods",
    "constants",
    "macros",
];

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The table of public items by module, as `api/public_api.py --counts` prints it.
fn surface_table(listing: &str) -> String {
    let items: Vec<(&str, &str)> = listing
        .lines()
        .map(|line| line.split_once(' ').expect("`<kind> <path>` lines"))
        .collect();
    let modules: Vec<&str> = items
        .iter()
        .filter(|(kind, path)| *kind == "mod" && path.matches("::").count() == 1)
        .map(|(_, path)| path.split("::").nth(1).unwrap())
        .collect();
    let mut table: BTreeMap<(bool, String), [usize; 6]> = BTreeMap::new();
    for (kind, path) in &items {
        let parts: Vec<&str> = path.split("::").collect();
        let module = if parts.len() > 2 && modules.contains(&parts[1]) {
            parts[1]
        } else {
            "(root)"
        };
        let column = match *kind {
            "mod" => 0,
            "fn" => 2,
            "method" => 3,
            "const" | "static" => 4,
            "macro" => 5,
            _ => 1,
        };
        table
            .entry((module != "(root)", module.to_owned()))
            .or_default()[column] += 1;
    }
    let mut out = format!(
        "| module | {} | total |\n| --- | {} | --- |\n",
        COLUMNS.join(" | "),
        ["---"; 6].join(" | ")
    );
    let mut totals = [0; 6];
    for ((_, module), counts) in &table {
        for (total, count) in totals.iter_mut().zip(counts) {
            *total += count;
        }
        let cells: Vec<String> = counts.iter().map(usize::to_string).collect();
        let sum: usize = counts.iter().sum();
        out += &format!("| `{module}` | {} | {sum} |\n", cells.join(" | "));
    }
    let cells: Vec<String> = totals.iter().map(usize::to_string).collect();
    let sum: usize = totals.iter().sum();
    out += &format!("| **all** | {} | **{sum}** |\n", cells.join(" | "));
    out
}

#[test]
fn the_public_surface_table_is_the_api_listings() {
    let doc = read("docs/architecture.md");
    let start = "<!-- public-surface:";
    let end = "<!-- /public-surface -->";
    let from = doc.find(start).expect("the public-surface block");
    let from = from + doc[from..].find("-->\n").unwrap() + 4;
    let to = doc.find(end).expect("the end of the public-surface block");
    let expected = surface_table(&read("api/public-api.txt"));
    assert_eq!(
        doc[from..to].trim(),
        expected.trim(),
        "docs/architecture.md's table differs from api/public-api.txt; put this one in:\n{expected}"
    );
}

#[test]
fn every_folder_of_the_crate_is_on_the_map() {
    let doc = read("docs/architecture.md");
    let folders = &doc[doc.find("## Folders").unwrap()..doc.find("## The public surface").unwrap()];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name == "lib.rs" {
            continue;
        }
        let shown = if entry.file_type().unwrap().is_dir() {
            format!("`{name}/`")
        } else {
            format!("`{name}`")
        };
        if !folders.contains(&shown) {
            missing.push(shown);
        }
    }
    assert!(
        missing.is_empty(),
        "not in docs/architecture.md's folders: {missing:?}"
    );
    // And nothing on the map that is not there.
    for line in folders.lines().filter(|l| l.starts_with("| `")) {
        let cell = line.split('|').nth(1).unwrap();
        let paths = cell.split('`').skip(1).step_by(2);
        for named in paths.filter(|n| n.ends_with('/') || n.ends_with(".rs")) {
            let named = named.trim_end_matches('/');
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            assert!(
                src.join(named).exists() || root.join(named).exists(),
                "docs/architecture.md names {named}, which the crate does not have"
            );
        }
    }
}

#[test]
fn ls_src_is_a_short_map() {
    // Each feature is a folder; what belongs to one lives inside it, so the top level
    // stays a map a reader takes in at a glance.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let entries: Vec<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name != "lib.rs" && name != "prelude.rs")
        .collect();
    assert!(
        entries.len() <= 14,
        "src/ has {} entries besides lib.rs and prelude.rs: {entries:?}",
        entries.len()
    );
}
