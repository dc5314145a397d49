//! Rows printed for people and spreadsheets, the same way for every command that prints
//! records (`sandpiper audit`, `sandpiper usage`): aligned columns for a terminal, CSV whose
//! fields a spreadsheet shows as text.

/// How a command that prints records prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for a terminal.
    #[default]
    Table,
    /// One JSON object per line (every field of every record).
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

/// Aligned columns under `header`, two spaces apart, without trailing spaces.
pub fn table<const N: usize>(
    header: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let header = header.map(str::to_owned);
    let body: Vec<[String; N]> = rows.into_iter().collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &body {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&body) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// A header line and one line per row, every field through [`csv_field`].
pub fn csv<const N: usize>(
    header: [&str; N],
    rows: impl IntoIterator<Item = [String; N]>,
) -> String {
    let mut out = header.join(",");
    out.push('\n');
    for row in rows {
        out.push_str(&row.map(|c| csv_field(&c)).join(","));
        out.push('\n');
    }
    out
}

/// A CSV field a spreadsheet shows as text: control characters other than line breaks are
/// replaced, and a field that would start a formula (`=`, `+`, `-`, `@`, a tab or a carriage
/// return; what people type into a denial note or a workstream name) gets a leading `'`, as
/// OWASP advises against CSV injection. The JSON lines keep the exact text.
pub fn csv_field(text: &str) -> String {
    let mut field: String = text
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' {
                '\u{FFFD}'
            } else {
                c
            }
        })
        .collect();
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        field.insert(0, '\'');
    }
    if field.contains([',', '"', '\n', '\'']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field
    }
}

/// `text` with every control character replaced by U+FFFD.
pub fn without_controls(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '\u{FFFD}' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_table_aligns_and_a_csv_quotes() {
        let rows = || {
            [
                ["alice".to_owned(), "12".to_owned()],
                ["=1+1".to_owned(), "3".to_owned()],
            ]
        };
        assert_eq!(
            table(["WHO", "N"], rows()),
            "WHO    N\nalice  12\n=1+1   3\n"
        );
        assert_eq!(csv(["who", "n"], rows()), "who,n\nalice,12\n\"'=1+1\",3\n");
    }
}
